"""Relays the backend controller's Events about backing objects onto the Applications they back.

The leader lists and then watches core/v1 Events about the service's backing kind (all namespaces,
selected by ``involvedObject.kind``); for each one it reads the backing object the Event names, asks
the stack which Application that is (and what may be said of it: Tofu redacts), and applies the
relayed Event (:mod:`shared.api.relayed`) server-side. A deterministic name and server-side apply make
every write idempotent: a restart, a relist or a new leader writes the same object again, and a grown
``count`` updates it. What it keeps is bounded: the last :data:`REMEMBERED` originals' resourceVersions,
so a relist does not rewrite what was just written; nothing else about past Events.

Only the leader relays (a new term starts from a fresh list); a failure is logged and retried with
backoff, never raised into the service: the Events are explanations, the Applications work without them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from shared.api.errors import ApiError
from shared.api.relayed import Watched, relayed_event, selects
from shared.bodies import JSON
from shared.client.events import EVENT_TIMEOUT, EVENTS
from shared.client.kube import ObjectClient
from shared.client.leader import Leadership

log = logging.getLogger(__name__)

#: Originals whose last relayed resourceVersion is kept, so a relist skips them; older ones are written again.
REMEMBERED = 4096
#: Events per list page.
PAGE = 500
#: Wait after a failed list or watch: doubling from 1 s up to this.
MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class Target:
    """Where and what to relay: the Application the backing object is, and the message it may be told."""

    application: JSON
    message: str


#: The stack's part: (backing object, original Event) -> the Target, or None when it is no Application.
Resolve = Callable[[JSON, JSON], Awaitable[Target | None]]


class _Expired(Exception):
    """The watch's resourceVersion is no longer served (410): list again."""


class EventRelay:
    """Relays Events about ``watched`` objects read through ``backing``, as ``relayer``, while leading."""

    def __init__(self, backing: ObjectClient, watched: Watched, resolve: Resolve, relayer: str,
                 leader: Leadership, *, remembered: int = REMEMBERED) -> None:
        self._backing = backing
        self._events = ObjectClient(backing.api, EVENTS, timeout=EVENT_TIMEOUT, field_manager=relayer)
        self._watched = watched
        self._resolve = resolve
        self._relayer = relayer
        self._leader = leader
        self._remembered = remembered
        #: original uid -> the original's resourceVersion last relayed (or found not to need relaying).
        self._done: OrderedDict[str, str] = OrderedDict()

    async def run(self) -> None:
        """Forever: relay while this replica leads, stop when it is deposed, start over when elected again."""
        while True:
            await self._leader.wait_elected()
            task = asyncio.create_task(self._relay(), name=f"relay of {self._watched.kind} Events")
            try:
                await self._leader.wait_deposed()
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            self._done.clear()

    async def _relay(self) -> None:
        delay = 1.0
        while True:
            try:
                version = await self._list()
                delay = 1.0
                while True:
                    version = await self._watch(version)
            except _Expired:
                log.info("event relay: resourceVersion expired, listing again", extra={"kind": self._watched.kind})
            except ApiError as exc:
                log.warning("event relay: list or watch failed, retrying",
                            extra={"kind": self._watched.kind, "error": exc.message, "delay": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF)

    async def _list(self) -> str:
        token: str | None = None
        while True:
            page = await self._events.list(None, field_selector=self._watched.field_selector, limit=PAGE,
                                           continue_token=token)
            for event in page.get("items") or []:
                await self.relay(event)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return str(meta.get("resourceVersion") or "")

    async def _watch(self, version: str) -> str:
        """Relay what one watch stream brings; the resourceVersion to go on from."""
        async for change in self._events.watch(None, resource_version=version,
                                               field_selector=self._watched.field_selector):
            obj = change.get("object") or {}
            kind = change.get("type")
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise _Expired()
                raise ApiError(int(obj.get("code") or 500), str(obj.get("reason") or "InternalError"),
                               str(obj.get("message") or "watch error"))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
            if kind in ("ADDED", "MODIFIED"):
                await self.relay(obj)
        return version

    async def relay(self, original: JSON) -> None:
        """Relay one original Event onto its Application (when it has one); never raises but on cancellation."""
        if not selects(original, self._watched):
            return
        meta = original.get("metadata") or {}
        uid, version = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        if uid and self._done.get(uid) == version:
            return
        involved = original["involvedObject"]
        try:
            target = await self._target(original, involved)
            if target is not None:
                body = relayed_event(original, target.application, target.message, self._relayer)
                await self._events.apply(body["metadata"]["namespace"], body["metadata"]["name"], body)
        except ApiError as exc:
            log.warning("could not relay event", extra={"event": f"{meta.get('namespace')}/{meta.get('name')}",
                                                        "error": exc.message})
            return
        self._remember(uid, version)

    async def _target(self, original: JSON, involved: JSON) -> Target | None:
        try:
            backing = await self._backing.get(involved["namespace"], involved["name"])
        except ApiError as exc:
            if exc.code == 404:
                return None  # gone: its Application is gone too
            raise
        if (backing.get("metadata") or {}).get("uid") != involved.get("uid"):
            return None  # about an earlier object of that name
        return await self._resolve(backing, original)

    def _remember(self, uid: str, version: str) -> None:
        if not uid:
            return
        self._done[uid] = version
        self._done.move_to_end(uid)
        while len(self._done) > self._remembered:
            self._done.popitem(last=False)

