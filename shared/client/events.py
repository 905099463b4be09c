"""Best-effort core/v1 Events about user-facing objects, so ``kubectl describe`` explains outcomes.

``kubectl describe`` finds Events by ``involvedObject`` (name, namespace, kind, uid), so the caller
passes the *user-facing* object (an Application, not its backing HelmRelease).  Repeats of the same
event within ten minutes bump ``count``/``lastTimestamp`` of the existing Event instead of
creating new ones, like client-go's event correlator, so a reconcile loop cannot flood etcd.

Recording never raises: an Event that cannot be written is logged and dropped -- the operation it
describes has already succeeded or failed on its own.  For the same reason a request never waits
for its Event: :meth:`EventRecorder.emit` queues it (stamped with the time of the operation) and a
few background writers send it, so a create costs one kube write, not two.  The queue is bounded;
what does not fit, and what is still queued when :meth:`EventRecorder.stop` gives up flushing, is
logged one by one, never lost silently.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from kubernetes_asyncio import client as kclient

from shared.api.errors import ApiError
from shared.bodies import JSON
from shared.client.kube import GVR, ObjectClient, to_api_error

EventType = Literal["Normal", "Warning"]

log = logging.getLogger(__name__)

EVENTS = GVR("", "v1", "events")
#: Repeats within this many seconds update the existing Event.
AGGREGATION_WINDOW = 600.0
#: Events are small and rare; a short bound keeps a slow kube-apiserver from stalling callers.
EVENT_TIMEOUT = 10.0
#: Events waiting for a writer; a burst beyond this is dropped (and logged) rather than held in memory.
QUEUE_SIZE = 1024
#: Background writers: a burst of creates sends its Events in parallel too, as the creates were.
WRITERS = 4
#: How long :meth:`EventRecorder.stop` waits for queued Events.
FLUSH_TIMEOUT = 5.0
_CACHE_SIZE = 4096
_MAX_MESSAGE = 1024

_Key = tuple[str, str, str, str, str, str]


@dataclass
class _Seen:
    namespace: str
    name: str
    count: int
    last: float


class _Queued(NamedTuple):
    involved: JSON
    type: EventType
    reason: str
    message: str
    at: float
    at_ns: int


class EventRecorder:
    """Writes Events as ``component`` running on ``host`` (``source`` / ``reportingInstance``)."""

    def __init__(
        self,
        api_client: kclient.ApiClient,
        component: str,
        host: str,
        *,
        clock: Callable[[], float] = time.time,
        window: float = AGGREGATION_WINDOW,
    ) -> None:
        self._events = ObjectClient(api_client, EVENTS, timeout=EVENT_TIMEOUT)
        self.component = component
        self.host = host
        self._clock = clock
        self._window = window
        self._seen: OrderedDict[_Key, _Seen] = OrderedDict()
        # One lock per aggregation key, so two concurrent repeats do not create two Events,
        # while unrelated Events never wait for each other.
        self._locks: dict[_Key, tuple[asyncio.Lock, int]] = {}
        self._queue: asyncio.Queue[_Queued] = asyncio.Queue(QUEUE_SIZE)
        self._writers: list[asyncio.Task[None]] = []
        self._closed = False

    # ------------------------------------------------------------------ queued
    def emit(self, involved: JSON, type_: EventType, reason: str, message: str) -> None:
        """Queue one Event about ``involved`` and return at once; a background writer records it.

        The Event keeps the time of this call, so a late write still tells when it happened.
        """
        item = _Queued(_identity(involved), type_, reason, message, self._clock(), time.time_ns())
        if self._closed:
            self._dropped(item, "the recorder is stopped")
            return
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            self._dropped(item, f"{QUEUE_SIZE} events are already waiting")
            return
        if len(self._writers) < WRITERS:
            self._writers.append(asyncio.create_task(self._write_queued(), name="event writer"))

    async def flush(self) -> None:
        """Wait until every queued Event is written (or given up on)."""
        await self._queue.join()

    async def stop(self, flush_within: float = FLUSH_TIMEOUT) -> None:
        """Write what is queued (for at most ``flush_within`` seconds), then stop the writers.

        Events still queued after that are logged one by one.
        """
        self._closed = True
        try:
            async with asyncio.timeout(flush_within):
                await self._queue.join()
        except TimeoutError:
            while not self._queue.empty():
                self._dropped(self._queue.get_nowait(), f"not written within {flush_within}s of shutdown")
                self._queue.task_done()
        for writer in self._writers:
            writer.cancel()
        await asyncio.gather(*self._writers, return_exceptions=True)
        self._writers.clear()

    async def _write_queued(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self.record(item.involved, item.type, item.reason, item.message,
                                  at=item.at, at_ns=item.at_ns)
            except asyncio.CancelledError:
                self._dropped(item, "its write was cut short by the shutdown")
                raise
            finally:
                self._queue.task_done()

    def _dropped(self, item: _Queued, why: str) -> None:
        log.warning("event dropped (%s): %s/%s for %s %s: %s", why, item.type, item.reason,
                    item.involved.get("kind") if isinstance(item.involved, dict) else "?",
                    _name_of(item.involved), item.message)

    # ------------------------------------------------------------------ awaited
    async def record(self, involved: JSON, type_: EventType, reason: str, message: str, *,
                     at: float | None = None, at_ns: int | None = None) -> None:
        """Record (or aggregate) one Event about ``involved`` now; never raises.

        ``at``/``at_ns`` are when it happened (the clock's and the nanosecond time), when earlier than now.
        """
        try:
            ref = involved_ref(involved)
            key: _Key = (
                ref.get("uid") or "",
                ref.get("namespace") or "",
                ref.get("kind") or "",
                ref.get("name") or "",
                reason,
                f"{type_}\x00{message}",
            )
            lock = self._acquire(key)
            try:
                async with lock:
                    await self._record(key, ref, type_, reason, message, at, at_ns)
            finally:
                self._release(key)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # best-effort by contract
            err = to_api_error(exc)
            log.warning(
                "could not record event %s/%s for %s %s: %s",
                type_,
                reason,
                involved.get("kind") if isinstance(involved, dict) else "?",
                _name_of(involved),
                err.message,
            )

    async def _record(self, key: _Key, ref: JSON, type_: EventType, reason: str, message: str,
                      at: float | None, at_ns: int | None) -> None:
        now = self._clock() if at is None else at
        seen = self._seen.get(key)
        if seen is not None and now - seen.last <= self._window:
            patch = {"count": seen.count + 1, "lastTimestamp": _timestamp(now)}
            try:
                await self._events.patch_merge(seen.namespace, seen.name, patch)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                # The Event expired (kube-apiserver's event TTL) or was deleted: start a new one.
            else:
                seen.count += 1
                seen.last = now
                self._seen.move_to_end(key)
                return
        namespace = ref.get("namespace") or "default"
        body = self._event(ref, namespace, type_, reason, message, now, time.time_ns() if at_ns is None else at_ns)
        created = await self._events.create(namespace, body)
        name = str((created.get("metadata") or {}).get("name") or body["metadata"]["name"])
        self._seen[key] = _Seen(namespace, name, 1, now)
        self._seen.move_to_end(key)
        while len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)

    def _event(
        self, ref: JSON, namespace: str, type_: EventType, reason: str, message: str, now: float, now_ns: int
    ) -> JSON:
        stamp = _timestamp(now)
        # Same naming scheme as client-go: unique, sortable, traceable to the object.
        name = f"{ref.get('name') or 'object'}.{now_ns:x}"
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "type": type_,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }

    def _acquire(self, key: _Key) -> asyncio.Lock:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        return lock

    def _release(self, key: _Key) -> None:
        lock, users = self._locks[key]
        if users <= 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, users - 1)


def involved_ref(obj: JSON) -> JSON:
    """The ``involvedObject`` reference for ``obj`` (an ObjectReference, empty fields omitted).

    Cluster-scoped objects carry no namespace in the reference; their Events live in "default".
    """
    meta = obj.get("metadata") or {}
    ref: JSON = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: str(v) for k, v in ref.items() if v}


def _identity(obj: Any) -> Any:
    """What :func:`involved_ref` reads of ``obj``, copied: the caller may change ``obj`` before the
    queued Event is written, and the queue should not hold whole objects."""
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata")
    kept = {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")} if isinstance(meta, dict) else meta
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept}


def _name_of(obj: Any) -> str:
    if not isinstance(obj, dict):
        return "?"
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace"), meta.get("name")
    return f"{ns}/{name}" if ns else str(name)


def _timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
