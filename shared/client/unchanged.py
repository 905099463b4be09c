"""Whether a rebuilt backing object would change the live one: an update that changes nothing is not written.

kube-apiserver skips an update whose stored bytes would not change, so a custom resource keeps its
resourceVersion and no watch event is sent.  A backing object does not always round-trip to the same
bytes (the HelmRelease and Terraform CRDs default ``status.observedGeneration`` when it is read, so
the first replace after a create writes that default), which would bump the Application's resourceVersion and send a
MODIFIED event where a CRD sends none.  Comparing what the service writes keeps the Application
kind's no-op updates no-ops, whatever the backing CRD does.
"""

from __future__ import annotations

from typing import Any

from shared.bodies import JSON

#: Metadata a storage writes on its backing object (the rest is the server's).
_WRITTEN_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")
#: Top-level keys that are not the storage's to write.
_NOT_WRITTEN = ("apiVersion", "kind", "metadata", "status")


def unchanged(built: JSON, live: JSON) -> bool:
    """True when replacing ``live`` with ``built`` would leave every field the storage writes as it is.

    A field of ``spec`` (or any other top-level object) that only the live object has is not the
    storage's: its backing CRD defaulted it (Terraform's ``force``, ``parallelism``, ...) or another
    client set it, and a write would keep or re-default it.  Every field the storage states must
    equal the live one, whole.
    """
    content = {k for k in (*built, *live) if k not in _NOT_WRITTEN}
    for key in content:
        mine, theirs = built.get(key), live.get(key)
        if isinstance(mine, dict) and isinstance(theirs, dict):
            if any(field not in theirs or value != theirs[field] for field, value in mine.items()):
                return False
        elif mine != theirs:
            return False
    built_meta: JSON = built.get("metadata") or {}
    live_meta: JSON = live.get("metadata") or {}
    return all(_empty_is_none(built_meta.get(k)) == _empty_is_none(live_meta.get(k)) for k in _WRITTEN_METADATA)


def _empty_is_none(value: Any) -> Any:
    return value or None
