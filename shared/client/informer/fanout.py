"""The watchers of one cache: each gets what it missed, then every live event, from its own bounded buffer.

A watcher that falls further behind than its buffer is cut off with 410, as kube-apiserver cuts off
a slow watcher of its watch cache; the client lists again.  The cache never waits for a watcher.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from shared.api import errors
from shared.api.errors import ApiError
from shared.bodies import JSON

from .packing import Key, Packed, Packer

log = logging.getLogger(__name__)

BOOKMARK = "BOOKMARK"

#: An event as a subscription holds it: type, object and, for a MODIFIED, the object before it; objects packed
#: (the cache's own bytes), bookmarks as dicts.
Item = tuple[str, Packed | JSON, Packed | None]


class Fanout:
    """Every subscription of one cache, and the rules for handing each of them an event.

    ``replay`` fills a subscription that attaches with what it missed (its ``start_rv`` decides
    what) and sets its ``min_rv``; it may raise an :class:`ApiError` (410, 400) that the subscriber
    receives.
    """

    def __init__(self, name: str, queue_size: int, synced: asyncio.Event,
                 replay: Callable[[Subscription], None], packer: Packer) -> None:
        self.name = name
        #: The cache's packer: each subscription unpacks its own copy of an object as it hands it out.
        self.packer = packer
        self._max = max(queue_size, 1)
        self.synced = synced
        self._replay = replay
        self._subs: set[Subscription] = set()
        #: Subscriptions still waiting for the first list (so they can be ended too).
        self.waiting: set[Subscription] = set()
        #: A closed fanout ends every subscription that attaches.
        self.closed = False

    def subscribe(self, resource_version: str | None, bookmarks: bool,
                  replay_keys: Callable[[Key], bool] | None = None) -> Subscription:
        return Subscription(self, resource_version, bookmarks, self._max, replay_keys)

    def attach(self, sub: Subscription) -> None:
        """Queue what ``sub`` missed, then live events.  Synchronous on purpose: no event can slip
        in between the replay and the registration."""
        if self.closed:
            sub.finish(None)
            return
        self._replay(sub)
        self._subs.add(sub)

    def detach(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def broadcast(self, type_: str, obj: Packed | JSON, rv: int, prev: Packed | None = None,
                  key: Key | None = None) -> None:
        """Hand an event to every subscription that wants it; ``key`` (an object event's) is offered only to
        those whose ``replay_keys`` accepts it."""
        for sub in list(self._subs):
            if type_ == BOOKMARK:
                if not sub.bookmarks:
                    continue
            elif rv <= sub.min_rv or (key is not None and sub.replay_keys is not None and not sub.replay_keys(key)):
                continue
            if not sub.offer((type_, obj, prev)):
                log.info("%s: a subscriber fell %d events behind; closing it (410)", self.name, self._max)
                self._subs.discard(sub)
                sub.finish(errors.gone("the watch fell too far behind; list again and re-watch"))

    def end_all(self, error: ApiError | None = None) -> None:
        """End every subscription: after its buffered events (None), or at once with ``error``.

        Without an error, those still waiting for the first list end too.
        """
        ending = list(self._subs) if error is not None else list(self._subs) + list(self.waiting)
        for sub in ending:
            sub.finish(error)
        self._subs.clear()


class Subscription:
    """One downstream watcher: replayed events first, then live ones from a bounded buffer.

    Use as ``async with informer.subscribe(rv) as sub: async for event in sub: ...`` (or call
    :meth:`aclose`).  Events are ``{"type": ..., "object": <copy>}``, the copy the reader's own; a MODIFIED
    also has ``"previous"``: the object before it, still packed (``Informer.unpack`` decodes it), since
    only a watcher whose selector may have changed its mind needs it.
    """

    def __init__(self, fanout: Fanout, start_rv: str | None, bookmarks: bool, queue_size: int,
                 replay_keys: Callable[[Key], bool] | None = None) -> None:
        self._fanout = fanout
        self.start_rv = start_rv
        self.bookmarks = bookmarks
        #: Which objects the subscription is handed, by key (None: all), in its replay and live: the watcher's
        #: own filter still decides every event; this spares decoding the objects it would drop.
        self.replay_keys = replay_keys
        #: Live events at or below this RV were already covered by the replay.
        self.min_rv = 0
        self._max = queue_size
        self.replay: deque[Item] = deque()
        self._buf: deque[Item] = deque()
        self._wake = asyncio.Event()
        self._started = False
        self._done = False
        self._error: ApiError | None = None

    def offer(self, item: Item) -> bool:
        """Buffer a live event; False when the buffer is full (the watcher fell behind)."""
        if self._done:
            return True
        if len(self._buf) >= self._max:
            return False
        self._buf.append(item)
        self._wake.set()
        return True

    def finish(self, error: ApiError | None) -> None:
        """End the stream: after the buffered events (None), or at once with ``error``."""
        if self._done:
            return
        self._done = True
        self._error = error
        if error is not None:
            self.replay.clear()
            self._buf.clear()
        self._wake.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> JSON:
        if not self._started:
            self._started = True
            await self._wait_synced()
            if not self._done:
                try:
                    self._fanout.attach(self)
                except ApiError:
                    self._done = True
                    raise
        while True:
            if self.replay:
                return self._event(self.replay.popleft())
            if self._buf:
                return self._event(self._buf.popleft())
            if self._done:
                error, self._error = self._error, None
                if error is not None:
                    raise error
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()

    def _event(self, item: Item) -> JSON:
        type_, obj, prev = item
        event: JSON = {"type": type_, "object": self._fanout.packer.unpacked(obj)}
        if prev is not None:
            event["previous"] = prev
        return event

    async def _wait_synced(self) -> None:
        """Wait for the cache's first list, unless the subscription is closed meanwhile."""
        fanout = self._fanout
        if fanout.synced.is_set():
            return
        fanout.waiting.add(self)
        try:
            while not fanout.synced.is_set() and not self._done:
                self._wake.clear()
                synced = asyncio.ensure_future(fanout.synced.wait())
                woken = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait({synced, woken}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    synced.cancel()
                    woken.cancel()
        finally:
            fanout.waiting.discard(self)

    async def aclose(self) -> None:
        """Detach from the cache; further iteration ends."""
        self._fanout.detach(self)
        self.finish(None)
        self._buf.clear()
        self.replay.clear()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
