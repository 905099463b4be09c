"""The leader-election adapter where no control plane is needed: timings, defaults, an unreachable server.

Elections, take-overs, release and a hung renewal run against the real kube-apiserver in
tests/integration/test_leader_election.py.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client as kclient

from shared.client.leader import AlwaysLeader, LeaderElector, default_identity, default_namespace


@pytest.fixture
async def unreachable_api() -> AsyncIterator[kclient.ApiClient]:
    """A client for a port nobody listens on: every call is refused by the operating system."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configuration = kclient.Configuration(host=f"http://127.0.0.1:{port}")
    api = kclient.ApiClient(configuration=configuration)
    try:
        yield api
    finally:
        await api.close()


async def test_always_leader() -> None:
    leader = AlwaysLeader()
    assert leader.is_leader
    await asyncio.wait_for(leader.wait_elected(), 1)
    deposed = asyncio.create_task(leader.wait_deposed())
    await asyncio.sleep(0.01)
    assert not deposed.done()
    deposed.cancel()


@pytest.mark.parametrize(("lease", "deadline", "retry"), [(15, 11, 2), (5, 5, 1), (5, 1, 1), (5, 2, 0.5)])
async def test_unsafe_timings_are_refused(unreachable_api: kclient.ApiClient, lease: float, deadline: float,
                                          retry: float) -> None:
    with pytest.raises(ValueError):
        LeaderElector(unreachable_api, "ns", "lease", "a", lease_duration=lease, renew_deadline=deadline,
                      retry_period=retry)


async def test_an_unreachable_server_leaves_the_candidate_standing(unreachable_api: kclient.ApiClient) -> None:
    elector = LeaderElector(unreachable_api, "ns", "lease", "a", lease_duration=5, renew_deadline=2.5,
                            retry_period=1)
    task = asyncio.create_task(elector.run())
    try:
        await asyncio.sleep(2.5)  # a few refused attempts
        assert not task.done(), task
        assert not elector.is_leader
        await asyncio.wait_for(elector.wait_deposed(), 1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await elector.release()  # not the leader: nothing to give up, and no call is made


def test_defaults(tmp_path: Path) -> None:
    path = tmp_path / "namespace"
    assert default_namespace(path) == "default"
    path.write_text("agl-system\n")
    assert default_namespace(path) == "agl-system"
    assert default_identity().startswith(f"{socket.gethostname()}_")
    assert default_identity() == default_identity()  # stable within one process
