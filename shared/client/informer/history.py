"""The last N events of one cache with their revisions: what a watch that resumes is replayed from.

kube-apiserver's watch cache keeps such a window too, and answers 410 Gone to a watch that starts
before it; a client then lists again.  Here the same contract holds for watches of the served kinds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from shared.api import errors

from .packing import Key, Packed


class Record(NamedTuple):
    rv: int
    type: str
    obj: Packed
    #: The object's ``(namespace, name)``: a watcher that drops every object but some keys skips the others
    #: without decoding them.
    key: Key
    #: The object as the cache held it before a MODIFIED (a watcher's selector is decided on both, as
    #: kube-apiserver's watch cache decides it); None for the other types.
    prev: Packed | None = None


class History:
    """A bounded, revision-ordered log of events."""

    def __init__(self, size: int) -> None:
        self._records: deque[Record] = deque(maxlen=max(size, 1))
        #: Smallest RV a subscriber may resume from: every event after it is still here.
        self.horizon = 0

    def append(self, record: Record) -> None:
        if len(self._records) == self._records.maxlen:
            self.horizon = self._records[0].rv
        self._records.append(record)

    def restart(self, rv: int) -> None:
        """Forget every event: a resume is possible only from ``rv`` on."""
        self._records.clear()
        self.horizon = rv

    def after(self, rv: int, rv_text: str, keys: Callable[[Key], bool] | None = None,
              ) -> list[tuple[str, Packed, Packed | None]]:
        """The events after ``rv`` (type, object, previous object), of the objects ``keys`` accepts (None: all);
        410 Gone when some are no longer kept."""
        if rv < self.horizon:
            raise errors.gone(f"too old resource version: {rv_text} ({self.horizon})")
        return [(r.type, r.obj, r.prev) for r in self._records
                if r.rv > rv and (keys is None or keys(r.key))]
