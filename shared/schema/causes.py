"""Schema violations as ``Status`` causes, worded and typed as kube-apiserver words them for CRDs.

One cause per problem, with a Kubernetes-style field path (``spec.items[0].name``) and the
``FieldValue*`` reason a client expects: a missing required property is ``FieldValueRequired`` on
the property itself, an unknown property ``FieldValueNotSupported`` naming it, and so on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema.exceptions import ValidationError

from shared.api import goformat
from shared.api.errors import Cause, field_cause
from shared.schema.dialect import additional_properties


def from_error(error: ValidationError, path: str) -> list[Cause]:
    """The causes of one jsonschema error, ``path`` being the field path of the validated value."""
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
        return [
            field_cause(_field(field, [key]), f'unknown field "{key}"', "FieldValueNotSupported")
            for key in additional_properties(instance, parent)
        ]
    if keyword == "type":
        wanted = " or ".join(expected) if isinstance(expected, list) else str(expected)
        got = json_type(instance)  # kube-apiserver names the value's type, not the value
        return [
            field_cause(
                field, f'Invalid value: "{got}": {field} in body must be of type {wanted}: "{got}"',
                "FieldValueTypeInvalid"
            )
        ]
    if keyword in ("enum", "const"):
        allowed = expected if keyword == "enum" and isinstance(expected, list) else [expected]
        # Each allowed value as text (JSON unless a string), then quoted: apiextensions' NotSupported.
        supported = ", ".join(goformat.quote(v if isinstance(v, str) else goformat.marshal(v)) for v in allowed)
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
    described = _describe(str(keyword), expected, error)
    if keyword in _IN_BODY:
        described = f"{field} in body {described}"
    return [field_cause(field, f"Invalid value: {_show(instance)}: {described}", reason)]


#: Keywords whose failures kube-apiserver reports with kube-openapi's own message, which names the
#: field first (``spec.replicas in body should be ...``); the others it rewords (too long, too many).
_IN_BODY = frozenset({"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf", "minLength",
                      "pattern", "minItems", "uniqueItems", "minProperties", "maxProperties"})


def not_an_object(field: str, value: Any) -> Cause:
    """The cause kube-apiserver gives for a custom resource whose ``field`` (``spec``) holds a non-object."""
    kind = json_type(value)
    return field_cause(field, f'Invalid value: "{kind}": {field} in body must be of type object: "{kind}"',
                       "FieldValueTypeInvalid")


def json_type(value: Any) -> str:
    """The OpenAPI type name of a JSON value, as kube-apiserver's messages spell it."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


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
    text = goformat.bad_value(value)
    return text if len(text) <= 80 else text[:77] + "..."
