"""Every object of one cluster-scoped resource, kept live and each turned into something else once per version.

Admission needs the cluster's policies, bindings and webhook configurations at every request, compiled:
an :class:`~shared.client.informer.Informer` lists and watches (with its retries and re-lists) and
this set sees the same list and the same events as they pass, keeping its own map by name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Generic, TypeVar

from shared.bodies import JSON
from shared.client.informer import Informer
from shared.client.kube import ObjectClient

Item = TypeVar("Item")


class LiveSet(Generic[Item]):
    """The objects of ``client``'s resource by name, each converted by ``convert`` when it changes."""

    def __init__(self, client: ObjectClient, convert: Callable[[JSON], Item]) -> None:
        self._client = client
        self._convert = convert
        self.items: dict[str, Item] = {}
        self.informer = Informer(list_fn=self._list, watch_fn=self._watch, name=client.gvr.plural)

    async def _list(self) -> JSON:
        page = await self._client.list_all(None)
        self.items = {_name(obj): self._convert(obj) for obj in page.get("items") or []}
        return page

    async def _watch(self, resource_version: str) -> AsyncIterator[JSON]:
        async for event in self._client.watch(None, "", resource_version):
            obj = event.get("object") or {}
            if event.get("type") in ("ADDED", "MODIFIED"):
                self.items[_name(obj)] = self._convert(obj)
            elif event.get("type") == "DELETED":
                self.items.pop(_name(obj), None)
            yield event


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))
