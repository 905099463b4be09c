"""Typed operations on plain JSON values, driven by an OpenAPI v3 structural schema.

These are structured-merge-diff's ``TypedValue`` operations (``ToFieldSet``, ``Merge``,
``Compare``, ``RemoveItems``, ``Set.EnsureNamedFieldsAreMembers``), re-implemented over the
schema dialect CRDs use, because no Python library does structured merge:

* ``type: object`` with ``properties`` is a struct: its declared fields are *named* fields;
  keys it does not declare (``x-kubernetes-preserve-unknown-fields``) are map entries;
* ``type: object`` with ``additionalProperties`` is a granular map; ``x-kubernetes-map-type:
  atomic`` makes either kind a single leaf;
* ``type: array`` is a list of ``x-kubernetes-list-type`` ``atomic`` (the default, one leaf),
  ``set`` (items by value) or ``map`` (items by ``x-kubernetes-list-map-keys``);
* a free-form node (``x-kubernetes-preserve-unknown-fields`` without properties, or no schema at
  all) is *deduced* from the value: objects are granular maps, lists atomic, the rest scalars;
* everything else, int-or-string included, is a scalar.

Values absent from an object are :data:`MISSING`; ``None`` is JSON null, a value like any other.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from shared.api.fieldmanager.fieldpath import (
    EMPTY,
    FieldSet,
    Path,
    PathElement,
    children,
    field,
    key_element,
    value_element,
)

Schema = dict[str, Any] | None


class _Missing:
    """The absence of a value (structured-merge-diff's nil), distinct from JSON null."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

_PRESERVE = "x-kubernetes-preserve-unknown-fields"


class Kind(Enum):
    SCALAR = "scalar"
    STRUCT = "struct"
    MAP = "map"
    ATOMIC = "atomic"
    SET = "set"
    ASSOCIATIVE = "associative"


def kind_of(schema: Schema, value: Any = MISSING) -> Kind:
    """How a node of ``schema`` holding ``value`` is merged (deduced nodes look at the value)."""
    if schema is None or schema.get("x-kubernetes-int-or-string"):
        return _deduced(value) if schema is None else Kind.SCALAR
    declared = schema.get("type")
    if declared == "object":
        if schema.get("x-kubernetes-map-type") == "atomic":
            return Kind.ATOMIC
        if "properties" in schema:
            return Kind.STRUCT
        if isinstance(schema.get("additionalProperties"), dict):
            return Kind.MAP
        return Kind.MAP if schema.get(_PRESERVE) else Kind.STRUCT
    if declared == "array":
        list_type = schema.get("x-kubernetes-list-type") or "atomic"
        return {"set": Kind.SET, "map": Kind.ASSOCIATIVE}.get(list_type, Kind.ATOMIC)
    if declared is None and schema.get(_PRESERVE):
        return _deduced(value)
    return Kind.SCALAR


def _deduced(value: Any) -> Kind:
    if isinstance(value, dict):
        return Kind.MAP
    if isinstance(value, list):
        return Kind.ATOMIC
    return Kind.SCALAR


def _shape_matches(kind: Kind, value: Any) -> bool:
    if value is MISSING:
        return True
    if kind in (Kind.STRUCT, Kind.MAP):
        return isinstance(value, dict)
    if kind in (Kind.SET, Kind.ASSOCIATIVE):
        return isinstance(value, list)
    return True


def effective_kind(schema: Schema, *values: Any) -> Kind:
    """The kind, falling back to a leaf when a value does not have the schema's shape."""
    present = next((v for v in values if v is not MISSING), MISSING)
    kind = kind_of(schema, present)
    if all(_shape_matches(kind, v) for v in values):
        return kind
    return Kind.ATOMIC


def child_schema(schema: Schema, key: str) -> tuple[Schema, bool]:
    """The schema of field ``key`` of an object node, and whether it is a named (declared) field."""
    if schema is None:
        return None, False
    props = schema.get("properties")
    if isinstance(props, dict) and isinstance(props.get(key), dict):
        return props[key], True
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return extra, False
    return None, False


def items_schema(schema: Schema) -> Schema:
    items = schema.get("items") if schema is not None else None
    return items if isinstance(items, dict) else None


def item_element(schema: Schema, kind: Kind, item: Any, index: int) -> PathElement:
    """The path element of a list item: by its keys (map lists), its value (set lists), else its index."""
    if kind is Kind.ASSOCIATIVE and isinstance(item, dict):
        keys = (schema or {}).get("x-kubernetes-list-map-keys") or []
        return key_element({k: item[k] for k in keys if k in item})
    if kind is Kind.SET:
        return value_element(item)
    return ("i", index)


def same(a: Any, b: Any) -> bool:
    """Equality of JSON values that tells 1 from 1.0 and True from 1, as Go's values do."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _is_empty_container(value: Any) -> bool:
    return value is MISSING or value is None or value == {} or value == []


def _indexed(schema: Schema, kind: Kind, items: list[Any]) -> dict[PathElement, Any]:
    """List items by path element; a repeated element keeps its first item."""
    out: dict[PathElement, Any] = {}
    for index, item in enumerate(items):
        out.setdefault(item_element(schema, kind, item, index), item)
    return out


# ---------------------------------------------------------------------------------------- ToFieldSet


def field_set(value: Any, schema: Schema) -> FieldSet:
    """Every path ``value`` sets: leaves, map entries, list items and empty or null fields."""
    out: set[Path] = set()
    _field_set(value, schema, (), out)
    return frozenset(out)


def _field_set(value: Any, schema: Schema, path: Path, out: set[Path]) -> None:
    kind = effective_kind(schema, value)
    if kind in (Kind.SCALAR, Kind.ATOMIC):
        out.add(path)
        return
    if kind in (Kind.STRUCT, Kind.MAP):
        for key, child in value.items():
            sub, named = child_schema(schema, key)
            child_path = (*path, field(key))
            _field_set(child, sub, child_path, out)
            if child is None or child == {} or not named:
                out.add(child_path)
        return
    element_schema = items_schema(schema)
    for element, item in _indexed(schema, kind, value).items():
        item_path = (*path, element)
        _field_set(item, element_schema, item_path, out)
        out.add(item_path)


# ---------------------------------------------------------------------------------------- Merge


#: The node kinds merged member by member.
_GRANULAR = frozenset({Kind.STRUCT, Kind.MAP, Kind.SET, Kind.ASSOCIATIVE})


def merge(lhs: Any, rhs: Any, schema: Schema) -> Any:
    """``rhs`` merged onto ``lhs``: granular nodes merge member by member, leaves take ``rhs``."""
    if rhs is MISSING:
        return copy.deepcopy(lhs)
    if lhs is MISSING:
        return copy.deepcopy(rhs)
    if rhs is None and lhs and kind_of(schema, lhs) in _GRANULAR and _shape_matches(kind_of(schema, lhs), lhs):
        return copy.deepcopy(lhs)  # to structured merge, null is an empty map or list: the members stay
    kind = effective_kind(schema, lhs, rhs)
    if kind in (Kind.SCALAR, Kind.ATOMIC) or (_is_empty_container(lhs) and _is_empty_container(rhs)):
        return copy.deepcopy(rhs)
    if kind in (Kind.STRUCT, Kind.MAP):
        out: dict[str, Any] = {}
        for key in [*lhs, *(k for k in rhs if k not in lhs)]:
            sub, _ = child_schema(schema, key)
            out[key] = merge(lhs.get(key, MISSING), rhs.get(key, MISSING), sub)
        return out
    element_schema = items_schema(schema)
    left, right = _indexed(schema, kind, lhs), _indexed(schema, kind, rhs)
    return [merge(left.get(e, MISSING), right.get(e, MISSING), element_schema) for e in merged_order(left, right)]


def merged_order(left: dict[PathElement, Any], right: dict[PathElement, Any]) -> list[PathElement]:
    """The order of a merged list (structured-merge-diff's): the right side's order, each item only
    on the left kept where it was relative to the shared items around it."""
    lhs, rhs = list(left), list(right)
    shared = [e for e in rhs if e in left]
    out: list[PathElement] = []
    li = ri = 0
    while li < len(lhs) or ri < len(rhs):
        if li < len(lhs) and ri < len(rhs) and lhs[li] == rhs[ri]:
            out.append(lhs[li])
            if shared and shared[0] == lhs[li]:
                shared.pop(0)
            li, ri = li + 1, ri + 1
            continue
        if li < len(lhs):
            element = lhs[li]
            if element in right and (not shared or shared[0] != element):
                li += 1  # a shared item not due yet: it is placed where the right side has it
                continue
            if element not in right:
                out.append(element)
                li += 1
                continue
        if ri < len(rhs):
            element = rhs[ri]
            out.append(element)
            if shared and shared[0] == element:
                shared.pop(0)
            ri += 1
        else:
            li += 1
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------- Compare


@dataclass(frozen=True)
class Comparison:
    added: FieldSet = EMPTY
    modified: FieldSet = EMPTY
    removed: FieldSet = EMPTY

    def changed(self) -> FieldSet:
        return self.added | self.modified

    def exclude(self, prefixes: Iterable[Path]) -> Comparison:
        """Without the paths under (or at) ``prefixes`` (``Comparison.ExcludeFields``)."""
        pre = tuple(prefixes)
        return Comparison(not_under(self.added, pre), not_under(self.modified, pre), not_under(self.removed, pre))


def not_under(fields: FieldSet, prefixes: tuple[Path, ...]) -> FieldSet:
    """``fields`` without the paths at or under any of ``prefixes``: one set lookup per path and prefix length
    (the prefixes are few and short, ``status`` alone for a main resource)."""
    if not fields or not prefixes:
        return fields
    wanted = frozenset(prefixes)
    lengths = sorted({len(x) for x in prefixes})
    return frozenset(p for p in fields if not any(p[:n] in wanted for n in lengths if n <= len(p)))


def compare(lhs: Any, rhs: Any, schema: Schema) -> Comparison:
    """What changed from ``lhs`` to ``rhs``: leaves added, modified or removed, and the granular
    nodes that appeared or disappeared as a whole."""
    added: set[Path] = set()
    modified: set[Path] = set()
    removed: set[Path] = set()

    def walk(left: Any, right: Any, node_schema: Schema, path: Path) -> None:
        if left is MISSING:
            _added_below(right, node_schema, path, added)
            return
        kind = effective_kind(node_schema, left, right)
        leaf = kind in (Kind.SCALAR, Kind.ATOMIC) or (_is_empty_container(left) and _is_empty_container(right))
        if leaf:
            if left is MISSING:
                added.add(path)
            elif right is MISSING:
                removed.add(path)
            elif not same(left, right):
                modified.add(path)
            return
        if kind in (Kind.STRUCT, Kind.MAP):
            lmap = left if isinstance(left, dict) else {}
            rmap = right if isinstance(right, dict) else {}
            for key in [*lmap, *(k for k in rmap if k not in lmap)]:
                sub, _ = child_schema(node_schema, key)
                walk(lmap.get(key, MISSING), rmap.get(key, MISSING), sub, (*path, field(key)))
        else:
            element_schema = items_schema(node_schema)
            lidx = _indexed(node_schema, kind, left if isinstance(left, list) else [])
            ridx = _indexed(node_schema, kind, right if isinstance(right, list) else [])
            for element in [*lidx, *(e for e in ridx if e not in lidx)]:
                walk(lidx.get(element, MISSING), ridx.get(element, MISSING), element_schema, (*path, element))
        if path and left is MISSING:
            added.add(path)
        elif path and right is MISSING:
            removed.add(path)

    walk(lhs, rhs, schema, ())
    return Comparison(frozenset(added), frozenset(modified), frozenset(removed))


def _added_below(value: Any, schema: Schema, path: Path, out: set[Path]) -> None:
    """What :func:`compare` finds added where ``value`` appears at ``path`` with nothing before it: the node
    and every node below it.  Walked on its own, without a left side to look at at every node, because a create
    (and a new subtree in an update) is all of this: it is the field manager's main cost on a create."""
    kind = kind_of(schema, value)
    if not _shape_matches(kind, value):
        kind = Kind.ATOMIC
    if kind is Kind.SCALAR or kind is Kind.ATOMIC or _is_empty_container(value):
        out.add(path)
        return
    if kind is Kind.STRUCT or kind is Kind.MAP:
        for key, child in value.items():
            _added_below(child, child_schema(schema, key)[0], (*path, field(key)), out)
    else:
        element_schema = items_schema(schema)
        for element, item in _indexed(schema, kind, value).items():
            _added_below(item, element_schema, (*path, element), out)
    if path:
        out.add(path)


# ---------------------------------------------------------------------------------------- RemoveItems


def remove_items(value: Any, fields: FieldSet, schema: Schema) -> Any:
    """``value`` without the members of ``fields`` (each taken with everything below it).

    As in structured-merge-diff, a granular node left with nothing becomes null; callers drop
    nulls the way kube-apiserver prunes them from a custom resource.
    """
    if not fields:
        return copy.deepcopy(value)
    kind = effective_kind(schema, value)
    if kind is Kind.SCALAR:
        return copy.deepcopy(value)
    if kind is Kind.ATOMIC or _is_empty_container(value):
        return None
    below = children(fields)
    if kind in (Kind.STRUCT, Kind.MAP):
        out: dict[str, Any] = {}
        for key, child in value.items():
            element = field(key)
            if (element,) in fields:
                continue
            sub, _ = child_schema(schema, key)
            out[key] = remove_items(child, below[element], sub) if element in below else copy.deepcopy(child)
        return out or None
    element_schema = items_schema(schema)
    items: list[Any] = []
    for index, item in enumerate(value):
        element = item_element(schema, kind, item, index)
        if (element,) in fields:
            continue
        items.append(remove_items(item, below[element], element_schema) if element in below else copy.deepcopy(item))
    return items or None


def drop_nulls(value: Any, schema: Schema) -> Any:
    """``value`` without null fields, unless the schema makes them ``nullable`` (CRD null pruning)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, child in value.items():
            sub, _ = child_schema(schema, key)
            if child is None and not (sub or {}).get("nullable"):
                continue
            out[key] = drop_nulls(child, sub)
        return out
    if isinstance(value, list):
        return [drop_nulls(item, items_schema(schema)) for item in value]
    return value


# ---------------------------------------------------------------------------------------- named fields


def ensure_named_fields_are_members(fields: FieldSet, schema: Schema) -> FieldSet:
    """``fields`` plus every ancestor that is a declared struct field (``EnsureNamedFieldsAreMembers``)."""
    out = set(fields)
    for path in fields:
        node_schema = schema
        for depth, element in enumerate(path[:-1]):
            if element[0] == "f":
                sub, named = child_schema(node_schema, element[1])
                if named and kind_of(node_schema) is Kind.STRUCT:
                    out.add(path[: depth + 1])
                node_schema = sub
            else:
                node_schema = items_schema(node_schema)
    return frozenset(out)
