"""What a cache may leave out of the objects it keeps, for owners whose readers never look at it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shared.bodies import JSON

#: Applied to every object before it is cached; it must keep namespace, name and resourceVersion.
Transform = Callable[[JSON], JSON]


def without_managed_fields(obj: JSON) -> JSON:
    """A :data:`Transform` for caches whose readers never show ``managedFields`` (most of an
    object's metadata by size): the cached copy leaves them out."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def keeping_spec(fields: Iterable[str]) -> Transform:
    """A :data:`Transform` for caches whose readers look at only some of ``spec``: the cached copy
    has no ``managedFields`` and, of ``spec``, only ``fields``; metadata and status stay whole.

    The owner lists what its readers use; an object read from kube-apiserver directly (a get, the
    write path) is whole, so the owner's tests compare what both give.
    """
    kept = frozenset(fields)

    def transform(obj: JSON) -> JSON:
        obj = without_managed_fields(obj)
        spec = obj.get("spec")
        if isinstance(spec, dict) and not kept.issuperset(spec):
            obj = {**obj, "spec": {k: v for k, v in spec.items() if k in kept}}
        return obj

    return transform
