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


def to_cel(schema: JSON | None, value: Any) -> Any:
    """``value`` (parsed JSON) as the CEL value a rule at ``schema`` sees."""
    node = schema or {}
    if isinstance(value, dict):
        properties = node.get("properties")
        if isinstance(properties, dict) and properties:
            return _object(properties, value)
        values = node.get("additionalProperties")
        child = values if isinstance(values, dict) else None
        return {key: to_cel(child, item) for key, item in value.items()}
    if isinstance(value, list):
        items = node.get("items")
        child = items if isinstance(items, dict) else None
        return [to_cel(child, item) for item in value]
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


def _object(properties: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        escaped = escape_property(key)
        if escaped is not None:
            child = properties.get(key)
            out[escaped] = to_cel(child if isinstance(child, dict) else None, item)
    return out
