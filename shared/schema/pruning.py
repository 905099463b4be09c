"""Unknown fields of an object, found and pruned as kube-apiserver prunes a custom resource.

A structural schema declares every field it keeps: an object node with ``properties`` knows only
those keys (unless ``x-kubernetes-preserve-unknown-fields``), a map node keeps any key and checks
its values, a free-form node keeps everything.  What is left over is an *unknown field*, named the
way kube's strict decoder names it (``spec.users.a.nope``, ``spec.endpoints[0].foo``); the write's
``fieldValidation`` decides whether it is an error, a warning or silently dropped.
"""

from __future__ import annotations

import copy
from typing import Any

from shared.bodies import JSON

_PRESERVE = "x-kubernetes-preserve-unknown-fields"
#: ``ObjectMeta`` fields a write may carry.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields",
})


def unknown_fields(object_schema: JSON, obj: Any) -> list[str]:
    """The unknown fields of a whole object (top level, metadata, and below the schema), sorted."""
    found: list[str] = []
    _walk(object_schema, obj, "", found, prune=False)
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        found.extend(f"metadata.{k}" for k in obj["metadata"] if k not in OBJECT_META_FIELDS)
    return sorted(found)


def prune_unknown(object_schema: JSON, obj: Any) -> Any:
    """A copy of ``obj`` without its unknown fields."""
    out = copy.deepcopy(obj)
    _walk(object_schema, out, "", [], prune=True)
    if isinstance(out, dict) and isinstance(out.get("metadata"), dict):
        for key in [k for k in out["metadata"] if k not in OBJECT_META_FIELDS]:
            del out["metadata"][key]
    return out


#: Fields every object has, whatever its schema says.
_OBJECT_FIELDS = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}


def _walk(schema: Any, value: Any, path: str, found: list[str], *, prune: bool) -> None:
    if not isinstance(schema, dict):
        return
    if not path and isinstance(schema.get("properties"), dict):
        schema = {**schema, "properties": {**_OBJECT_FIELDS, **schema["properties"]}}
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if isinstance(props, dict):
            for key in list(value):
                child = f"{path}.{key}" if path else key
                if key in props:
                    if key != "metadata" or path:
                        _walk(props[key], value[key], child, found, prune=prune)
                elif isinstance(extra, dict):
                    _walk(extra, value[key], child, found, prune=prune)
                elif not schema.get(_PRESERVE):
                    found.append(child)
                    if prune:
                        del value[key]
        elif isinstance(extra, dict):
            for key in value:
                _walk(extra, value[key], f"{path}.{key}" if path else key, found, prune=prune)
    elif isinstance(value, list):
        items = schema.get("items")
        for index, item in enumerate(value):
            _walk(items, item, f"{path}[{index}]", found, prune=prune)
