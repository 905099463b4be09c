"""A write whose watch event proves a cache current: what a consistent read from an informer waits for.

kube-apiserver answers a consistent list from its own watch cache by asking etcd for the current
revision and waiting for etcd's progress notification at that revision; neither is offered to its
clients. What a client can do is write: kube-apiserver sends one watch's events in resourceVersion
order, so once an informer sees the event of a write to an object inside its own selection, it has
seen every change of that selection made before the write. The fence is such an object, one per
informer, that no reader is ever shown (the informer keeps it out of the cache, the kind's backing
selector excludes its label).

Callers that arrive while a write is in flight join the next one: a write sent before a read began
proves nothing about writes that read must reflect. So at most one write is in flight and one waits,
however many reads come at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from shared.api.errors import ApiError
from shared.bodies import JSON

if TYPE_CHECKING:  # kept out at run time: the service's names import the fence's label before the client loads
    from shared.client.kube import ObjectClient

log = logging.getLogger(__name__)

#: Label of every fence object; each stack's backing selector requires its absence.
FENCE_LABEL = "agl.cozystack.io/read-fence"
#: Annotation a fence write changes (the time of the write, so each write is a change).
FENCE_ANNOTATION = "agl.cozystack.io/read-fence-written-at"

Key = tuple[str, str]
WriteFn = Callable[[], Awaitable[str]]


class ReadFence:
    """Coalesced writes to one fence object; ``await fence()`` is the resourceVersion of a write sent
    after the call began."""

    def __init__(self, key: Key, write: WriteFn) -> None:
        #: (namespace, name) of the fence object, for the informer to recognise its events.
        self.key = key
        self._write = write
        self._sending = asyncio.Lock()
        self._next: asyncio.Future[str] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def on(cls, client: ObjectClient, namespace: str, name: str, template: JSON) -> ReadFence:
        """A fence on ``namespace/name`` of ``client``'s resource, created from ``template`` (a whole
        object the resource's schema accepts and its controller ignores) when it does not exist."""

        labels = (template.get("metadata") or {}).get("labels") or {}

        async def write() -> str:
            annotations = {FENCE_ANNOTATION: str(time.time_ns())}
            try:
                # The labels again: a fence someone relabelled would no longer be in the informer's stream.
                written = await client.patch_merge(namespace, name, {"metadata": {"labels": labels,
                                                                                  "annotations": annotations}})
            except ApiError as exc:
                if exc.code != 404:
                    raise
                meta = template.get("metadata") or {}
                body = {**template, "metadata": {**meta, "namespace": namespace, "name": name,
                                                 "annotations": {**(meta.get("annotations") or {}), **annotations}}}
                written = await client.create(namespace, body)
                log.info("read fence created", extra={"fence": f"{client.gvr.plural}/{namespace}/{name}"})
            return str(written["metadata"]["resourceVersion"])

        return cls((namespace, name), write)

    async def __call__(self) -> str:
        if self._next is None:
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            # Read here so that a caller cancelled before the write ends leaves no unretrieved error behind.
            future.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._next = future
            task = asyncio.get_running_loop().create_task(self._send(future))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(self._next)

    async def _send(self, future: asyncio.Future[str]) -> None:
        async with self._sending:
            # From here on, new callers need a later write: this one may already be on its way.
            if self._next is future:
                self._next = None
            try:
                future.set_result(await self._write())
            except Exception as exc:  # every joined caller gets the failure
                future.set_exception(exc)
