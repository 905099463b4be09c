"""Field paths and field sets, and their ``FieldsV1`` wire form, as structured-merge-diff defines them.

A path is a tuple of elements; an element is one of

* ``("f", name)``: a struct field or a map key (``f:name`` in FieldsV1, ``.name`` in messages);
* ``("k", json)``: an item of a ``map`` list, by its keys (``k:{"name":"a"}``, ``[name="a"]``);
* ``("v", json)``: an item of a ``set`` list, by its value (``v:"a"``, ``[="a"]``);
* ``("i", index)``: an item of a list by position (``i:0``, ``[0]``).

Keys and values are kept as canonical JSON text so elements hash and compare as plain tuples.  A
field set is a ``frozenset`` of paths: every path in it is a *member*, and set operations are
path-wise (as structured-merge-diff's ``Set`` operations are).  Written by hand: no Python
library implements structured-merge-diff.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

PathElement = tuple[str, Any]
Path = tuple[PathElement, ...]
FieldSet = frozenset[Path]

EMPTY: FieldSet = frozenset()
_KIND_ORDER = {"f": 0, "k": 1, "v": 2, "i": 3}


def canonical(value: Any) -> str:
    """JSON text as structured-merge-diff writes key and value elements (sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def field(name: str) -> PathElement:
    return ("f", name)


def key_element(keys: dict[str, Any]) -> PathElement:
    return ("k", canonical(keys))


def value_element(value: Any) -> PathElement:
    return ("v", canonical(value))


def _element_sort_key(element: PathElement) -> tuple[int, Any]:
    kind, payload = element
    return (_KIND_ORDER[kind], payload)


def element_string(element: PathElement) -> str:
    """The element as a conflict message names it (``.name``, ``[k=v,...]``, ``[=v]``, ``[i]``)."""
    kind, payload = element
    if kind == "f":
        return f".{payload}"
    if kind == "k":
        keys = json.loads(payload)
        return "[" + ",".join(f"{name}={canonical(keys[name])}" for name in sorted(keys)) + "]"
    if kind == "v":
        return f"[={payload}]"
    return f"[{payload}]"


def path_string(path: Path) -> str:
    return "".join(element_string(e) for e in path)


# ---------------------------------------------------------------------------------------- trie views


class _Node:
    """A trie of a field set: which child elements are members, and the sets below each child."""

    __slots__ = ("children", "members")

    def __init__(self) -> None:
        self.members: set[PathElement] = set()
        self.children: dict[PathElement, _Node] = {}


def _trie(fields: Iterable[Path]) -> _Node:
    root = _Node()
    for path in fields:
        node = root
        for element in path[:-1]:
            node = node.children.setdefault(element, _Node())
        if path:
            node.members.add(path[-1])
    return root


def children(fields: FieldSet) -> dict[PathElement, FieldSet]:
    """The paths below each first element, without that element (``Set.WithPrefix`` for every child)."""
    out: dict[PathElement, set[Path]] = {}
    for path in fields:
        if len(path) > 1:
            out.setdefault(path[0], set()).add(path[1:])
    return {element: frozenset(paths) for element, paths in out.items()}


def iterate(fields: FieldSet) -> Iterator[Path]:
    """The paths in structured-merge-diff's order: a node's members, then its children, each sorted."""

    def walk(node: _Node, prefix: Path) -> Iterator[Path]:
        for element in sorted(node.members, key=_element_sort_key):
            yield (*prefix, element)
        for element in sorted(node.children, key=_element_sort_key):
            yield from walk(node.children[element], (*prefix, element))

    return walk(_trie(fields), ())


# ---------------------------------------------------------------------------------------- FieldsV1


def _encode_element(element: PathElement) -> str:
    kind, payload = element
    return f"{kind}:{payload}"


def _decode_element(text: str) -> PathElement:
    kind, sep, payload = text.partition(":")
    if not sep or kind not in _KIND_ORDER:
        raise ValueError(f"unknown FieldsV1 key {text!r}")
    if kind == "f":
        return ("f", payload)
    if kind == "i":
        return ("i", int(payload))
    return (kind, canonical(json.loads(payload)))


def to_fields_v1(fields: FieldSet) -> dict[str, Any]:
    """The FieldsV1 object of a set: ``{"f:spec": {"f:replicas": {}}}``, ``"."`` marking a member
    that also has children."""

    def render(node: _Node) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for element in sorted(set(node.members) | set(node.children), key=_element_sort_key):
            child = node.children.get(element)
            rendered = render(child) if child is not None else {}
            if child is not None and element in node.members:
                rendered = {".": {}, **rendered}
            out[_encode_element(element)] = rendered
        return out

    return render(_trie(fields))


def from_fields_v1(doc: Any) -> FieldSet:
    """Parse a FieldsV1 object back into a field set (``ValueError`` when it is malformed)."""
    out: set[Path] = set()

    def walk(node: Any, prefix: Path) -> None:
        if not isinstance(node, dict):
            raise ValueError("FieldsV1 nodes must be objects")
        for key, child in node.items():
            if key == ".":
                if prefix:
                    out.add(prefix)
                continue
            path = (*prefix, _decode_element(key))
            if isinstance(child, dict) and child and set(child) != {"."}:
                walk(child, path)
            else:
                out.add(path)

    walk(doc, ())
    return frozenset(out)
