"""JSON-schema helpers for served kinds whose schema arrives at run time.

Definitions carry the schema of a kind's ``.spec`` as a string written by a platform engineer.
It is "OpenAPI-ish" JSON schema: mostly Draft 2020-12 keywords plus OpenAPI 3.0 and Kubernetes
forms (``nullable``, boolean ``exclusiveMinimum``, ``x-kubernetes-int-or-string`` ...).  This
module gives a server three things it needs from such a schema, none of which know what a
definition is:

* :func:`parse_schema` / :func:`schema_error` decide whether the text is usable at all, so a bad
  schema disables one kind instead of failing requests later;
* :func:`apply_defaults` fills in defaults the way kube-apiserver does for CRDs, so what a client
  reads back matches what a CRD-backed kind would return;
* :func:`validate` turns schema violations into ``Status`` causes with Kubernetes-style field
  paths (``spec.items[0].name``), one per problem;

The structural rewrite for publishing lives beside it in :mod:`shared.schema.structural`.
"""

from __future__ import annotations

import copy
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, UnknownType, ValidationError
from referencing.exceptions import Unresolvable

from shared.api.errors import Cause, field_cause
from shared.bodies import JSON

__all__ = ["apply_defaults", "is_int_or_string_any_of", "parse_schema", "resolve_pointer", "schema_error", "validate"]


# --------------------------------------------------------------------------- parsing


def parse_schema(text: str) -> JSON:
    """Parse a schema stored as a string; it must be a JSON object.

    Raises ``ValueError`` with a message fit for a condition or an Event.
    """
    try:
        value = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"openAPISchema is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"openAPISchema must be a JSON object, got {_json_type(value)}")
    return value


def schema_error(schema: Any) -> str | None:
    """Why ``schema`` cannot be used to validate values, or None when it can.

    Checks the Draft 2020-12 meta-schema (after mapping the OpenAPI 3.0 forms), that every
    ``pattern`` compiles, and that every ``$ref`` points inside the document: a remote reference
    would make validation depend on the network.
    """
    if not isinstance(schema, dict):
        return f"a schema must be a JSON object, got {_json_type(schema)}"
    normalized = _to_jsonschema(schema)
    try:
        Draft202012Validator.check_schema(normalized)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return f"not a valid JSON schema{' at ' + where if where else ''}: {exc.message}"
    for ref in _refs(schema):
        if not ref.startswith("#"):
            return f"$ref {ref!r} is not supported: only references inside the schema are allowed"
        if resolve_pointer(schema, ref) is None:
            return f"$ref {ref!r} does not resolve inside the schema"
    return None


# --------------------------------------------------------------------------- defaults


def apply_defaults(schema: JSON, value: Any) -> Any:
    """Return a copy of ``value`` with schema defaults filled in; ``value`` is not modified.

    A property that is missing, or null without ``nullable``, gets a deep copy of its default.
    Defaulted values are then defaulted themselves, so ``default: {}`` on an object whose
    properties have defaults yields the fully populated object, as kube-apiserver does.
    Recurses through ``properties``, ``additionalProperties`` and ``items``.
    """
    return _default(schema, copy.deepcopy(value))


def _default(schema: Any, value: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            for key, sub in props.items():
                if not isinstance(sub, dict) or "default" not in sub:
                    continue
                if key not in value or (value[key] is None and sub.get("nullable") is not True):
                    value[key] = copy.deepcopy(sub["default"])
            for key, sub in props.items():
                if key in value:
                    value[key] = _default(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            declared = props if isinstance(props, dict) else {}
            for key in list(value):
                if key not in declared:
                    value[key] = _default(extra, value[key])
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            value = [_default(items, item) for item in value]
    return value


# --------------------------------------------------------------------------- validation

_BASE_TYPE = Draft202012Validator.VALIDATORS["type"]
_BASE_ENUM = Draft202012Validator.VALIDATORS["enum"]
_BASE_ANY_OF = Draft202012Validator.VALIDATORS["anyOf"]


def _nullable_null(instance: Any, schema: Mapping[str, Any]) -> bool:
    return instance is None and schema.get("nullable") is True


def _type(validator: Any, types: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if _nullable_null(instance, schema):
        return
    yield from _BASE_TYPE(validator, types, instance, schema)


def _enum(validator: Any, enums: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if _nullable_null(instance, schema):
        return
    yield from _BASE_ENUM(validator, enums, instance, schema)


def is_int_or_string_any_of(branches: Any) -> bool:
    return (
        isinstance(branches, list)
        and bool(branches)
        and all(
            isinstance(b, dict) and set(b) == {"type"} and b["type"] in ("integer", "string")
            for b in branches
        )
    )


def _any_of(
    validator: Any, branches: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    # The Kubernetes int-or-string idiom pairs ``x-kubernetes-int-or-string`` with an anyOf of
    # the two types; report it once, through the extension, with a readable message.
    if schema.get("x-kubernetes-int-or-string") is True and is_int_or_string_any_of(branches):
        return
    if _nullable_null(instance, schema):
        return
    yield from _BASE_ANY_OF(validator, branches, instance, schema)


def _int_or_string(
    validator: Any, flag: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if flag is not True or _nullable_null(instance, schema):
        return
    if not (validator.is_type(instance, "integer") or validator.is_type(instance, "string")):
        yield ValidationError("must be an integer or a string")


_Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    {"type": _type, "enum": _enum, "anyOf": _any_of, "x-kubernetes-int-or-string": _int_or_string},
)

# Validators are cached per schema object: a schema dict lives as long as the definition it
# came from, and keeping a reference in the cache keeps its id() from being reused.
_CACHE: OrderedDict[int, tuple[JSON, Any]] = OrderedDict()
_CACHE_SIZE = 256


def _validator_for(schema: JSON) -> Any:
    key = id(schema)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is schema:
        _CACHE.move_to_end(key)
        return hit[1]
    validator = _Validator(_to_jsonschema(schema))
    _CACHE[key] = (schema, validator)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return validator


def validate(schema: JSON, value: Any, path: str = "spec") -> list[Cause]:
    """Validate ``value`` against ``schema``; one cause per problem, sorted by field.

    ``path`` is the field path of ``value`` in the object (``spec``).  Unknown ``format``
    values are not checked, as in kube-apiserver.
    """
    validator = _validator_for(schema)
    causes: list[Cause] = []
    try:
        errors = list(validator.iter_errors(value))
    except (Unresolvable, UnknownType) as exc:
        return [field_cause(path, f"the schema could not be evaluated: {exc}")]
    for error in errors:
        causes.extend(_causes(error, path))
    unique = {(c["field"], c["message"], c["reason"]): c for c in causes}
    return [unique[k] for k in sorted(unique)]


def _causes(error: ValidationError, path: str) -> list[Cause]:
    field = _field(path, error.absolute_path)
    keyword = error.validator
    expected = error.validator_value
    instance = error.instance
    if keyword == "required":
        if not isinstance(instance, dict) or not isinstance(expected, list):
            return [field_cause(field, error.message)]
        return [
            field_cause(_field(field, [name]), "Required value", "FieldValueRequired")
            for name in expected
            if isinstance(name, str) and name not in instance
        ]
    if keyword == "additionalProperties" and expected is False and isinstance(instance, dict):
        parent = error.schema if isinstance(error.schema, Mapping) else {}
        declared = parent.get("properties") or {}
        patterns = [re.compile(p) for p in (parent.get("patternProperties") or {})]
        return [
            field_cause(_field(field, [key]), f'unknown field "{key}"', "FieldValueNotSupported")
            for key in instance
            if key not in declared and not any(p.search(key) for p in patterns)
        ]
    if keyword == "type":
        wanted = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return [
            field_cause(
                field, f"Invalid value: {_show(instance)}: must be of type {wanted}", "FieldValueTypeInvalid"
            )
        ]
    if keyword in ("enum", "const"):
        allowed = expected if keyword == "enum" and isinstance(expected, list) else [expected]
        supported = ", ".join(_show(v) for v in allowed)
        return [
            field_cause(
                field,
                f"Unsupported value: {_show(instance)}: supported values: {supported}",
                "FieldValueNotSupported",
            )
        ]
    reason = {"maxLength": "FieldValueTooLong", "maxItems": "FieldValueTooMany"}.get(
        str(keyword), "FieldValueInvalid"
    )
    return [
        field_cause(
            field, f"Invalid value: {_show(instance)}: {_describe(str(keyword), expected, error)}", reason
        )
    ]


def _describe(keyword: str, expected: Any, error: ValidationError) -> str:
    phrases = {
        "minimum": f"should be greater than or equal to {expected}",
        "exclusiveMinimum": f"should be greater than {expected}",
        "maximum": f"should be less than or equal to {expected}",
        "exclusiveMaximum": f"should be less than {expected}",
        "multipleOf": f"should be a multiple of {expected}",
        "minLength": f"should be at least {expected} chars long",
        "maxLength": f"may not be more than {expected} chars long",
        "pattern": f"should match '{expected}'",
        "minItems": f"should have at least {expected} items",
        "maxItems": f"must have at most {expected} items",
        "uniqueItems": "shouldn't contain duplicates",
        "minProperties": f"should have at least {expected} properties",
        "maxProperties": f"should have at most {expected} properties",
        "anyOf": "must match at least one schema (anyOf)",
        "oneOf": "must match exactly one schema (oneOf)",
        "not": "must not match the schema (not)",
        "x-kubernetes-int-or-string": "must be an integer or a string",
    }
    return phrases.get(keyword, error.message)


def _field(base: str, parts: Iterable[Any]) -> str:
    out = base
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def _show(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# --------------------------------------------------------------------------- OpenAPI -> JSON schema


def _to_jsonschema(node: Any) -> Any:
    """Map the OpenAPI 3.0 spellings onto Draft 2020-12 so the meta-schema accepts them.

    Only boolean ``exclusiveMinimum``/``exclusiveMaximum`` need rewriting; ``nullable`` and the
    ``x-kubernetes-*`` extensions are handled by the validator's own keywords.
    """
    if isinstance(node, list):
        return [_to_jsonschema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: JSON = {}
    for key, val in node.items():
        if key in ("default", "enum", "const", "example", "examples"):
            out[key] = val
        elif key == "properties" and isinstance(val, dict):
            out[key] = {k: _to_jsonschema(v) for k, v in val.items()}
        else:
            out[key] = _to_jsonschema(val)
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(bound)
        if isinstance(flag, bool):
            del out[bound]
            if flag and limit in out:
                out[bound] = out.pop(limit)
    return out


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, val in node.items():
            if key in ("default", "enum", "const", "example", "examples"):
                continue
            if key == "$ref" and isinstance(val, str):
                yield val
            else:
                yield from _refs(val)
    elif isinstance(node, list):
        for val in node:
            yield from _refs(val)


def resolve_pointer(root: Any, ref: str) -> Any:
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
