"""Objects as CEL sees them: typed by the schema, property names escaped.

kube-apiserver types ``self`` by the schema node it is bound at. The consequences that matter at
run time are reproduced here: a ``number`` is a double even when the JSON holds ``3``, a ``string``
with ``format: byte`` is bytes, and one with ``format: date-time``, ``date`` or ``duration`` is a
timestamp or duration (:func:`conversion`). Property names are escaped as kube-apiserver escapes them
(``foo-bar`` is ``self.foo__dash__bar``, ``namespace`` is ``self.__namespace__``); the keys of a
map (``additionalProperties``) are left as they are.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

JSON = dict[str, Any]

_RESERVED = frozenset({
    "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function", "if",
    "import", "let", "loop", "package", "namespace", "return", "var", "void", "while",
})
_ESCAPABLE = re.compile(r"[a-zA-Z_.\-/][a-zA-Z0-9_.\-/]*")
_ESCAPES = {".": "__dot__", "-": "__dash__", "/": "__slash__"}


def escape_property(name: str) -> str | None:
    """The name a rule uses for property ``name``, or None when no rule can reach it."""
    if name in _RESERVED:
        return f"__{name}__"
    if not _ESCAPABLE.fullmatch(name):
        return None
    out: list[str] = []
    i = 0
    while i < len(name):
        if name.startswith("__", i):
            out.append("__underscores__")
            i += 2
            continue
        out.append(_ESCAPES.get(name[i], name[i]))
        i += 1
    return "".join(out)


def to_cel(schema: JSON | None, value: Any, *, unordered: bool = False) -> Any:
    """``value`` (parsed JSON) as the CEL value a rule at ``schema`` sees.

    With ``unordered`` the items of ``set`` and ``map`` lists come in a canonical order: kube-apiserver
    compares such lists regardless of order, which a transition rule like ``self == oldSelf`` relies
    on, and the runtime's list equality is ordered.
    """
    node = schema or {}
    if isinstance(value, dict):
        properties = node.get("properties")
        if isinstance(properties, dict) and properties:
            return _object(properties, value, unordered)
        values = node.get("additionalProperties")
        child = values if isinstance(values, dict) else None
        return {key: to_cel(child, item, unordered=unordered) for key, item in value.items()}
    if isinstance(value, list):
        items = node.get("items")
        child = items if isinstance(items, dict) else None
        converted = [to_cel(child, item, unordered=unordered) for item in value]
        if unordered and node.get("x-kubernetes-list-type") in ("set", "map"):
            keys = node.get("x-kubernetes-list-map-keys") if node.get("x-kubernetes-list-type") == "map" else None
            order = sorted(range(len(value)), key=lambda i: _identity(value[i], keys))
            converted = [converted[i] for i in order]
        return converted
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and node.get("type") == "number":
        return float(value)
    if isinstance(value, str) and node.get("type") == "string" and node.get("format") == "date":
        return f"{value}T00:00:00Z"  # a date is a timestamp at midnight UTC (see conversion())
    if isinstance(value, str) and node.get("type") == "string" and node.get("format") == "byte":
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error:
            return value
    return value


def conversion(schema: JSON) -> str:
    """The CEL function that turns a node's string into the type kube-apiserver gives it, if any.

    Only ``self`` at such a node is converted: the same field seen from its parent stays a string.
    """
    if schema.get("type") != "string":
        return ""
    return {"date-time": "timestamp", "date": "timestamp", "duration": "duration"}.get(str(schema.get("format")), "")


def _identity(item: Any, keys: Any) -> str:
    """What identifies a set item (its value) or a map-list item (its key fields), as sortable text."""
    if isinstance(keys, list) and isinstance(item, dict):
        item = [item.get(key) for key in keys]
    return json.dumps(item, sort_keys=True)


def _object(properties: dict[str, Any], value: dict[str, Any], unordered: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        escaped = escape_property(key)
        if escaped is not None:
            child = properties.get(key)
            out[escaped] = to_cel(child if isinstance(child, dict) else None, item, unordered=unordered)
    return out
