"""The pages listed ahead, kept until the list they answer asks for them, each handed over once.

Two threads meet here: the lister (:mod:`.lister`) puts the pages of each planned list as they arrive, and the
service's own client takes them from its event loop, one ``(path, label selector, continue token)`` at a time,
exactly as it would have asked kube-apiserver for them.  Whatever does not match is left to kube-apiserver, and
the stream it belonged to is dropped, so a page is never handed to a list it was not the answer of:

- a list nobody planned, or one asked for before the lister began it (the lister then skips it);
- a token other than the one the last handed page named: the caller started over (after a 410, a relist);
- a page the lister never got (it failed or timed out): the caller asks kube-apiserver with the same token, which
  continues the same snapshot, since a continue token is kube-apiserver's state, not the connection's.

Memory is bounded: a stream holds at most :data:`MAX_AHEAD` bytes not yet taken, and one whose reader does not come
within :data:`STALL` seconds is dropped, as is everything left once the lister is done and nobody took it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: Bytes one stream may hold that its reader has not taken yet (a page of 500 Terraforms is 1-2 MB).
MAX_AHEAD = 64 * 1024 * 1024
#: Seconds a stream waits for its reader before its pages are dropped.
STALL = 30.0

Key = tuple[str, str]
PENDING, LISTING, DONE, DROPPED = "pending", "listing", "done", "dropped"


@dataclass
class _Stream:
    """One planned list: its pages by the token that asks for them, each with the token of the page after it."""

    state: str = PENDING
    pages: dict[str | None, tuple[bytes, str | None]] = field(default_factory=dict)
    expected: str | None = None
    held: int = 0
    handed: int = 0
    handed_bytes: int = 0
    active: float = field(default_factory=time.monotonic)

    def drop(self) -> None:
        self.state, self.pages, self.held = DROPPED, {}, 0


class Pages:
    """The meeting point of the lister thread and the service's lists (one per process: :data:`PAGES`)."""

    def __init__(self, max_ahead: int = MAX_AHEAD, stall: float = STALL) -> None:
        self._cond = threading.Condition()
        self._streams: dict[Key, _Stream] = {}
        self._asked: set[Key] = set()
        self._closed = False
        self.max_ahead, self.stall = max_ahead, stall

    # The lister's side.

    def plan(self, keys: list[Key]) -> list[Key]:
        """Register the lists about to be listed ahead; those already asked for are left out and not returned."""
        with self._cond:
            planned = [key for key in dict.fromkeys(keys) if key not in self._asked and not self._closed]
            self._streams.update((key, _Stream()) for key in planned)
            return planned

    def begin(self, key: Key) -> bool:
        """Whether to list ``key``: not if its reader came first and listed it itself."""
        with self._cond:
            stream = self._streams[key]
            if stream.state != PENDING:
                return False
            stream.state, stream.active = LISTING, time.monotonic()
            return True

    def put(self, key: Key, token: str | None, raw: bytes, next_token: str | None) -> bool:
        """Keep one page; waits while the stream holds :data:`MAX_AHEAD` bytes. False: the stream was dropped
        (its reader went its own way, or did not come in time), so the lister stops listing it."""
        with self._cond:
            stream = self._streams[key]
            while stream.state == LISTING and stream.held >= self.max_ahead:
                left = stream.active + self.stall - time.monotonic()
                if left <= 0:
                    stream.drop()
                    self._note("a list read ahead was not asked for in time; its pages are dropped", key, stream)
                    break
                self._cond.wait(left)
            if stream.state != LISTING:
                return False
            stream.pages[token] = (raw, next_token)
            stream.held += len(raw)
            stream.active = time.monotonic()
            self._cond.notify_all()
            return True

    def end(self, key: Key) -> None:
        """The lister is done with ``key`` (its last page put, or it failed: a reader then asks kube-apiserver)."""
        with self._cond:
            stream = self._streams[key]
            if stream.state == LISTING:
                stream.state = DONE
            self._cond.notify_all()

    def close(self) -> None:
        """The lister is done: wait (up to :data:`STALL` after the last hand-over) for the pages held to be
        taken, then drop what is left; from then on every list goes to kube-apiserver without a lock."""
        with self._cond:
            for stream in self._streams.values():
                if stream.state in (PENDING, LISTING):
                    stream.state = DONE if stream.state == LISTING else DROPPED
            while any(s.pages for s in self._streams.values()):
                left = max(s.active for s in self._streams.values()) + self.stall - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            for key, stream in self._streams.items():
                if stream.pages:
                    stream.drop()
                    self._note("a list read ahead was not asked for in time; its pages are dropped", key, stream)
            self._closed = True
            self._cond.notify_all()

    # The reader's side.

    async def take(self, path: str, label_selector: str, token: str | None) -> bytes | None:
        """The page kube-apiserver would answer to this request, if it was listed ahead; else None (ask it)."""
        if self._closed:
            return None
        key = (path, label_selector)
        page, wait = self._take(key, token, wait=False)
        if wait:
            page, _ = await asyncio.to_thread(self._take, key, token, True)
        return page

    def _take(self, key: Key, token: str | None, wait: bool) -> tuple[bytes | None, bool]:
        with self._cond:
            stream = self._streams.get(key)
            if stream is None:
                if not self._closed:
                    self._asked.add(key)
                return None, False
            if stream.state in (PENDING, DROPPED) or token != stream.expected:
                if stream.state != DROPPED:
                    stream.drop()
                return None, False
            if token not in stream.pages and stream.state == LISTING:
                if not wait:
                    return None, True
                while token not in stream.pages and stream.state == LISTING:
                    left = stream.active + self.stall - time.monotonic()
                    if left <= 0:  # the lister is stuck on kube-apiserver: ask it directly instead
                        stream.drop()
                        break
                    self._cond.wait(left)
            entry = stream.pages.pop(token, None)
            if entry is None:  # the lister ended without it
                stream.drop()
                return None, False
            raw, stream.expected = entry
            stream.held -= len(raw)
            stream.handed += 1
            stream.handed_bytes += len(raw)
            stream.active = time.monotonic()
            if stream.expected is None:
                self._note("first list answered with the pages listed during start-up", key, stream)
            self._cond.notify_all()
            return raw, False

    def held(self, path: str, label_selector: str) -> int:
        """How many pages of this list are held, listed and not yet taken."""
        with self._cond:
            stream = self._streams.get((path, label_selector))
            return len(stream.pages) if stream is not None else 0

    def handed(self, path: str, label_selector: str) -> int:
        """How many pages of this list were handed over (what the tests and the log read)."""
        with self._cond:
            stream = self._streams.get((path, label_selector))
            return stream.handed if stream is not None else 0

    def _note(self, message: str, key: Key, stream: _Stream) -> None:
        extra: dict[str, Any] = {"path": key[0], "labelSelector": key[1], "pages": stream.handed,
                                 "bytes": stream.handed_bytes}
        log.info(message, extra=extra)


#: The process's pages listed ahead: the entry point's lister puts, :class:`shared.client.kube.ObjectClient` takes.
PAGES = Pages()
