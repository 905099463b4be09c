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
