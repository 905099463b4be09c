"""Read fences: one write instead of a list from kube-apiserver when the cache cannot prove itself current.

``tests/integration/test_read_fence.py`` checks the same against kube-apiserver with both services; here the
informer's source is the stand-in of ``test_informer_snapshot``, so each case is exact: which
events are in flight, how many fence writes were sent, which failure the write raises.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from shared.api.errors import ApiError
from shared.client.fence import ReadFence
from shared.client.informer import Informer, Tuning
from tests.unit.test_informer_snapshot import Source, cached_list, names, running

FENCE_KEY = ("fences", "read-fence.thing")


class FencedSource(Source):
    """A write to the fence is an event in the informer's own stream, delivered after every earlier one."""

    def __init__(self) -> None:
        super().__init__()
        self.fence_writes = 0
        self.failure: ApiError | None = None

    async def write_fence(self) -> str:
        if self.failure is not None:
            raise self.failure
        self.fence_writes += 1
        self.write(FENCE_KEY[1], namespace=FENCE_KEY[0])
        asyncio.get_running_loop().call_soon(self.deliver)
        return str(self.rv)


@pytest.fixture
def source() -> FencedSource:
    return FencedSource()


@pytest.fixture
async def informer(source: FencedSource) -> AsyncIterator[Informer]:
    async with running(Informer(list_fn=source.list_fn, watch_fn=source.watch_fn, probe_fn=source.probe_fn,
                                fence=ReadFence(FENCE_KEY, source.write_fence), tuning=Tuning(catch_up=0.2),
                                name="things")) as started:
        yield started


async def test_after_writes_elsewhere_the_cache_answers_behind_a_fence(source: FencedSource,
                                                                     informer: Informer) -> None:
    source.write("a")
    source.deliver()
    source.write("elsewhere", relevant=False)
    snapshot = await cached_list(informer, "")
    assert names(snapshot) == ["a"], "the fence is in the stream, never in the cache"
    assert snapshot is not None and int(snapshot[1]) == source.rv, "current at the fence's own write"
    assert source.fence_writes == 1
    assert informer.consistent_lists == {"fence": 1}


async def test_events_in_flight_before_the_fence_are_in_the_answer(source: FencedSource, informer: Informer) -> None:
    source.write("b")
    source.write("a")
    source.write("elsewhere", relevant=False)
    assert names(await cached_list(informer, "")) == ["a", "b"]


async def test_a_current_cache_writes_no_fence(source: FencedSource, informer: Informer) -> None:
    source.write("a")
    source.deliver()
    await asyncio.sleep(0.01)
    assert names(await cached_list(informer, "")) == ["a"]
    assert names(await cached_list(informer, "0")) == ["a"]
    assert source.fence_writes == 0
    assert informer.consistent_lists == {"cache": 1}


async def test_fence_events_reach_watchers_as_bookmarks_only(source: FencedSource, informer: Informer) -> None:
    plain = informer.subscribe(informer.resource_version)
    with_bookmarks = informer.subscribe(informer.resource_version, bookmarks=True)
    plain_next, bookmarked_next = asyncio.create_task(anext(plain)), asyncio.create_task(anext(with_bookmarks))
    await asyncio.sleep(0.01)
    source.write("elsewhere", relevant=False)
    await cached_list(informer, "")
    first = await asyncio.wait_for(bookmarked_next, 5)  # a subscription with bookmarks opens with one at its start
    assert first["type"] == "BOOKMARK" and int(first["object"]["metadata"]["resourceVersion"]) < source.rv
    bookmark = await asyncio.wait_for(anext(with_bookmarks), 5)
    assert bookmark["type"] == "BOOKMARK" and bookmark["object"]["metadata"]["resourceVersion"] == str(source.rv)
    source.write("a")
    source.deliver()
    assert (await asyncio.wait_for(plain_next, 5))["object"]["metadata"]["name"] == "a", "no fence event before it"
    assert (await asyncio.wait_for(anext(with_bookmarks), 5))["object"]["metadata"]["name"] == "a"


async def test_a_fence_in_the_list_is_left_out(source: FencedSource) -> None:
    async def list_with_fence() -> dict[str, object]:
        listed = await source.list_fn()
        listed["items"] = [{"metadata": {"namespace": FENCE_KEY[0], "name": FENCE_KEY[1], "resourceVersion": "3"}},
                           {"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "4"}}]
        return listed

    async with running(Informer(list_fn=list_with_fence, watch_fn=source.watch_fn, probe_fn=source.probe_fn,
                                fence=ReadFence(FENCE_KEY, source.write_fence), name="things")) as informer:
        assert names(await cached_list(informer, "0")) == ["a"]


async def test_a_fence_that_cannot_be_written_declines_and_says_so_once(
        source: FencedSource, informer: Informer, caplog: pytest.LogCaptureFixture) -> None:
    source.failure = ApiError(403, "Forbidden", "helmreleases is forbidden")
    source.write("elsewhere", relevant=False)
    with caplog.at_level(logging.WARNING, logger="shared.client.informer"):
        assert await cached_list(informer, "") is None
        assert await cached_list(informer, "") is None
    assert [r.getMessage() for r in caplog.records].count(
        "things: read fence not written (403 Forbidden: helmreleases is forbidden); consistent lists go to "
        "kube-apiserver") == 1
    assert informer.consistent_lists == {"kube": 2}


async def test_callers_share_a_write_sent_after_they_came() -> None:
    """Reads that come while a write is in flight get the next write, never the one already sent."""
    sent: list[asyncio.Event] = []
    rv = 0

    async def write() -> str:
        nonlocal rv
        rv += 1
        mine, done = rv, asyncio.Event()
        sent.append(done)
        await done.wait()
        return str(mine)

    fence = ReadFence(FENCE_KEY, write)
    first = [asyncio.create_task(fence()) for _ in range(3)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(sent) == 1, "three callers at once: one write"
    later = [asyncio.create_task(fence()) for _ in range(4)]
    await asyncio.sleep(0)
    assert len(sent) == 1, "the next write waits for the one in flight"
    sent[0].set()
    assert await asyncio.gather(*first) == ["1"] * 3
    await asyncio.sleep(0)
    assert len(sent) == 2
    sent[1].set()
    assert await asyncio.gather(*later) == ["2"] * 4


async def test_a_failed_write_fails_every_caller_and_the_next_call_writes_again() -> None:
    calls = 0

    async def write() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ApiError(404, "NotFound", 'namespaces "fences" not found')
        return "7"

    fence = ReadFence(FENCE_KEY, write)
    results = await asyncio.gather(fence(), fence(), return_exceptions=True)
    assert all(isinstance(r, ApiError) and r.code == 404 for r in results)
    assert await fence() == "7" and calls == 2
