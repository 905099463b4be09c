"""The structural rewrite of a definition's schema, for publishing it in OpenAPI.

kube-openapi consumers (the aggregator, ``kubectl explain``, client-side validation) accept only
the structural subset of OpenAPI v3; the server keeps validating with the original schema
(:mod:`shared.schema.validation`), so the published copy only has to describe the shape.
"""

from __future__ import annotations

import copy
from typing import Any

from shared.bodies import JSON
from shared.schema.dialect import is_int_or_string_any_of, resolve_pointer

__all__ = ["structural"]


_COPIED = (
    "title",
    "description",
    "default",
    "example",
    "externalDocs",
    "format",
    "maximum",
    "minimum",
    "multipleOf",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "enum",
)
_PRESERVE = "x-kubernetes-preserve-unknown-fields"
_INT_OR_STRING = "x-kubernetes-int-or-string"
_FREE: JSON = {_PRESERVE: True}


def structural(schema: JSON) -> JSON:
    """An OpenAPI v3 structural rewrite of ``schema`` for publishing.

    Every node gets a ``type`` (inferred where the schema omits it) unless it is int-or-string
    or free-form; free-form objects and untyped values are marked
    ``x-kubernetes-preserve-unknown-fields``; local ``$ref`` are inlined; Draft 2020-12-only
    keywords are rewritten (``const`` -> ``enum``, type lists -> ``nullable``, numeric
    ``exclusiveMinimum`` -> boolean form) or dropped.  Validation logic that structural schemas
    cannot express (most ``anyOf``/``oneOf``/``not``) is dropped: the server still validates
    with the original schema, the published one only has to describe the shape.
    """
    out = _structural(schema, schema, ())
    return out if out is not None else dict(_FREE)


def _structural(node: Any, root: JSON, stack: tuple[str, ...]) -> JSON | None:
    if node is True:
        return dict(_FREE)
    if not isinstance(node, dict):
        return None
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = resolve_pointer(root, ref)
        if ref in stack or not isinstance(target, dict):
            out: JSON = dict(_FREE)
            if isinstance(node.get("description"), str):
                out["description"] = node["description"]
            return out
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, root, (*stack, ref))

    out = {}
    for key in _COPIED:
        if key in node:
            out[key] = copy.deepcopy(node[key])
    if "const" in node and "enum" not in out:
        out["enum"] = [copy.deepcopy(node["const"])]
    if "example" not in out and isinstance(node.get("examples"), list) and node["examples"]:
        out["example"] = copy.deepcopy(node["examples"][0])
    if node.get("nullable") is True:
        out["nullable"] = True
    for key, val in node.items():
        if key.startswith("x-") and key not in (_PRESERVE, _INT_OR_STRING):
            out[key] = copy.deepcopy(val)
    _bounds(node, out)
    if isinstance(node.get("required"), list):
        out["required"] = [r for r in node["required"] if isinstance(r, str)]

    # Sub-schemas.
    props = node.get("properties")
    if isinstance(props, dict):
        out["properties"] = {}
        for name, sub in props.items():
            converted = _structural(sub, root, stack)
            if converted is not None:
                out["properties"][name] = converted
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) or extra is True:
        converted = _structural(extra, root, stack)
        if converted is not None:
            out["additionalProperties"] = converted
    items = node.get("items")
    if isinstance(items, dict) or items is True:
        converted = _structural(items, root, stack)
        if converted is not None:
            out["items"] = converted

    _junctors(node, out, root, stack)
    _type_of(node, out)
    _shape(out, node)
    return out


def _bounds(node: JSON, out: JSON) -> None:
    """Numeric (2020-12) exclusive bounds become OpenAPI's boolean flag next to the limit."""
    for bound, limit, stricter in (
        ("exclusiveMinimum", "minimum", max),
        ("exclusiveMaximum", "maximum", min),
    ):
        val = node.get(bound)
        if isinstance(val, bool):
            if val and limit in out:
                out[bound] = True
        elif isinstance(val, int | float):
            if limit in out and stricter(out[limit], val) != val:
                continue
            out[limit] = val
            out[bound] = True


def _junctors(node: JSON, out: JSON, root: JSON, stack: tuple[str, ...]) -> None:
    """Keep what kube-openapi accepts from allOf/anyOf/oneOf; fold the rest into the node."""
    if node.get(_INT_OR_STRING) is True or is_int_or_string_any_of(node.get("anyOf")):
        out[_INT_OR_STRING] = True
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return
    branches: list[tuple[str, JSON]] = []
    for key in ("allOf", "anyOf", "oneOf"):
        subs = node.get(key)
        if not isinstance(subs, list):
            continue
        non_null = [s for s in subs if not (isinstance(s, dict) and s.get("type") == "null")]
        if len(non_null) < len(subs):
            out["nullable"] = True
        for sub in non_null:
            converted = _structural(sub, root, stack)
            if converted is not None:
                branches.append((key, converted))
    if not branches:
        return
    types = {b.get("type") for _, b in branches}
    if len(types) > 1 and "type" not in out:
        # Branches of different shapes: publish the value as free-form.
        out[_PRESERVE] = True
        return
    for key, branch in branches:
        for name, val in branch.items():
            if name == "properties":
                merged = out.setdefault("properties", {})
                for prop, sub in val.items():
                    merged.setdefault(prop, sub)
            elif name == "required":
                # Only allOf makes a branch's required fields required for the whole value.
                if key == "allOf":
                    required = out.setdefault("required", [])
                    required.extend(r for r in val if r not in required)
            else:
                out.setdefault(name, val)


def _type_of(node: JSON, out: JSON) -> None:
    raw = node.get("type")
    if isinstance(raw, list):
        types = [t for t in raw if isinstance(t, str)]
        if "null" in types:
            out["nullable"] = True
        non_null = {t for t in types if t != "null"}
        if non_null == {"integer", "string"}:
            out[_INT_OR_STRING] = True
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            out.pop("type", None)
            return
        if non_null == {"integer", "number"}:
            non_null = {"number"}
        if len(non_null) == 1:
            out["type"] = non_null.pop()
        else:
            out.pop("type", None)
            out[_PRESERVE] = True
        return
    if isinstance(raw, str) and raw != "null":
        out["type"] = raw
        return
    if raw == "null":
        out["nullable"] = True
    if out.get(_INT_OR_STRING) or "type" in out:
        return
    inferred = _infer_type(out)
    if inferred:
        out["type"] = inferred
    else:
        out[_PRESERVE] = True


def _infer_type(out: JSON) -> str | None:
    if any(
        k in out for k in ("properties", "additionalProperties", "required", "maxProperties", "minProperties")
    ):
        return "object"
    if any(k in out for k in ("items", "maxItems", "minItems", "uniqueItems")):
        return "array"
    if any(k in out for k in ("pattern", "maxLength", "minLength")):
        return "string"
    if any(k in out for k in ("maximum", "minimum", "multipleOf")):
        return "number"
    samples = list(out.get("enum") or [])
    if "default" in out:
        samples.append(out["default"])
    samples = [s for s in samples if s is not None]
    if samples:
        if all(isinstance(s, bool) for s in samples):
            return "boolean"
        if all(isinstance(s, int) and not isinstance(s, bool) for s in samples):
            return "integer"
        if all(isinstance(s, int | float) and not isinstance(s, bool) for s in samples):
            return "number"
        if all(isinstance(s, str) for s in samples):
            return "string"
        if all(isinstance(s, dict) for s in samples):
            return "object"
        if all(isinstance(s, list) for s in samples):
            return "array"
    return None


def _shape(out: JSON, node: JSON) -> None:
    """Enforce the structural rules that depend on the final type."""
    kind = out.get("type")
    if kind == "object":
        has_props = "properties" in out
        extra = out.get("additionalProperties")
        if has_props and extra is not None:
            # Structural schemas cannot have both; keep the declared fields and let the
            # rest through unpublished.
            del out["additionalProperties"]
            out[_PRESERVE] = True
        elif not has_props and (extra is None or extra == _FREE):
            out.pop("additionalProperties", None)
            out[_PRESERVE] = True
    elif kind == "array" and "items" not in out:
        out["items"] = dict(_FREE)
    if node.get(_PRESERVE) is True:
        out[_PRESERVE] = True
    if kind != "object":
        for key in ("properties", "additionalProperties", "required", "maxProperties", "minProperties"):
            out.pop(key, None)
    if kind != "array":
        out.pop("items", None)
