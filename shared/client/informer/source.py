"""Where a cache of kube-apiserver objects reads from: a paged list, a watch with bookmarks, and a probe."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NamedTuple

from shared.bodies import JSON
from shared.client.kube import ObjectClient

from .reflector import ListFn, WatchFn

#: The current revision of the resource, read as cheaply as kube-apiserver allows.
ProbeFn = Callable[[], Awaitable[str]]


class Source(NamedTuple):
    list_fn: ListFn
    watch_fn: WatchFn
    #: None: the source cannot tell its current revision, so consistent reads never use the cache.
    probe_fn: ProbeFn | None


def kube_source(client: ObjectClient, namespace: str | None, label_selector: str, *,
                page_size: int, watch_timeout: int, keep: Callable[[Any, JSON], Any] | None = None,
                raw_items: bool = False) -> Source:
    """One resource of kube-apiserver (one namespace and label selector, if given); ``keep`` turns each
    listed item into what the list holds, page by page, the item's fields still encoded with ``raw_items``
    (see :meth:`ObjectClient.list_all`)."""

    async def list_all() -> JSON:
        return await client.list_all(namespace, label_selector, page_size=page_size, keep=keep,
                                     raw_items=raw_items)

    def watch(rv: str) -> AsyncIterator[JSON]:
        return client.watch(namespace, label_selector, rv, timeout_seconds=watch_timeout, allow_bookmarks=True)

    async def probe() -> str:
        # The cheapest consistent read there is: its list RV is the current revision.
        page = await client.list(namespace, limit=1)
        return str((page.get("metadata") or {}).get("resourceVersion") or "")

    return Source(list_all, watch, probe)
