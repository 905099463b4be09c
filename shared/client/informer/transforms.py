"""What a cache may leave out of the objects it keeps, for owners whose readers never look at it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from shared.bodies import JSON
from shared.client.kube import rawlist
from shared.client.kube.rawlist import RawObject

#: Applied to every object before it is cached; it must keep namespace, name and resourceVersion.
Transform = Callable[[JSON], JSON]


class CacheShape:
    """A :data:`Transform` for caches whose readers never show ``managedFields`` (most of an object's metadata by
    size) and, given ``spec_fields``, look at only those fields of ``spec``; metadata and status stay whole
    otherwise.  It shapes a listed item too without decoding it (:meth:`encoded`), so a cache keeps a list's
    items without building what it drops.

    The owner lists what its readers use; an object read from kube-apiserver directly (a get, the write path) is
    whole, so the owner's tests compare what both give.
    """

    def __init__(self, spec_fields: Iterable[str] | None = None) -> None:
        self._spec = None if spec_fields is None else frozenset(spec_fields)

    def __call__(self, obj: JSON) -> JSON:
        meta = obj.get("metadata")
        if isinstance(meta, dict) and "managedFields" in meta:
            obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
        spec = obj.get("spec")
        if self._spec is not None and isinstance(spec, dict) and not self._spec.issuperset(spec):
            obj = {**obj, "spec": {k: v for k, v in spec.items() if k in self._spec}}
        return obj

    def encoded(self, item: RawObject, meta: RawObject) -> bytes:
        """The JSON of what is kept of a listed ``item``, whose metadata has the fields ``meta``: what
        :meth:`__call__` keeps of the decoded item, only the fields it drops never decoded."""
        if "managedFields" in meta:
            item["metadata"] = rawlist.encoded({k: v for k, v in meta.items() if k != "managedFields"})
        if self._spec is not None and "spec" in item:
            spec = rawlist.fields(item["spec"])
            if spec and not self._spec.issuperset(spec):
                item["spec"] = rawlist.encoded({k: v for k, v in spec.items() if k in self._spec})
        return rawlist.encode(item)


#: The cached copy leaves ``managedFields`` out.
without_managed_fields = CacheShape()


def keeping_spec(fields: Iterable[str]) -> CacheShape:
    """The cached copy has no ``managedFields`` and, of ``spec``, only ``fields``."""
    return CacheShape(fields)
