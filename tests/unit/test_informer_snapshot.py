"""``Informer.snapshot``: when a list may be answered from the cache, by kube's resourceVersion rules.

The source is a tiny stand-in for kube-apiserver with one global revision counter: ``write`` bumps it
(as any write anywhere in the cluster does) and queues the event, which reaches the informer only when
``deliver`` is called -- an event still in flight.  The probe answers the current revision, as a
``limit=1`` list does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from shared.bodies import JSON
from shared.client.informer import Informer, without_managed_fields


class Source:
    def __init__(self) -> None:
        self.rv = 10
        self.pending: list[JSON] = []
        self.events: asyncio.Queue[JSON] = asyncio.Queue()

    def write(self, name: str, *, relevant: bool = True) -> None:
        self.rv += 1
        if relevant:
            meta = {"name": name, "namespace": "ns", "resourceVersion": str(self.rv),
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


async def started(source: Source) -> Informer:
    informer = Informer(list_fn=source.list_fn, watch_fn=source.watch_fn, probe_fn=source.probe_fn,
                        transform=without_managed_fields, catch_up=0.2, name="things")
    informer.start()
    await informer.wait_synced()
    return informer


def names(snapshot: tuple[list[JSON], str] | None) -> list[str]:
    assert snapshot is not None
    return [obj["metadata"]["name"] for obj in snapshot[0]]


async def test_a_consistent_read_waits_for_an_event_in_flight() -> None:
    source = Source()
    informer = await started(source)
    try:
        source.write("b")
        source.write("a")
        asyncio.get_running_loop().call_later(0.05, source.deliver)
        snapshot = await informer.snapshot("")
        assert names(snapshot) == ["a", "b"]
        assert snapshot is not None and snapshot[1] == str(source.rv)
        assert "managedFields" not in snapshot[0][0]["metadata"]
    finally:
        await informer.stop()


async def test_a_consistent_read_declines_when_the_cache_cannot_prove_it_is_current() -> None:
    source = Source()
    informer = await started(source)
    try:
        source.write("a")
        assert await informer.snapshot("") is None, "the event is not delivered: the cache must not answer"
        source.deliver()
        source.write("elsewhere", relevant=False)
        assert await informer.snapshot("") is None, "a later revision it never sees: kube must answer"
    finally:
        await informer.stop()


async def test_resource_version_zero_is_any_state_and_n_is_not_older_than_n() -> None:
    source = Source()
    informer = await started(source)
    try:
        source.write("a")
        assert names(await informer.snapshot("0")) == []
        assert await informer.snapshot(str(source.rv)) is None
        source.deliver()
        assert names(await informer.snapshot(str(source.rv))) == ["a"]
        assert await informer.snapshot("not-a-number") is None
    finally:
        await informer.stop()
