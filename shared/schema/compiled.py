"""A schema compiled into code that answers one question fast: is this value valid?

Most writes are valid, and for a valid value jsonschema's interpreter (:data:`shared.schema.dialect.Validator`)
is most of what validation costs: it walks the schema keyword by keyword on every call.  fastjsonschema
generates Python code from a schema once; :mod:`shared.schema.validation` asks it first and goes to the full
validator only for a value it rejects, which also says why.  So the compiled check may reject more than the
full validator (that costs a second look), but it must never accept what the full validator rejects.

fastjsonschema implements Draft 07, not Draft 2020-12 with Kubernetes' OpenAPI dialect.  A schema is compiled
only when every keyword in it means the same in both, or means the same once rewritten here: ``nullable`` and
``x-kubernetes-int-or-string`` become plain types, and a ``pattern`` becomes a format fastjsonschema calls
back for, matched as Go matches it, as the full validator does (:mod:`shared.patterns`).  Any other keyword
(``$ref``, ``uniqueItems``, ``patternProperties``, …) leaves the schema with no compiled check, and every value
goes to the full validator as before.  Which rewrite keeps which guarantee is said beside it below; the property test in
``tests/unit/test_schema_compiled.py`` holds the compiled check to the full validator on generated values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared import patterns
from shared.bodies import JSON
from shared.schema.dialect import is_int_or_string_any_of

__all__ = ["Acceptor", "acceptor"]

#: True when a value is valid; False when it may not be (the full validator decides).
Acceptor = Callable[[Any], bool]

_DRAFT_07 = "http://json-schema.org/draft-07/schema#"
_INT_OR_STRING = "x-kubernetes-int-or-string"
#: Keywords that validate nothing; the full validator does not check ``format`` either.
_ANNOTATIONS = frozenset({
    "description", "title", "default", "example", "examples", "format", "$comment", "deprecated", "readOnly",
    "writeOnly",
})
#: Keywords whose Draft 07 meaning is Draft 2020-12's, on the values JSON decodes to.
_SAME = frozenset({
    "required", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
    "minItems", "maxItems", "minProperties", "maxProperties",
})
_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})


class _Unsupported(Exception):
    """A keyword whose meaning the compiled check cannot be trusted to keep."""


def acceptor(schema: JSON) -> Acceptor | None:
    """The compiled check of a schema already in Draft 2020-12 form (``to_jsonschema``), or None.

    None when the schema uses a keyword the check cannot keep exactly, or fastjsonschema cannot compile it.
    """
    matchers = _Matchers()
    try:
        rewritten = {"$schema": _DRAFT_07, **_node(schema, matchers)}
    except _Unsupported:
        return None
    import fastjsonschema  # here, on the first write, not in every start-up (15 ms)

    try:
        check = fastjsonschema.compile(rewritten, formats=matchers.by_format, use_default=False)
    # A schema fastjsonschema cannot compile (it raises more than its own exception types) has no compiled check.
    except Exception:
        return None

    def accepts(value: Any) -> bool:
        try:
            check(value)
        # Whatever the generated code raises, the full validator answers the value.
        except Exception:
            return False
        return True

    return accepts


class _Matchers:
    """The patterns of one schema, each as a format fastjsonschema calls: ``format`` is otherwise dropped, so
    the only formats the compiled check knows are these."""

    def __init__(self) -> None:
        self.by_format: dict[str, Callable[[Any], bool]] = {}
        self._names: dict[str, str] = {}

    def format_for(self, pattern: Any) -> str:
        if not isinstance(pattern, str):
            raise _Unsupported(f"pattern {pattern!r}")
        name = self._names.get(pattern)
        if name is None:
            try:
                search = patterns.matcher(pattern)  # its match is truthy, its None falsy: what a format returns
            except ValueError as exc:
                raise _Unsupported(str(exc)) from None
            name = self._names[pattern] = f"pattern-{len(self._names)}"
            self.by_format[name] = search  # type: ignore[assignment]
        return name


def _node(node: Any, matchers: _Matchers) -> JSON:
    if not isinstance(node, dict):
        raise _Unsupported("a boolean schema")
    out: JSON = {}
    for key, value in node.items():
        if key in _ANNOTATIONS or key in ("nullable", _INT_OR_STRING):
            continue
        if key.startswith("x-kubernetes-"):
            continue  # the full validator ignores the other extensions too
        if key in _SAME:
            out[key] = value
        elif key == "type":
            out[key] = _type(value)
        elif key == "pattern":
            out["format"] = matchers.format_for(value)
        elif key in ("enum", "const"):
            out[key] = _literal(key, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _node(sub, matchers) for name, sub in value.items()}
        elif key == "additionalProperties":
            out[key] = value if isinstance(value, bool) else _node(value, matchers)
        elif key == "items" and isinstance(value, dict):
            out[key] = _node(value, matchers)
        elif key in ("allOf", "anyOf", "oneOf") and isinstance(value, list):
            out[key] = [_node(branch, matchers) for branch in value]
        elif key == "not":
            out[key] = _node(value, matchers)
        else:
            raise _Unsupported(key)
    return _dialect(node, out)


def _dialect(node: JSON, out: JSON) -> JSON:
    """Rewrite what the dialect validator skips or adds (``shared.schema.dialect``) as plain keywords."""
    nullable = node.get("nullable") is True
    if nullable:
        # The dialect lets null through ``type``, ``enum`` and ``anyOf`` only; each gets null as one more choice.
        if "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = [*types, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        if "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    if node.get(_INT_OR_STRING) is True:
        if is_int_or_string_any_of(node.get("anyOf")):
            out.pop("anyOf", None)  # the dialect reports the idiom once, through the extension
        either = {"type": ["integer", "string", *(["null"] if nullable else [])]}
        out = {"allOf": [out, either]}  # every keyword of a node must hold: a conjunction keeps them
    return out


def _type(value: Any) -> Any:
    names = value if isinstance(value, list) else [value]
    if not names or any(name not in _TYPES for name in names):
        raise _Unsupported(f"type {value!r}")
    return value


def _literal(key: str, value: Any) -> Any:
    # Python's ``==`` takes True for 1 where JSON schema does not; strings equal strings only.
    values = value if key == "enum" else [value]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise _Unsupported(f"{key} of non-strings")
    return value
