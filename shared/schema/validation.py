"""Checking schemas that arrive at run time, and values against them.

Definitions carry the schema of a kind's ``.spec`` as a string written by a platform engineer, in
Kubernetes' OpenAPI dialect (:mod:`shared.schema.dialect`). None of this knows what a definition is:

* :func:`parse_schema` / :func:`schema_error` decide whether the text is usable at all, so a bad
  schema disables one kind instead of failing requests later;
* :func:`validate` checks a value, one ``Status`` cause per problem (:mod:`shared.schema.causes`).

Defaults are filled in by :mod:`shared.schema.defaults`; the structural rewrite for publishing lives in
:mod:`shared.schema.structural`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import SchemaError, UnknownType
from referencing.exceptions import Unresolvable

from shared import patterns
from shared.api.errors import Cause, field_cause
from shared.bodies import JSON
from shared.kept import KeptPerObject
from shared.schema import causes
from shared.schema.compiled import Acceptor, acceptor
from shared.schema.dialect import Validator, refs, resolve_pointer, to_jsonschema

__all__ = ["parse_schema", "schema_error", "validate"]


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


def _go_regex(instance: Any) -> bool:
    if isinstance(instance, str):
        patterns.compiled(instance)  # raises ValueError saying why Go's regexp refuses it
    return True


#: The meta-schema's formats, with ``regex`` (every ``pattern`` and ``patternProperties`` key) read as Go's.
_SCHEMA_FORMATS = FormatChecker()
_SCHEMA_FORMATS.checks("regex", raises=ValueError)(_go_regex)


def schema_error(schema: Any) -> str | None:
    """Why ``schema`` cannot be used to validate values, or None when it can.

    Checks the Draft 2020-12 meta-schema (after mapping the OpenAPI 3.0 forms), that every
    ``pattern`` compiles as a Go regular expression (as kube-apiserver requires of a CRD's), and
    that every ``$ref`` points inside the document: a remote reference would make validation
    depend on the network.
    """
    if not isinstance(schema, dict):
        return f"a schema must be a JSON object, got {_json_type(schema)}"
    normalized = to_jsonschema(schema)
    try:
        Draft202012Validator.check_schema(normalized, format_checker=_SCHEMA_FORMATS)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        why = str(exc.cause) if exc.validator == "format" and exc.cause is not None else exc.message
        return f"not a valid JSON schema{' at ' + where if where else ''}: {why}"
    for ref in refs(schema):
        if not ref.startswith("#"):
            return f"$ref {ref!r} is not supported: only references inside the schema are allowed"
        if resolve_pointer(schema, ref) is None:
            return f"$ref {ref!r} does not resolve inside the schema"
    return None


@dataclass(frozen=True)
class _Checks:
    """What checks values against one schema: the full validator, and the compiled check when there is one."""

    full: Any
    accepts: Acceptor | None


#: Checks per schema object: a schema dict lives as long as the definition it came from.
_CHECKS: KeptPerObject[None, _Checks] = KeptPerObject(256)


def _checks_for(schema: JSON) -> _Checks:
    checks = _CHECKS.get(schema, None)
    if checks is None:
        normalized = to_jsonschema(schema)
        checks = _Checks(Validator(normalized), acceptor(normalized))
        _CHECKS.put(schema, None, checks)
    return checks


def validate(schema: JSON, value: Any, path: str = "spec") -> list[Cause]:
    """Validate ``value`` against ``schema``; one cause per problem, sorted by field.

    ``path`` is the field path of ``value`` in the object (``spec``).  Unknown ``format``
    values are not checked, as in kube-apiserver.  A value the compiled check accepts
    (:mod:`shared.schema.compiled`) has no problem to report; any other goes to the full validator.
    """
    checks = _checks_for(schema)
    if checks.accepts is not None and checks.accepts(value):
        return []
    try:
        errors = list(checks.full.iter_errors(value))
    except (Unresolvable, UnknownType) as exc:
        return [field_cause(path, f"the schema could not be evaluated: {exc}")]
    found = [cause for error in errors for cause in causes.from_error(error, path)]
    unique = {(c["field"], c["message"], c["reason"]): c for c in found}
    return [unique[k] for k in sorted(unique)]


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


