"""Informer semantics against a fake list/watch source (no cluster).

``FakeKube`` behaves like kube-apiserver for one resource: a global, increasing resourceVersion,
lists at the current RV, watches that deliver every change after the RV they start from, and
knobs to break the watch, expire it with a 410 ERROR event, or take the "server" down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from shared.api.errors import ApiError
from shared.bodies import JSON
from shared.client.informer import Informer, Subscription, Tuning
from tests.unit.waiting import eventually


class FakeKube:
    def __init__(self) -> None:
        self.rv = 100
        self.objects: dict[str, JSON] = {}
        self.watchers: list[asyncio.Queue[JSON | BaseException | None]] = []
        self.down = False
        self.lists = 0

    # -- mutations -------------------------------------------------------------------------
    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, type_: str, obj: JSON) -> None:
        for q in self.watchers:
            q.put_nowait({"type": type_, "object": dict(obj)})

    def put(self, name: str, value: str, ns: str = "ns", *, quiet: bool = False) -> JSON:
        type_ = "MODIFIED" if name in self.objects else "ADDED"
        uid = self.objects[name]["metadata"]["uid"] if name in self.objects else f"uid-{name}"
        obj: JSON = {
            "apiVersion": "example.com/v1",
            "kind": "Thing",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": self._bump()},
            "spec": {"value": value},
        }
        self.objects[name] = obj
        if not quiet:
            self._emit(type_, obj)
        return obj

    def delete(self, name: str, *, quiet: bool = False) -> None:
        obj = dict(self.objects.pop(name))
        obj["metadata"] = dict(obj["metadata"], resourceVersion=self._bump())
        if not quiet:
            self._emit("DELETED", obj)

    def bookmark(self) -> None:
        for q in self.watchers:
            obj = {"kind": "Thing", "metadata": {"resourceVersion": str(self.rv)}}
            q.put_nowait({"type": "BOOKMARK", "object": obj})

    def break_watches(self) -> None:
        for q in self.watchers:
            q.put_nowait(ConnectionResetError("kube-apiserver went away"))

    def expire_watches(self) -> None:
        status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
        for q in self.watchers:
            q.put_nowait({"type": "ERROR", "object": status})

    # -- list/watch callables ------------------------------------------------------------------
    async def list_fn(self) -> JSON:
        if self.down:
            raise ConnectionRefusedError("connection refused")
        self.lists += 1
        return {
            "apiVersion": "example.com/v1",
            "kind": "ThingList",
            "metadata": {"resourceVersion": str(self.rv)},
            "items": [dict(o) for o in self.objects.values()],
        }

    async def watch_fn(self, rv: str) -> AsyncIterator[JSON]:
        if self.down:
            raise ConnectionRefusedError("connection refused")
        assert int(rv) == self.rv, "the informer must watch from the RV it last saw"
        q: asyncio.Queue[JSON | BaseException | None] = asyncio.Queue()
        self.watchers.append(q)
        try:
            while True:
                item = await q.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.watchers.remove(q)


async def _informer(kube: FakeKube, **kw: Any) -> Informer:
    kw.setdefault("backoff_initial", 0.01)
    kw.setdefault("backoff_max", 0.05)
    inf = Informer(list_fn=kube.list_fn, watch_fn=kube.watch_fn, name="things", tuning=Tuning(**kw))
    inf.start()
    async with asyncio.timeout(2):
        await inf.wait_synced()
    await eventually(lambda: bool(kube.watchers))
    return inf


async def _settle(inf: Informer, kube: FakeKube) -> None:
    """Wait until the informer has caught up with the fake and is watching again."""
    await eventually(lambda: inf.resource_version == str(kube.rv) and bool(kube.watchers))


async def _take(sub: Subscription, n: int) -> list[JSON]:
    out = []
    async with asyncio.timeout(2):
        for _ in range(n):
            out.append(await anext(sub))
    return out


async def _nothing_more(sub: Subscription) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await anext(sub)


async def _cached(inf: Informer) -> list[JSON]:
    """The cache as a client sees it: a watch from no resourceVersion replays it as ADDED events."""
    async with inf.subscribe() as sub:
        events = []
        while True:
            try:
                async with asyncio.timeout(0.05):
                    events.append(await anext(sub))
            except TimeoutError:
                break
    assert {e["type"] for e in events} <= {"ADDED"}, events
    return sorted((e["object"] for e in events), key=lambda o: (o["metadata"].get("namespace", ""),
                                                                o["metadata"]["name"]))


async def _cached_names(inf: Informer) -> list[str]:
    return [o["metadata"]["name"] for o in await _cached(inf)]


def _summary(events: list[JSON]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"]["name"]) for e in events]


def _rvs(events: list[JSON]) -> list[int]:
    return [int(e["object"]["metadata"]["resourceVersion"]) for e in events]


async def test_initial_sync_caches_the_listed_objects() -> None:
    kube = FakeKube()
    kube.put("b", "1", ns="n2")
    kube.put("a", "1", ns="n1")
    inf = await _informer(kube)
    try:
        assert inf.resource_version == str(kube.rv)
        first, _ = await _cached(inf)
        assert first["metadata"]["name"] == "a" and first["spec"]["value"] == "1"
        first["spec"]["value"] = "mutated"  # copies: the cache is not affected
        assert (await _cached(inf))[0]["spec"]["value"] == "1"
        kube.put("a", "2", ns="n1")
        await _settle(inf, kube)
        assert [o["spec"]["value"] for o in await _cached(inf)] == ["2", "1"]
    finally:
        await inf.stop()


async def test_subscribe_without_rv_gets_current_state_then_live() -> None:
    kube = FakeKube()
    kube.put("a", "1")
    kube.put("b", "1")
    inf = await _informer(kube)
    try:
        async with inf.subscribe(None) as sub, inf.subscribe("0") as sub0:
            for s in (sub, sub0):
                assert _summary(await _take(s, 2)) == [("ADDED", "a"), ("ADDED", "b")]
            kube.put("c", "1")
            kube.put("a", "2")
            kube.delete("b")
            expected = [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
            for s in (sub, sub0):
                assert _summary(await _take(s, 3)) == expected
                await _nothing_more(s)
    finally:
        await inf.stop()


async def test_a_cache_not_listed_yet_is_unavailable_until_its_first_list() -> None:
    """A watch served before the first list would be a silent stream: 503, as kube-apiserver answers while its own
    watch cache initializes, and the cache serves once the list came."""
    kube = FakeKube()
    kube.put("a", "1")
    kube.down = True
    inf = Informer(list_fn=kube.list_fn, watch_fn=kube.watch_fn, name="things",
                   tuning=Tuning(backoff_initial=0.01, backoff_max=0.05))
    inf.start()
    try:
        with pytest.raises(ApiError) as caught:
            await inf.require_synced(0.05)
        assert caught.value.code == 503
        assert caught.value.message == ("the things watch cache is initializing: its first list from kube-apiserver "
                                         "has not completed")
        kube.down = False
        await inf.require_synced(2)
        assert inf.synced
    finally:
        await inf.stop()


async def test_a_watcher_is_handed_only_the_keys_it_accepts() -> None:
    """Of the current state, of the live events and of a resumed watch's history (``replay_keys``)."""
    kube = FakeKube()
    kube.put("a", "1")
    kube.put("b", "1")
    kube.put("c", "1", ns="other")
    inf = await _informer(kube)
    try:
        async with inf.subscribe("0", replay_keys=lambda key: key == ("ns", "b")) as sub:
            assert _summary(await _take(sub, 1)) == [("ADDED", "b")]
            await _nothing_more(sub)
            kube.put("a", "2")
            kube.delete("c")
            kube.put("b", "2")
            assert _summary(await _take(sub, 1)) == [("MODIFIED", "b")]
            await _nothing_more(sub)
        resumed_from = str(int(kube.objects["b"]["metadata"]["resourceVersion"]) - 3)  # before a's change
        async with inf.subscribe(resumed_from, replay_keys=lambda key: key == ("ns", "b")) as sub:
            assert _summary(await _take(sub, 1)) == [("MODIFIED", "b")]
            await _nothing_more(sub)
        async with inf.subscribe("0", replay_keys=lambda key: key[0] == "ns") as sub:
            assert _summary(await _take(sub, 2)) == [("ADDED", "a"), ("ADDED", "b")]  # by resourceVersion
            await _nothing_more(sub)
    finally:
        await inf.stop()


async def test_a_watcher_of_one_name_is_not_cut_off_by_the_changes_of_others() -> None:
    """Its buffer holds its own object's events only: a busy kind does not end its watch with 410."""
    kube = FakeKube()
    kube.put("mine", "1")
    inf = await _informer(kube, queue_size=3)
    try:
        async with inf.subscribe("0", replay_keys=lambda key: key == ("ns", "mine")) as sub:
            assert _summary(await _take(sub, 1)) == [("ADDED", "mine")]
            for i in range(10):  # not read meanwhile: three of them would fill a buffer of every event
                kube.put(f"other-{i}", "1")
            kube.put("mine", "2")
            await eventually(lambda: kube.rv == int(inf.resource_version or 0))
            assert _summary(await _take(sub, 1)) == [("MODIFIED", "mine")]
            await _nothing_more(sub)
    finally:
        await inf.stop()


async def test_looking_at_every_cached_object_lets_other_tasks_run_in_between() -> None:
    """A rollout round goes through the whole cache (``Informer.kept``) beside the requests being served."""
    kube = FakeKube()
    for i in range(20):
        kube.put(f"o{i}", "1")

    async def probe() -> str:  # the current revision: the cache may answer as a consistent list would
        return str(kube.rv)

    inf = Informer(list_fn=kube.list_fn, watch_fn=kube.watch_fn, probe_fn=probe, name="things")
    inf.start()
    await _settle(inf, kube)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    def slow(obj: JSON) -> str:
        time.sleep(0.002)
        return str(obj["metadata"]["name"])

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    try:
        before = turns
        kept = await inf.kept(slow, slice_s=0.005)
        assert sorted(kept) == sorted(f"o{i}" for i in range(20))
        assert turns - before >= 5, "the cache held the event loop for the whole 40 ms"
    finally:
        task.cancel()
        await inf.stop()


async def test_live_events_in_order() -> None:
    kube = FakeKube()
    inf = await _informer(kube)
    try:
        async with inf.subscribe(inf.resource_version) as sub:
            kube.put("c", "1")
            kube.put("c", "2")
            kube.delete("c")
            events = await _take(sub, 3)
            assert _summary(events) == [("ADDED", "c"), ("MODIFIED", "c"), ("DELETED", "c")]
            assert _rvs(events) == sorted(_rvs(events))
            await _nothing_more(sub)
    finally:
        await inf.stop()


async def test_history_replay_from_rv() -> None:
    kube = FakeKube()
    inf = await _informer(kube)
    try:
        a = kube.put("a", "1")
        kube.put("b", "1")
        kube.put("a", "2")
        await _settle(inf, kube)
        async with inf.subscribe(a["metadata"]["resourceVersion"]) as sub:
            assert _summary(await _take(sub, 2)) == [("ADDED", "b"), ("MODIFIED", "a")]
            kube.delete("b")
            assert _summary(await _take(sub, 1)) == [("DELETED", "b")]
            await _nothing_more(sub)
        # resuming from the current RV replays nothing
        async with inf.subscribe(inf.resource_version) as sub:
            await _nothing_more(sub)
    finally:
        await inf.stop()


async def test_a_modified_event_carries_the_object_before_it_live_replayed_and_relisted() -> None:
    """What a watcher's label selector is decided on, besides the object: the object as the cache held it."""
    kube = FakeKube()
    inf = await _informer(kube)

    def before(event: JSON) -> Any:
        return inf.unpack(event["previous"])["spec"]["value"] if "previous" in event else None

    try:
        created = kube.put("a", "1")
        await _settle(inf, kube)
        async with inf.subscribe(inf.resource_version) as live:
            kube.put("a", "2")
            kube.put("a", "3")
            kube.delete("a")
            events = await _take(live, 3)
        assert [(e["type"], e["object"]["spec"]["value"], before(e)) for e in events] == [
            ("MODIFIED", "2", "1"), ("MODIFIED", "3", "2"), ("DELETED", "3", None)]
        async with inf.subscribe(created["metadata"]["resourceVersion"]) as replayed:
            assert [before(e) for e in await _take(replayed, 3)] == ["1", "2", None]
        kube.put("b", "1")
        await _settle(inf, kube)
        async with inf.subscribe(inf.resource_version) as relisted:
            kube.break_watches()
            kube.down = True
            kube.put("b", "2", quiet=True)
            kube.put("c", "1", quiet=True)
            await asyncio.sleep(0.05)
            kube.down = False
            await _settle(inf, kube)
            assert sorted((e["type"], e["object"]["metadata"]["name"], before(e))
                          for e in await _take(relisted, 2)) == [("ADDED", "c", None), ("MODIFIED", "b", "1")]
    finally:
        await inf.stop()


async def test_rv_older_than_history_is_410() -> None:
    kube = FakeKube()
    start_rv = str(kube.rv)
    inf = await _informer(kube, history_size=3)
    try:
        first = kube.put("a", "1")
        for i in range(4):
            kube.put("b", str(i))
        await _settle(inf, kube)
        for old in (first["metadata"]["resourceVersion"], start_rv, "1"):
            with pytest.raises(ApiError) as info:
                await anext(inf.subscribe(old))
            assert info.value.code == 410
            assert info.value.reason == "Expired"
        # the oldest retained window still works
        async with inf.subscribe(str(kube.rv - 3)) as sub:
            assert len(await _take(sub, 3)) == 3
        with pytest.raises(ApiError) as info:
            await anext(inf.subscribe("not-a-number"))
        assert info.value.code == 400
    finally:
        await inf.stop()


async def test_relist_after_upstream_break_emits_exact_diff() -> None:
    kube = FakeKube()
    for name in ("keep", "change", "drop", "drop2", "drop3"):
        kube.put(name, "1")
    inf = await _informer(kube)
    try:
        sub = inf.subscribe(inf.resource_version)
        mark = inf.resource_version
        kube.break_watches()
        kube.down = True
        # changes the informer cannot see while kube-apiserver is away
        kube.put("change", "2", quiet=True)
        kube.delete("drop", quiet=True)
        kube.put("new", "1", quiet=True)
        kube.put("change", "3", quiet=True)
        kube.delete("drop2", quiet=True)
        kube.delete("drop3", quiet=True)
        kube.put("drop", "recreated", quiet=True)  # same name, new incarnation
        await asyncio.sleep(0.05)
        kube.down = False
        await _settle(inf, kube)

        events = await _take(sub, 5)
        await _nothing_more(sub)
        expected = [
            ("MODIFIED", "change"),
            ("DELETED", "drop2"),
            ("DELETED", "drop3"),
            ("ADDED", "new"),
            ("MODIFIED", "drop"),  # deleted and recreated while away: one MODIFIED
        ]
        assert sorted(_summary(events)) == sorted(expected)
        rvs = _rvs(events)
        assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs), "distinct, increasing RVs"
        assert all(int(mark) < rv <= kube.rv for rv in rvs)
        changed = next(e for e in events if e["object"]["metadata"]["name"] == "change")
        assert changed["object"]["spec"]["value"] == "3"
        assert await _cached_names(inf) == ["change", "drop", "keep", "new"]

        # a client that saw only the first synthetic event resumes with exactly the rest
        async with inf.subscribe(str(rvs[0])) as resumed:
            assert _summary(await _take(resumed, 4)) == _summary(events[1:])
            await _nothing_more(resumed)

        # and the informer keeps watching afterwards
        kube.put("keep", "2")
        assert _summary(await _take(sub, 1)) == [("MODIFIED", "keep")]
        await sub.aclose()
    finally:
        await inf.stop()


async def test_upstream_410_relists_without_duplicates() -> None:
    kube = FakeKube()
    kube.put("a", "1")
    inf = await _informer(kube)
    try:
        async with inf.subscribe(inf.resource_version) as sub:
            lists = kube.lists
            kube.put("a", "2")  # seen live
            assert _summary(await _take(sub, 1)) == [("MODIFIED", "a")]
            kube.expire_watches()
            kube.put("b", "1", quiet=True)  # missed by the expired watch
            await _settle(inf, kube)
            assert kube.lists == lists + 1
            assert _summary(await _take(sub, 1)) == [("ADDED", "b")]
            await _nothing_more(sub)  # "a" is not re-sent
    finally:
        await inf.stop()


async def test_relist_with_no_changes_emits_nothing() -> None:
    kube = FakeKube()
    kube.put("a", "1")
    inf = await _informer(kube)
    try:
        async with inf.subscribe(inf.resource_version) as sub:
            kube.break_watches()
            await asyncio.sleep(0.05)
            await _settle(inf, kube)
            await _nothing_more(sub)
    finally:
        await inf.stop()


async def test_slow_subscriber_is_closed_with_410() -> None:
    kube = FakeKube()
    inf = await _informer(kube, queue_size=3)
    try:
        slow = inf.subscribe(inf.resource_version)
        fast = inf.subscribe(inf.resource_version)
        await _nothing_more(slow)  # registers both before the burst
        await _nothing_more(fast)
        for i in range(6):
            kube.put(f"o{i}", "1")
            if i % 2:
                await _settle(inf, kube)
                await _take(fast, 2)
        await _settle(inf, kube)
        with pytest.raises(ApiError) as info:
            await anext(slow)
        assert info.value.code == 410
        with pytest.raises(StopAsyncIteration):
            await anext(slow)
        kube.put("later", "1")
        assert _summary(await _take(fast, 1)) == [("ADDED", "later")]
        await fast.aclose()
    finally:
        await inf.stop()


async def test_bookmarks_pass_through_to_those_who_asked() -> None:
    kube = FakeKube()
    inf = await _informer(kube)
    try:
        with_bm = inf.subscribe(inf.resource_version, bookmarks=True)
        without = inf.subscribe(inf.resource_version)
        first = await _take(with_bm, 1)  # the bookmark at the start position
        assert first[0]["type"] == "BOOKMARK"
        await _nothing_more(without)
        kube.put("x", "1", quiet=True)  # advances the RV without an event for us
        kube.bookmark()
        await _settle(inf, kube)
        ev = (await _take(with_bm, 1))[0]
        assert ev["type"] == "BOOKMARK" and ev["object"]["metadata"]["resourceVersion"] == str(kube.rv)
        assert ev["object"]["kind"] == "Thing"
        await _nothing_more(without)
        await with_bm.aclose()
        await without.aclose()
    finally:
        await inf.stop()


async def test_rv_going_backwards_resets_subscribers() -> None:
    kube = FakeKube()
    kube.put("a", "1")
    inf = await _informer(kube)
    try:
        sub = inf.subscribe(inf.resource_version)
        await _nothing_more(sub)
        kube.break_watches()
        kube.down = True
        await asyncio.sleep(0.02)
        kube.rv = 5  # a new etcd
        kube.objects.clear()
        kube.put("z", "1", quiet=True)
        kube.down = False
        await _settle(inf, kube)
        with pytest.raises(ApiError) as info:
            await anext(sub)
        assert info.value.code == 410
        assert await _cached_names(inf) == ["z"]
    finally:
        await inf.stop()


async def test_subscribe_before_sync_waits_and_stop_ends_streams() -> None:
    kube = FakeKube()
    kube.put("a", "1")
    kube.down = True
    inf = Informer(list_fn=kube.list_fn, watch_fn=kube.watch_fn, tuning=Tuning(backoff_initial=0.01, backoff_max=0.02))
    inf.start()
    try:
        sub = inf.subscribe(None)
        pending = asyncio.ensure_future(anext(sub))
        await asyncio.sleep(0.05)
        assert not pending.done() and not inf.synced
        kube.down = False
        async with asyncio.timeout(2):
            first = await pending
        assert _summary([first]) == [("ADDED", "a")]
        waiting = inf.subscribe(None)
        never_synced = Informer(list_fn=FakeKube().list_fn, watch_fn=kube.watch_fn)
        blocked = never_synced.subscribe(None)
        blocked_next = asyncio.ensure_future(anext(blocked))
        await asyncio.sleep(0.01)
        await never_synced.stop()  # ends subscriptions still waiting for a first list
        with pytest.raises(StopAsyncIteration):
            await blocked_next
        await _take(waiting, 1)
    finally:
        await inf.stop()
    with pytest.raises(StopAsyncIteration):
        await anext(sub)
    with pytest.raises(StopAsyncIteration):
        await anext(inf.subscribe(None))  # subscribing to a stopped informer ends at once


async def test_lookup_answers_gets_at_a_resource_version_from_the_cache() -> None:
    """A GET at "0" (any state) or at N (not older than N) is answered from the cache, present or absent; a
    consistent GET, an invalid version and a version the cache never reaches are left to kube-apiserver."""
    kube = FakeKube()
    kube.put("a", "1")
    inf = await _informer(kube, catch_up=0.05)
    try:
        found = await inf.lookup(("ns", "a"), "0")
        assert found is not None and found.packed is not None and inf.unpack(found.packed)["spec"] == {"value": "1"}
        absent = await inf.lookup(("ns", "b"), "0")
        assert absent is not None and absent.packed is None
        written = kube.put("a", "2")
        at = written["metadata"]["resourceVersion"]
        seen = await inf.lookup(("ns", "a"), at)
        assert seen is not None and seen.packed is not None and inf.unpack(seen.packed)["spec"] == {"value": "2"}
        assert seen.rv == int(at), "the revision comes with the object: a reader tells by it what is still current"
        assert await inf.lookup(("ns", "a"), "") is None
        assert await inf.lookup(("ns", "a"), "not-a-version") is None
        assert await inf.lookup(("ns", "a"), str(kube.rv + 100)) is None
    finally:
        await inf.stop()


@pytest.mark.parametrize("code", [429, 503])
async def test_a_list_answered_429_is_tried_again_when_it_says_and_other_failures_back_off(code: int) -> None:
    """kube-apiserver answers a list 429 with Retry-After while its watch cache initializes after a restart: the
    cache lists again after that second, not after its own backoff (30 s here), which would leave the kind unserved
    that long. Any other failure, a 503 with Retry-After too, backs off as before."""
    kube = FakeKube()
    kube.put("a", "1")
    refused = [ApiError(code, "TooManyRequests", "storage is (re)initializing", retry_after=0)] * 2
    listed = kube.list_fn

    async def list_fn() -> JSON:
        if refused:
            raise refused.pop()
        return await listed()

    inf = Informer(list_fn=list_fn, watch_fn=kube.watch_fn, name="things",
                   tuning=Tuning(backoff_initial=30.0, backoff_max=60.0))
    inf.start()
    try:
        if code == 429:
            async with asyncio.timeout(5):
                await inf.wait_synced()
            assert inf.size == 1 and not refused
        else:
            await asyncio.sleep(1.0)
            assert not inf.synced and len(refused) == 1, "still waiting out its backoff after the first failure"
    finally:
        await inf.stop()
