"""Memory policy of a service process: large buffers leave when freed; startup objects leave the collector's sight.

**Large blocks.**
glibc's malloc serves large blocks with ``mmap``, which returns them to the system on ``free``, but it
raises that threshold to the size of every mmapped block that is freed (up to 32 MiB on 64-bit).  After
the first large answer (a list of 10 000 Applications is tens of MB, read from kube-apiserver and
encoded again), blocks of that size come from the heap instead, where freed holes stay resident: the
service's RSS then keeps the high-water mark of its largest list for good.  Pinning the threshold
(``mallopt(M_MMAP_THRESHOLD)``, which also turns the adjustment off) keeps large blocks mmapped.

No library exposes ``mallopt``, hence ctypes.  Elsewhere than glibc it is a no-op.

**The collector.**  A full (oldest-generation) collection traverses every object the collector tracks, and
about 90 000 of a service's exist from start to exit: modules, classes, functions, the wiring.  Each full
collection took 40-75 ms on the 2-core benchmark machine, and a large list (thousands of transient dicts
surviving the young collections) triggers one: helm_agl paused 17 times, 1.03 s in all, during a 79 s
benchmark run.  Frozen once the service is up (``gc.freeze``: the permanent generation, never traversed),
the same run paused 67 ms in full collections, at most 9 ms at a time.

**The import.**  Most of those objects are made by importing the service, and the collector ran about 200
times meanwhile (one of them full), 100 ms of a 1.2 s import, to find about 100 objects of garbage.  The
entry points import with the collector off and freeze what the import made (:func:`imported_frozen`), so the
freeze once the service is up (:func:`freeze_startup_objects`) no longer walks them either: its collection
took 100 ms, right on the way from the start to the first list of the kinds' backing objects.

**Free pages inside the heap.**  glibc returns heap memory to the system only from the top of its heap.  The
blocks the cache keeps (each object packed, a few hundred bytes to a few KiB) sit between the transient blocks a
burst of watch events or a large list leaves free, so those free pages stay resident: with 50 000 Terraforms,
204 MB of a 360 MB RSS were free heap (159 MB after one release), and the bench measured 204 to 350 MiB at the
same point in different runs (round 31 of the performance notes).  ``malloc_trim(0)`` hands such pages back
(``madvise``), as Go's scavenger does in kube-apiserver; :func:`release_free_heap_when_grown` calls it whenever the
process has grown by a few MiB since it last did, or malloc holds a few MiB more free than it did then (glibc's
``mallinfo2``): blocks a burst still used at one release and freed after it show only in the second figure, since
freeing them into the heap leaves the process's size as it was.  So a service gone quiet again stays near what it
keeps.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

log = logging.getLogger(__name__)

#: ``M_MMAP_THRESHOLD`` in glibc's malloc.h.
M_MMAP_THRESHOLD = -3
#: glibc's own default before any adjustment: blocks from here up are mmapped.
MMAP_THRESHOLD = 128 * 1024


#: Seconds between two looks at the process's size (one read of ``/proc/self/statm``).
RELEASE_INTERVAL = 5.0
#: How much the process may grow past its size after the last release before free heap pages are released again.
RELEASE_SLACK_BYTES = 8 * 1024 * 1024


@functools.cache
def _libc_function(name: str) -> Callable[..., int] | None:
    """A function of the C library, or None where the library or the function (glibc's own) is missing."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    function: Callable[..., int] | None = getattr(ctypes.CDLL(library), name, None)
    if function is None:
        log.debug("no %s in %s: the allocator follows its own policy", name, library)
    return function


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Serve blocks of ``threshold`` bytes and more with mmap, always; False where malloc is not glibc's."""
    mallopt = _libc_function("mallopt")
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, threshold))


def release_free_heap() -> bool:
    """Hand the free pages inside malloc's heap back to the system; False where malloc is not glibc's.

    It walks the heap's free blocks: a few milliseconds for a cache of 50 000 objects."""
    trim = _libc_function("malloc_trim")
    return trim is not None and bool(trim(0))


def resident_bytes() -> int:
    """The process's resident size (``/proc/self/statm``: cheaper than ``status`` to read and parse)."""
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc 2.33 and later): every field a ``size_t``."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def free_heap_bytes() -> int | None:
    """The bytes malloc holds free in its heaps (``mallinfo2().fordblks``, every arena), resident or released alike;
    None where malloc is not glibc's 2.33 or later.  It counts the free blocks' sizes: 0.05 ms in a small process."""
    mallinfo2 = _mallinfo2()
    return None if mallinfo2 is None else int(mallinfo2().fordblks)


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    function = _libc_function("mallinfo2")
    if function is None:
        return None
    function.restype = _MallInfo2  # type: ignore[attr-defined]  # a ctypes function, typed here as a callable
    return cast(Callable[[], _MallInfo2], function)


@dataclass(frozen=True)
class HeapReading:
    """One look at the process: its resident size and the bytes malloc holds free, both in bytes."""

    resident: int
    free: int

    @classmethod
    def now(cls) -> HeapReading:
        return cls(resident_bytes(), free_heap_bytes() or 0)

    def lowest(self, other: HeapReading) -> HeapReading:
        """Each figure at its lower: the baseline a later rise is measured from."""
        return HeapReading(min(self.resident, other.resident), min(self.free, other.free))


def due_for_release(now: HeapReading, after_last_release: HeapReading, slack: int = RELEASE_SLACK_BYTES) -> bool:
    """Whether a release is worth its walk: the process grew by more than ``slack`` since the last release (new
    pages, some of them free by now), or malloc holds more than ``slack`` more free (blocks freed into the heap since,
    resident until released: freeing them does not change the process's size)."""
    return now.resident > after_last_release.resident + slack or now.free > after_last_release.free + slack


async def release_free_heap_when_grown(interval: float = RELEASE_INTERVAL) -> None:
    """Forever: every ``interval`` seconds, release the free heap pages when :func:`due_for_release` says so.

    Between releases the baseline follows each figure down: blocks reused from the free ones (their pages resident
    again) and freed once more count as a rise.  A process that keeps its size and frees nothing costs one small read
    and one count of malloc's free blocks per look."""
    if _libc_function("malloc_trim") is None or free_heap_bytes() is None:
        return
    after_last_release = HeapReading.now()
    while True:
        await asyncio.sleep(interval)
        reading = HeapReading.now()
        if not due_for_release(reading, after_last_release):
            after_last_release = after_last_release.lowest(reading)
            continue
        release_free_heap()
        after_last_release = HeapReading.now()
        if reading.resident - after_last_release.resident >= RELEASE_SLACK_BYTES:
            log.info("free heap pages released", extra={
                "released_mib": round((reading.resident - after_last_release.resident) / 2**20, 1),
                "resident_mib": round(after_last_release.resident / 2**20, 1)})


def freeze_startup_objects() -> int:
    """Collect once, then move every object alive now out of the collector's traversals; returns how many.

    Call it when the service is up, so that what is frozen is what lives until exit; an object frozen
    that later dies is still freed by its reference count (only a cycle among such objects would stay).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def imported_frozen() -> Iterator[None]:
    """Run the block (a service's imports) with the collector off, then freeze every object alive.

    Not collected first: after the imports there is next to no garbage (104 objects in helm_agl's), and a
    collection would walk all of them (100 ms) to find it; the garbage frozen with them is never freed.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
