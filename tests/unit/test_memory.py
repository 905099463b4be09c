"""``shared.service.memory``. ``pin_mmap_threshold``: a large block freed goes back to the system, also after an
earlier larger one. ``freeze_startup_objects``: what lives at start leaves the collector's traversals.

Each case runs in a fresh interpreter (malloc's thresholds are per process): one 16 MiB block is
allocated and freed (glibc would raise its mmap threshold to 16 MiB), then 40 blocks of 1 MiB, freed
again. Without the pin they come from the heap and stay resident; with it, they are unmapped.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import sys
from shared.service.memory import pin_mmap_threshold
if sys.argv[1] == "pin":
    assert pin_mmap_threshold()

def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

big = bytearray(16 * 2**20)
del big
before = rss_kib()
blocks = [b"\x01" * 2**20 for _ in range(40)]  # written, so resident
del blocks
print(rss_kib() - before)
"""


def grown_kib(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc are Linux's")
def test_freed_large_blocks_leave_the_process() -> None:
    assert grown_kib("pin") < 1024
    assert grown_kib("no-pin") > 4 * 1024, "glibc no longer raises its threshold: this test proves nothing"


FREEZE = """
import gc
from shared.service.memory import freeze_startup_objects

class Wiring:
    pass

before = Wiring()
frozen = freeze_startup_objects()
after = Wiring()
tracked = {id(o) for o in gc.get_objects()}
print(frozen == gc.get_freeze_count() > 10_000, id(before) in tracked, id(after) in tracked)
"""


def test_objects_alive_at_the_freeze_are_no_longer_traversed() -> None:
    """In a fresh interpreter (the freeze is per process): what existed is out of every generation the collector
    walks, what comes after is not."""
    done = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False", "True"], done.stdout


IMPORTED = """
import gc, json
from shared.service.memory import imported_frozen

collected = []
gc.callbacks.append(lambda phase, info: collected.append(info["generation"]) if phase == "start" else None)
before = gc.get_freeze_count()
with imported_frozen():
    enabled_inside = gc.isenabled()
    made = [[i] for i in range(100_000)]  # as many as an import makes (lists are always tracked): collections due
    import xml.dom.minidom  # a module not imported yet
after = {id(o) for o in gc.get_objects()}
print(json.dumps({"enabled_inside": enabled_inside, "enabled_after": gc.isenabled(), "collections": collected,
                  "frozen": gc.get_freeze_count() - before >= 100_000,
                  "made_tracked": id(made[0]) in after, "module_tracked": id(xml.dom.minidom.Node) in after}))
"""


def test_what_the_imports_make_is_frozen_without_a_collection() -> None:
    """In a fresh interpreter: inside the block the collector does not run (not even for the 100 000 objects made),
    after it the collector is on again and what the block made is out of every generation the collector walks."""
    done = subprocess.run([sys.executable, "-c", IMPORTED], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {"enabled_inside": False, "enabled_after": True, "collections": [],
                                       "frozen": True, "made_tracked": False, "module_tracked": False}, done.stdout


FRAGMENTED = """
import asyncio, json, sys
from shared.service import memory

def fragment():
    # Blocks a cache keeps (600 bytes) between transient ones freed (20 KiB, below the mmap threshold: from the
    # heap), as a burst of watch events leaves them; the top of the heap stays in use, so glibc's own trimming
    # cannot help.
    kept, transient = [], []
    for _ in range(4000):
        kept.append(b"\\x01" * 600)
        transient.append(b"\\x02" * 20_000)
    kept.append(b"\\x03" * 600)
    grown = memory.resident_bytes()
    del transient
    return kept, grown

async def main():
    looking = None
    if sys.argv[1] == "release":
        looking = asyncio.create_task(memory.release_free_heap_when_grown(interval=0.05))
        await asyncio.sleep(0.01)  # its first look at the size: before the growth
    if sys.argv[1] == "release-late":
        looking = asyncio.create_task(memory.release_free_heap_when_grown(interval=0.05))
        await asyncio.sleep(0.01)
    kept, grown = fragment()
    if sys.argv[1] == "release-late":
        # Grown, and the blocks still in use for several looks, each of which may release what is free by then:
        # however many they are, only a release after the blocks are freed can hand them back.
        transient = [b"\\x02" * 20_000 for _ in range(4000)]
        await asyncio.sleep(0.3)
        del transient
        grown = memory.resident_bytes()
    freed = memory.resident_bytes()
    await asyncio.sleep(0.3)
    if looking is not None:
        looking.cancel()
    print(json.dumps({"freed_mib": (grown - freed) / 2**20, "left_mib": (grown - memory.resident_bytes()) / 2**20}))

asyncio.run(main())
"""


def released_mib(mode: str) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", FRAGMENTED, mode], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout)
    return result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc are Linux's")
def test_free_pages_inside_the_heap_leave_the_process() -> None:
    """In a fresh interpreter, 80 MB of blocks freed between kept ones: glibc keeps them resident by itself, and
    the periodic release hands them back."""
    kept = released_mib("keep")
    assert kept["freed_mib"] < 8 and kept["left_mib"] < 8, f"glibc returned them by itself: proves nothing: {kept}"
    released = released_mib("release")
    assert released["left_mib"] > 60, released


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc are Linux's")
def test_blocks_freed_after_the_releases_of_a_growth_leave_at_the_next_look() -> None:
    """The releases after the growth come while 80 MB of blocks are still in use; they are freed after them, and the
    next look releases them although the process did not grow again: malloc holds 80 MB more free."""
    released = released_mib("release-late")
    assert released["left_mib"] > 60, released


def test_a_release_is_due_only_past_the_slack_of_either_figure() -> None:
    from shared.service.memory import HeapReading, due_for_release

    mib = 2**20
    last = HeapReading(resident=100 * mib, free=30 * mib)
    assert not due_for_release(HeapReading(100 * mib, 30 * mib), last, slack=8 * mib)
    assert not due_for_release(HeapReading(108 * mib, 38 * mib), last, slack=8 * mib)
    assert due_for_release(HeapReading(108 * mib + 1, 30 * mib), last, slack=8 * mib)  # grown
    assert due_for_release(HeapReading(100 * mib, 38 * mib + 1), last, slack=8 * mib)  # freed into the heap


def test_the_baseline_follows_each_figure_down() -> None:
    """Blocks reused from the free ones and freed again are a rise from the lowest the free bytes fell to."""
    from shared.service.memory import HeapReading, due_for_release

    mib = 2**20
    baseline = HeapReading(resident=100 * mib, free=30 * mib).lowest(HeapReading(resident=104 * mib, free=2 * mib))
    assert baseline == HeapReading(resident=100 * mib, free=2 * mib)
    assert due_for_release(HeapReading(104 * mib, 30 * mib), baseline, slack=8 * mib)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc is Linux's")
def test_malloc_counts_what_is_freed_into_its_heap() -> None:
    """The second figure moves as the rule assumes: 80 MB freed between kept blocks are 80 MB more free, in a fresh
    interpreter."""
    script = FRAGMENTED.split("async def main")[0] + """
before = memory.free_heap_bytes()
kept, grown = fragment()
print(json.dumps({"free_mib": (memory.free_heap_bytes() - before) / 2**20}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["free_mib"] > 60, done.stdout
