"""Kubernetes' OpenAPI dialect of JSON schema, on top of jsonschema's Draft 2020-12.

Definitions write schemas the way CRDs do: Draft 2020-12 keywords plus OpenAPI 3.0 forms
(``nullable``, boolean ``exclusiveMinimum``) and Kubernetes extensions (``x-kubernetes-int-or-string``), with
every regular expression read as Go's (:mod:`shared.patterns`), as kube-apiserver reads a CRD's ``pattern``.
:data:`Validator` understands those keywords, :func:`to_jsonschema` rewrites the forms the
meta-schema would reject, and :func:`refs` / :func:`resolve_pointer` walk local references.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

from shared import patterns
from shared.bodies import JSON

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
    """Whether an ``anyOf`` is the int-or-string idiom: a branch of type integer and one of type string."""
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


def _pattern(validator: Any, pattern: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not patterns.search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, by_pattern: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for pattern, subschema in by_pattern.items():
        for key, value in instance.items():
            if patterns.search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def additional_properties(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """The keys of ``instance`` neither ``properties`` nor ``patternProperties`` of ``schema`` name."""
    declared = schema.get("properties") or {}
    by_pattern = schema.get("patternProperties") or {}
    return [
        key for key in instance
        if key not in declared and not any(patterns.search(pattern, key) for pattern in by_pattern)
    ]


def _additional_properties(
    validator: Any, extra: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    extras = additional_properties(instance, schema)
    if isinstance(extra, dict):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif extra is False and extras:
        yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, sorted(extras)))})")


Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    {
        "type": _type, "enum": _enum, "anyOf": _any_of, "x-kubernetes-int-or-string": _int_or_string,
        "pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties,
    },
)


def to_jsonschema(node: Any) -> Any:
    """Map the OpenAPI 3.0 spellings onto Draft 2020-12 so the meta-schema accepts them.

    Only boolean ``exclusiveMinimum``/``exclusiveMaximum`` need rewriting; ``nullable`` and the
    ``x-kubernetes-*`` extensions are handled by the validator's own keywords.
    """
    if isinstance(node, list):
        return [to_jsonschema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: JSON = {}
    for key, val in node.items():
        if key in ("default", "enum", "const", "example", "examples"):
            out[key] = val
        elif key == "properties" and isinstance(val, dict):
            out[key] = {k: to_jsonschema(v) for k, v in val.items()}
        else:
            out[key] = to_jsonschema(val)
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(bound)
        if isinstance(flag, bool):
            del out[bound]
            if flag and limit in out:
                out[bound] = out.pop(limit)
    return out


def refs(node: Any) -> Iterator[str]:
    """Every ``$ref`` in a schema, skipping literal values (defaults, enums, examples)."""
    if isinstance(node, dict):
        for key, val in node.items():
            if key in ("default", "enum", "const", "example", "examples"):
                continue
            if key == "$ref" and isinstance(val, str):
                yield val
            else:
                yield from refs(val)
    elif isinstance(node, list):
        for val in node:
            yield from refs(val)


def resolve_pointer(root: Any, ref: str) -> Any:
    """What a local ``$ref`` (``#/a/b``) points at inside ``root``, or None."""
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
