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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

#: ``M_MMAP_THRESHOLD`` in glibc's malloc.h.
M_MMAP_THRESHOLD = -3
#: glibc's own default before any adjustment: blocks from here up are mmapped.
MMAP_THRESHOLD = 128 * 1024


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Serve blocks of ``threshold`` bytes and more with mmap, always; False where malloc is not glibc's."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None)
    if mallopt is None:
        log.debug("no mallopt in %s: large blocks stay with the allocator's own policy", name)
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, threshold))


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
