"""Values kept per live object: a bounded cache keyed by an object's identity (and a key under it).

Schemas and definitions are dicts, which cannot be hashed, and a changed definition is a new dict: keying by
``id()`` is what makes a value derived from one cheap to find again.  The object is kept with the value, so its
``id()`` cannot be reused by another object while the entry lives, and a hit checks it is the same object.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class KeptPerObject(Generic[K, V]):
    """At most ``size`` values, the least recently used dropped first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._kept: OrderedDict[tuple[int, K], tuple[object, V]] = OrderedDict()

    def get(self, owner: object, key: K) -> V | None:
        slot = (id(owner), key)
        hit = self._kept.get(slot)
        if hit is None or hit[0] is not owner:
            return None
        self._kept.move_to_end(slot)
        return hit[1]

    def put(self, owner: object, key: K, value: V) -> None:
        self._kept[(id(owner), key)] = (owner, value)
        self._kept.move_to_end((id(owner), key))
        while len(self._kept) > self._size:
            self._kept.popitem(last=False)
