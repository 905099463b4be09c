"""The Lease elector against an in-memory Lease store that enforces resourceVersion like kube-apiserver."""

from __future__ import annotations

import asyncio
import copy
import datetime
from pathlib import Path
from typing import Any

import pytest

from shared.api import errors
from shared.api.errors import ApiError
from shared.client.leader import AlwaysLeader, LeaderElector, default_namespace, format_micro_time, parse_time

T0 = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


class Store:
    """Leases by name; a write with a stale resourceVersion gets 409, like kube-apiserver's PUT."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.down = False
        #: Called after the next get returns: lets a test slip a competing write in between read and write.
        self.after_get: Any = None

    def _check(self) -> None:
        if self.down:
            raise ApiError(503, "ServiceUnavailable", "the server is unavailable")

    async def get(self, namespace: str | None, name: str) -> dict[str, Any]:
        self._check()
        if name not in self.leases:
            raise ApiError(404, "NotFound", f"leases {name!r} not found")
        result = copy.deepcopy(self.leases[name])
        if self.after_get is not None:
            hook, self.after_get = self.after_get, None
            await hook()
        return result

    async def create(self, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        name = body["metadata"]["name"]
        if name in self.leases:
            raise ApiError(409, "AlreadyExists", f"leases {name!r} already exists")
        return self._store(name, body)

    async def replace(self, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        current = self.leases.get(name)
        if current is None:
            raise ApiError(404, "NotFound", f"leases {name!r} not found")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise errors.conflict("coordination.k8s.io", "leases", name, "the object has been modified")
        return self._store(name, body)

    def _store(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self.leases[name] = stored
        return copy.deepcopy(stored)

    def holder(self, name: str = "lease") -> str | None:
        lease = self.leases.get(name)
        return None if lease is None else lease["spec"].get("holderIdentity")


def elector(store: Store, clock: Clock, identity: str) -> LeaderElector:
    return LeaderElector(None, "ns", "lease", identity, lease_seconds=15, renew_every=5, leases=store, clock=clock)


async def test_first_candidate_creates_the_lease_and_leads() -> None:
    store, clock = Store(), Clock()
    a = elector(store, clock, "a")
    assert not a.is_leader
    assert await a.step()
    assert a.is_leader
    spec = store.leases["lease"]["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert parse_time(spec["renewTime"]) == T0


async def test_second_candidate_waits_while_the_lease_is_renewed() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.step()
    for _ in range(10):
        clock.advance(5)
        assert await a.step()
        assert not await b.step()
    assert store.holder() == "a"
    assert parse_time(store.leases["lease"]["spec"]["renewTime"]) == clock.now


async def test_expired_lease_is_taken_over_and_the_old_leader_steps_down() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.step()
    clock.advance(15)  # exactly at expiry: still held
    assert not await b.step()
    clock.advance(0.001)
    assert await b.step()
    assert store.holder() == "b"
    assert store.leases["lease"]["spec"]["leaseTransitions"] == 1
    assert parse_time(store.leases["lease"]["spec"]["acquireTime"]) == clock.now
    # The old leader comes back: the Lease names someone else, so it is not the leader any more.
    assert not await a.step()
    assert not a.is_leader and b.is_leader


async def test_racing_candidates_never_both_win() -> None:
    store, clock = Store(), Clock()
    old, a, b = elector(store, clock, "old"), elector(store, clock, "a"), elector(store, clock, "b")
    await old.step()
    clock.advance(30)

    async def b_first() -> None:
        assert await b.step()  # b reads and writes between a's read and a's write

    store.after_get = b_first
    assert not await a.step()  # a's PUT carries the resourceVersion it read: 409
    assert b.is_leader and not a.is_leader
    assert store.holder() == "b"


async def test_racing_creates_never_both_win() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    original_get = store.get

    async def get_then_b_creates(namespace: str | None, name: str) -> dict[str, Any]:
        store.get = original_get  # type: ignore[method-assign]
        try:
            return await original_get(namespace, name)
        finally:
            await b.step()

    store.get = get_then_b_creates  # type: ignore[method-assign]
    assert not await a.step()
    assert b.is_leader and not a.is_leader


async def test_leader_keeps_leading_through_a_short_outage_then_steps_down() -> None:
    store, clock = Store(), Clock()
    a = elector(store, clock, "a")
    await a.step()
    store.down = True
    clock.advance(5)
    assert await a.step()  # 5 s since the last renewal: under the 10 s renew deadline
    clock.advance(5)
    assert not await a.step()  # 10 s: others may soon take over, stop writing now
    assert not a.is_leader
    store.down = False
    clock.advance(1)
    assert await a.step()  # the Lease still names a and has not expired: renewed, leading again
    assert a.is_leader


async def test_elected_and_deposed_events() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await asyncio.wait_for(a.wait_deposed(), 1)
    waiter = asyncio.create_task(a.wait_elected())
    await asyncio.sleep(0)
    assert not waiter.done()
    await a.step()
    await asyncio.wait_for(waiter, 1)
    deposed = asyncio.create_task(a.wait_deposed())
    await asyncio.sleep(0)
    assert not deposed.done()
    clock.advance(16)
    await b.step()
    await a.step()
    await asyncio.wait_for(deposed, 1)


async def test_release_lets_another_take_over_at_once() -> None:
    store, clock = Store(), Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    await a.step()
    await a.release()
    assert not a.is_leader
    assert not store.holder()
    assert await b.step()
    assert store.holder() == "b"


async def test_run_loops_with_the_injected_sleep() -> None:
    store, clock = Store(), Clock()
    a = elector(store, clock, "a")
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)
        if len(sleeps) == 3:
            raise asyncio.CancelledError

    a._sleep = sleep
    with pytest.raises(asyncio.CancelledError):
        await a.run()
    assert sleeps == [5, 5, 5]
    assert a.is_leader
    assert parse_time(store.leases["lease"]["spec"]["renewTime"]) == T0 + datetime.timedelta(seconds=10)


async def test_always_leader() -> None:
    leader = AlwaysLeader()
    assert leader.is_leader
    await asyncio.wait_for(leader.wait_elected(), 1)
    deposed = asyncio.create_task(leader.wait_deposed())
    await asyncio.sleep(0.01)
    assert not deposed.done()
    deposed.cancel()


def test_bad_timings_are_refused() -> None:
    with pytest.raises(ValueError):
        LeaderElector(None, "ns", "lease", "a", lease_seconds=5, renew_every=5, leases=Store())


def test_micro_time_round_trip_and_default_namespace(tmp_path: Path) -> None:
    stamp = format_micro_time(T0 + datetime.timedelta(microseconds=7))
    assert stamp == "2025-01-01T00:00:00.000007Z"
    assert parse_time(stamp) == T0 + datetime.timedelta(microseconds=7)
    assert parse_time("not a time") is None
    path = tmp_path / "namespace"
    assert default_namespace(path) == "default"
    path.write_text("agl-system\n")
    assert default_namespace(path) == "agl-system"
