"""What changed between the cache and a new list of the same objects, as the events a watch would have sent.

When the upstream watch breaks, the cache lists again; its watchers must then see every change
they missed exactly once, in revision order, as if the watch had never broken.
"""

from __future__ import annotations

from collections.abc import Mapping

from .history import Record
from .packing import Key, Packer
from .store import Cached

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


class Reset(Exception):
    """The upstream state cannot be reconciled with the history; subscribers must list again."""


def relist_changes(cached: Mapping[Key, Cached], fresh: Mapping[Key, Cached], last: int, list_rv: int,
                   packer: Packer) -> list[Record]:
    """Synthetic events turning ``cached`` (current at ``last``) into ``fresh`` (listed at ``list_rv``).

    Changed objects keep their own RVs.  A deleted object's true deletion revision is unknown, but it
    lies in (last, list_rv] and is not any surviving object's RV, so each DELETED gets a distinct
    unused integer from that window (highest first).  Distinct RVs matter: a client resuming from any
    one of these events must get exactly the rest.  Raises :class:`Reset` when the revision went
    backwards (etcd was replaced) or the window cannot hold the changes.
    """
    if list_rv < last:
        raise Reset(f"resourceVersion went backwards ({last} -> {list_rv})")
    changes: list[Record] = []
    for key, entry in fresh.items():
        old = cached.get(key)
        if old is not None and old.rv == entry.rv:
            continue
        if not last < entry.rv <= list_rv:
            raise Reset(f"object {key} changed at resourceVersion {entry.rv}, outside ({last}, {list_rv}]")
        changes.append(Record(entry.rv, ADDED, entry.packed, key) if old is None
                       else Record(entry.rv, MODIFIED, entry.packed, key, old.packed))
    gone = sorted(key for key in cached if key not in fresh)
    if gone:
        free = _free_revisions(len(gone), {rec.rv for rec in changes}, last, list_rv)
        for key, rv in zip(gone, free, strict=True):
            tomb = packer.unpack(cached[key].packed)
            tomb.setdefault("metadata", {})["resourceVersion"] = str(rv)
            changes.append(Record(rv, DELETED, packer.pack(tomb), key))
    changes.sort(key=lambda rec: rec.rv)
    return changes


def _free_revisions(count: int, used: set[int], last: int, list_rv: int) -> list[int]:
    free: list[int] = []
    candidate = list_rv
    while len(free) < count and candidate > last:
        if candidate not in used:
            free.append(candidate)
        candidate -= 1
    if len(free) < count:
        raise Reset("more deletions than revisions since the last seen resourceVersion")
    return free
