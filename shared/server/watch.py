"""``watch``: a storage's events streamed as chunked JSON lines, until timeout, error, client or server goes away.

A pump task moves the storage's events into a queue so the writer can watch the clock and the
connection between events.  A watch that fails before its first event (within ``start_grace``)
is answered with a plain Status and its code, as kube-apiserver does; later failures become an
ERROR event that ends the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from shared.api import errors, table
from shared.api.rest import ListOptions, RequestContext, Storage
from shared.bodies import JSON, dumps
from shared.server.call import Call
from shared.server.metrics import Metrics

log = logging.getLogger(__name__)

#: What the pump hands the writer: ("event", event), ("error", ApiError) or ("end", None).
_Item = tuple[str, Any]
_TABLE_ROW_EVENTS = ("ADDED", "MODIFIED", "DELETED")


async def serve(
    call: Call, request: web.Request, *, stopping: asyncio.Event, metrics: Metrics, start_grace: float
) -> web.StreamResponse:
    """Stream the watch ``call`` describes on ``request``'s connection; ``stopping`` ends it on shutdown."""
    deadline = _Deadline(call.info.list_options.timeout_seconds)
    queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=256)
    pump = asyncio.create_task(_pump(_events(call), queue))
    gauge = metrics.watchers.labels(call.storage.info.group, call.storage.info.plural)
    response: web.StreamResponse | None = None

    def ended() -> bool:
        return stopping.is_set() or request.transport is None or request.transport.is_closing()

    try:
        first = await next_item(queue, start_grace, deadline.remaining())
        if first is not None and first[0] == "error":
            raise first[1]  # nothing is sent yet: answer with the Status and its code
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
        )
        response.enable_chunked_encoding()
        await response.prepare(request)
        gauge.inc()
        await _stream(response, queue, first, _Encoder(call), deadline, ended)
    except (ConnectionResetError, ConnectionError):
        log.debug("watch client went away", extra={"request_id": call.ctx.request_id})
    finally:
        pump.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pump
        if response is not None and response.prepared:
            gauge.dec()
    assert response is not None
    with contextlib.suppress(ConnectionResetError, ConnectionError):
        await response.write_eof()
    return response


async def _stream(
    response: web.StreamResponse,
    queue: asyncio.Queue[_Item],
    item: _Item | None,
    encode: _Encoder,
    deadline: _Deadline,
    ended: Callable[[], bool],
) -> None:
    """Write items as they come; between them, stop at the deadline or when the connection or server ends."""
    while True:
        if item is not None:
            what, payload = item
            if what == "end":
                return
            if what == "error":
                payload = {"type": "ERROR", "object": payload.status()}
            await response.write(encode(payload))
            if payload.get("type") == "ERROR":
                return
        left = deadline.remaining()
        if (left is not None and left <= 0) or ended():
            return
        item = await next_item(queue, 1.0, left)


class _Deadline:
    """The watch's ``timeoutSeconds`` on the event loop's clock."""

    def __init__(self, timeout_seconds: int | None) -> None:
        self._loop = asyncio.get_running_loop()
        self._at = self._loop.time() + timeout_seconds if timeout_seconds else None

    def remaining(self) -> float | None:
        return None if self._at is None else self._at - self._loop.time()


class _Encoder:
    """One event as a JSON line, rendered as negotiated; a Table watch sends column headers only once."""

    def __init__(self, call: Call) -> None:
        self._storage = call.storage
        self._output = call.info.output
        self._headers_sent = False

    def __call__(self, event: JSON) -> bytes:
        rendering = self._output.rendering
        rendered = table.watch_event(
            self._storage.info,
            event,
            self._storage.table_cells,
            rendering,
            include=self._output.include,
            headers=not self._headers_sent,
        )
        if rendering.mode == table.TABLE_MODE and event.get("type") in _TABLE_ROW_EVENTS:
            self._headers_sent = True
        return dumps(rendered) + b"\n"


async def next_item(queue: asyncio.Queue[_Item], wait: float, left: float | None) -> _Item | None:
    """The next queued item, or None after ``wait`` seconds (or what is ``left`` of the watch, if less).

    ``asyncio.timeout``, not ``asyncio.wait_for``: on Python 3.11, ``wait_for`` returns the item and drops the
    task's cancellation when both come in the same loop turn, and the stream would then run on past a shutdown.
    """
    timeout = wait if left is None else max(0.0, min(wait, left))
    try:
        async with asyncio.timeout(timeout):
            return await queue.get()
    except TimeoutError:
        return None


def _events(call: Call) -> AsyncIterator[JSON]:
    info = call.info
    if info.send_initial_events:
        return _initial_events_then_watch(call.storage, call.ctx, info.target.namespace, info.list_options)
    return call.storage.watch(call.ctx, info.target.namespace, info.list_options)


async def _initial_events_then_watch(
    storage: Storage, ctx: RequestContext, namespace: str | None, options: ListOptions
) -> AsyncIterator[JSON]:
    """The "watch-list" protocol on top of list + watch.

    Newer client-go reflectors ask for ``sendInitialEvents=true``: the current objects as ADDED
    events, then a BOOKMARK annotated ``k8s.io/initial-events-end``, then changes.  Without the
    bookmark such a client waits until its watch times out before falling back to list.  The bookmark
    is one: a watch that does not allow bookmarks gets none, as from kube-apiserver's watch cache.
    """
    first = ListOptions(
        label_selector=options.label_selector,
        field_selector=options.field_selector,
        resource_version=options.resource_version,
    )
    lst = await storage.list(ctx, namespace, first)
    for item in lst.get("items") or []:
        yield {"type": "ADDED", "object": item}
    rv = (lst.get("metadata") or {}).get("resourceVersion") or ""
    if options.allow_bookmarks:
        yield {
            "type": "BOOKMARK",
            "object": {
                "apiVersion": storage.info.api_version,
                "kind": storage.info.kind,
                "metadata": {"resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}},
            },
        }
    follow = ListOptions(
        label_selector=options.label_selector,
        field_selector=options.field_selector,
        resource_version=rv or None,
        timeout_seconds=options.timeout_seconds,
        allow_bookmarks=options.allow_bookmarks,
    )
    async for event in storage.watch(ctx, namespace, follow):
        yield event


async def _pump(events: AsyncIterator[JSON], queue: asyncio.Queue[_Item]) -> None:
    """Move a storage's watch events into ``queue`` so the writer can also watch the clock."""
    try:
        async for event in events:
            await queue.put(("event", event))
        await queue.put(("end", None))
    except asyncio.CancelledError:
        raise
    except errors.ApiError as err:
        await queue.put(("error", err))
    except Exception:
        log.exception("watch stream failed")
        await queue.put(("error", errors.internal("the watch stream failed; see the server log")))
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
