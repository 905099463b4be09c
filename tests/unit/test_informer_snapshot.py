"""``Informer.entries``: when a list may be answered from the cache, by kube's resourceVersion rules.

The source is a tiny stand-in for kube-apiserver with one global revision counter: ``write`` bumps it
(as any write anywhere in the cluster does) and queues the event, which reaches the informer only when
``deliver`` is called -- an event still in flight.  The probe answers the current revision, as a
``limit=1`` list does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from shared.bodies import JSON
from shared.client.informer import Informer, Tuning, without_managed_fields


class Source:
    def __init__(self) -> None:
        self.rv = 10
        self.pending: list[JSON] = []
        self.events: asyncio.Queue[JSON] = asyncio.Queue()

    def write(self, name: str, *, relevant: bool = True, namespace: str = "ns") -> None:
        self.rv += 1
        if relevant:
            meta = {"name": name, "namespace": namespace, "resourceVersion": str(self.rv),
                    "managedFields": [{"manager": "kubectl"}]}
            self.pending.append({"type": "ADDED", "object": {"metadata": meta}})

    def deliver(self) -> None:
        for event in self.pending:
            self.events.put_nowait(event)
        self.pending.clear()

    async def list_fn(self) -> JSON:
        return {"kind": "ThingList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}, "items": []}

    async def watch_fn(self, rv: str) -> AsyncIterator[JSON]:
        while True:
            yield await self.events.get()

    async def probe_fn(self) -> str:
        return str(self.rv)


@pytest.fixture
def source() -> Source:
    return Source()


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    """``informer`` started and synced; stopped on the way out."""
    informer.start()
    try:
        await informer.wait_synced()
        yield informer
    finally:
        await informer.stop()


@pytest.fixture
async def informer(source: Source) -> AsyncIterator[Informer]:
    """Synced on ``source``, stopped after the test."""
    async with running(Informer(list_fn=source.list_fn, watch_fn=source.watch_fn, probe_fn=source.probe_fn,
                                transform=without_managed_fields, tuning=Tuning(catch_up=0.2),
                                name="things")) as started:
        yield started


async def cached_list(informer: Informer, resource_version: str | None,
                   namespace: str | None = None) -> tuple[list[JSON], str] | None:
    """What a list reads of the cache: :meth:`Informer.entries`, decoded."""
    found = await informer.entries(resource_version, namespace)
    return None if found is None else ([informer.unpack(entry.packed) for entry in found[0]], found[1])


def names(snapshot: tuple[list[JSON], str] | None) -> list[str]:
    assert snapshot is not None
    return [obj["metadata"]["name"] for obj in snapshot[0]]


async def test_a_consistent_read_waits_for_an_event_in_flight(source: Source, informer: Informer) -> None:
    source.write("b")
    source.write("a")
    asyncio.get_running_loop().call_later(0.05, source.deliver)
    snapshot = await cached_list(informer, "")
    assert names(snapshot) == ["a", "b"]
    assert snapshot is not None and snapshot[1] == str(source.rv)
    assert "managedFields" not in snapshot[0][0]["metadata"]


async def test_a_consistent_read_declines_when_the_cache_cannot_prove_it_is_current(
        source: Source, informer: Informer) -> None:
    source.write("a")
    assert await cached_list(informer, "") is None, "the event is not delivered: the cache must not answer"
    source.deliver()
    source.write("elsewhere", relevant=False)
    assert await cached_list(informer, "") is None, "a later revision it never sees: kube must answer"


async def test_resource_version_zero_is_any_state_and_n_is_not_older_than_n(source: Source, informer: Informer) -> None:
    source.write("a")
    assert names(await cached_list(informer, "0")) == []
    assert await cached_list(informer, str(source.rv)) is None
    source.deliver()
    assert names(await cached_list(informer, str(source.rv))) == ["a"]
    assert await cached_list(informer, "not-a-number") is None


async def test_a_namespace_snapshot_holds_that_namespace_only(source: Source, informer: Informer) -> None:
    """A namespaced list is answered from the objects of its namespace; the others stay packed."""
    source.write("b", namespace="other")
    source.write("a")
    source.deliver()
    snapshot = await cached_list(informer, str(source.rv), "other")
    assert snapshot is not None and [o["metadata"]["namespace"] for o in snapshot[0]] == ["other"]
    assert names(await cached_list(informer, "0")) == ["a", "b"]


async def test_readers_get_their_own_copies(source: Source, informer: Informer) -> None:
    """The cache keeps objects packed: what a snapshot or a watch hands out is the reader's to change."""
    source.write("a")
    source.deliver()
    snapshot = await cached_list(informer, str(source.rv))
    assert snapshot is not None
    snapshot[0][0]["metadata"]["name"] = "changed by a reader"
    assert names(await cached_list(informer, "0")) == ["a"]
    assert "managedFields" not in snapshot[0][0]["metadata"], "the transform applies to what is kept"
    subscription = informer.subscribe("0")
    event = await anext(subscription)
    event["object"]["metadata"]["labels"] = {"changed": "by a watcher"}
    assert "labels" not in (await cached_list(informer, "0") or ([{}], ""))[0][0]["metadata"]
    await subscription.aclose()


