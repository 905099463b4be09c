"""The current objects of one cache and the revision they are current at (client-go's ``Store``).

Readers that need the cache to have reached a revision wait on it here: the store is the one place
that knows when its revision moves on.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import NamedTuple

from .packing import Key, Packed


class Cached(NamedTuple):
    """One current object of the cache: its key, its resourceVersion and its packed form.

    The store keeps these and a list answers with the same tuples (:meth:`Store.cached`): a list of 50 000 made a
    new tuple per object, and those allocations set off the cyclic collector over the whole cache (round 30 of
    the performance notes). A reader that keeps something derived from one can tell by ``rv`` whether that is
    still current without decoding it."""

    key: Key
    rv: int
    packed: Packed


class Lookup(NamedTuple):
    """The answer of a cache asked for one object: its packed form, or None when the cache holds no such object,
    and its revision (0 with none), by which a reader can tell that what it derived from it is still current."""

    packed: Packed | None
    rv: int = 0


class Store:
    """Objects by key, and the last resourceVersion seen (from a list, an event or a bookmark)."""

    def __init__(self) -> None:
        self._objects: dict[Key, Cached] = {}
        #: The keys in list order, kept between lists while no object is added or removed (None: sort again).
        self._order: list[Key] | None = None
        self.rv = ""
        self.rv_int = 0
        #: Set (and replaced) whenever the revision advances; readers wait on it.
        self._advanced = asyncio.Event()

    # ------------------------------------------------------------------ objects

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, key: Key) -> bool:
        return key in self._objects

    def objects(self) -> Mapping[Key, Cached]:
        """The objects by key, read-only (a relist compares them with its answer)."""
        return self._objects

    def put(self, key: Key, entry: Cached) -> None:
        if key not in self._objects:
            self._order = None
        self._objects[key] = entry

    def remove(self, key: Key) -> None:
        if self._objects.pop(key, None) is not None:
            self._order = None

    def replace(self, objects: dict[Key, Cached]) -> None:
        """Hold exactly ``objects`` (a relist's answer)."""
        self._objects = objects
        self._order = None

    def snapshot(self, keys: Callable[[Key], bool] | None = None) -> list[Cached]:
        """Every object (those whose key ``keys`` accepts, when given), ordered by resourceVersion (the order a
        replay of them must keep)."""
        entries = self._objects.values() if keys is None else (e for key, e in self._objects.items() if keys(key))
        return sorted(entries, key=attrgetter("rv"))

    def cached(self, namespace: str | None = None) -> list[Cached]:
        """The objects (only ``namespace``'s when given) sorted by namespace and name, as kube-apiserver lists them.

        Most lists find the same keys as the one before (objects change far more often than they come and go),
        so the order is kept until a key is added or removed; a namespace's objects are one run of it."""
        if self._order is None:
            self._order = sorted(self._objects)
        order, objects = self._order, self._objects
        if namespace:
            order = order[bisect.bisect_left(order, (namespace, "")):bisect.bisect_left(order, (namespace + "\0", ""))]
        return [objects[key] for key in order]

    # ------------------------------------------------------------------ revision

    def advance(self, rv_text: str, rv: int) -> None:
        """The cache is now current at ``rv``: wake whoever waits for it."""
        self.rv, self.rv_int = rv_text, rv
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def reached(self, rv: int, wait: float) -> bool:
        """Whether the store reaches ``rv`` within ``wait`` seconds."""
        if self.rv_int >= rv:
            return True
        try:
            async with asyncio.timeout(wait):
                while self.rv_int < rv:
                    await self._advanced.wait()
        except TimeoutError:
            return False
        return True
