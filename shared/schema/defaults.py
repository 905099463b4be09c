"""Schema defaults filled in the way kube-apiserver defaults a CRD-backed object.

What a client reads back then matches what a CRD-backed kind would return: a missing property (or
a null one without ``nullable``) gets its default, and a defaulted value is defaulted in turn.
"""

from __future__ import annotations

from typing import Any

from shared.bodies import JSON, clone


def apply_defaults(schema: JSON, value: Any) -> Any:
    """Return a copy of ``value`` with schema defaults filled in; ``value`` is not modified.

    A property that is missing, or null without ``nullable``, gets a deep copy of its default.
    Defaulted values are then defaulted themselves, so ``default: {}`` on an object whose
    properties have defaults yields the fully populated object, as kube-apiserver does.
    Recurses through ``properties``, ``additionalProperties`` and ``items``.
    """
    return _default(schema, clone(value))


def with_spec_defaults(schema: JSON | None, obj: JSON) -> JSON:
    """``obj`` with its ``spec`` defaulted by ``schema`` (the spec's schema), as a CRD-backed object
    is when it is decoded -- what admission webhooks see first. A spec that is not an object is left
    for validation to refuse."""
    spec = obj.get("spec")
    if not schema or not isinstance(spec, dict):
        return obj
    return {**obj, "spec": apply_defaults(schema, spec)}


def without_added_defaults(original: Any, defaulted: Any, changed: Any) -> Any:
    """``changed`` (``defaulted`` as something else edited it) without the defaults that only
    defaulting added and the edit left as they were: what the client sent plus the edit.

    So an edit (a mutating webhook's patch) does not turn schema defaults into stored values."""
    if not (isinstance(original, dict) and isinstance(defaulted, dict) and isinstance(changed, dict)):
        return changed
    kept: JSON = {}
    for key, value in changed.items():
        if key not in original:
            if key in defaulted and value == defaulted[key]:
                continue
            kept[key] = value
        else:
            kept[key] = without_added_defaults(original[key], defaulted.get(key), value)
    return kept


def without_nulls(schema: JSON, value: Any) -> Any:
    """A copy of ``value`` without the nulls kube-apiserver prunes before defaulting: a declared
    property (or map value) that is null and not ``nullable`` is as good as absent.  Recurses like
    :func:`apply_defaults`; nulls the schema allows, and those in free-form values, are kept."""
    return _without_nulls(schema, clone(value))


def _without_nulls(schema: Any, value: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        _drop_nulls(schema, value)
        for key in value:
            sub = _declared(schema, key)
            if sub is not None:
                value[key] = _without_nulls(sub, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [_without_nulls(schema["items"], item) for item in value]
    return value


def _declared(schema: JSON, key: str) -> JSON | None:
    props = schema.get("properties")
    if isinstance(props, dict) and isinstance(props.get(key), dict):
        found: JSON = props[key]
        return found
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _drop_nulls(schema: JSON, value: JSON) -> None:
    """Drop, in place, the keys of ``value`` whose null the schema does not allow."""
    for key in [k for k, v in value.items() if v is None]:
        sub = _declared(schema, key)
        if sub is not None and not _nullable(sub) and not _free_form(sub):
            del value[key]


def _nullable(schema: JSON) -> bool:
    """OpenAPI's ``nullable``, or the JSON Schema spellings a definition may use (a type list, a null branch)."""
    kind = schema.get("type")
    branches = [b for key in ("anyOf", "oneOf") for b in schema.get(key) or [] if isinstance(b, dict)]
    return (schema.get("nullable") is True or (isinstance(kind, list) and "null" in kind) or kind == "null"
            or any(b.get("type") == "null" for b in branches))


def _free_form(schema: JSON) -> bool:
    return schema.get("x-kubernetes-preserve-unknown-fields") is True and "type" not in schema


def _default(schema: Any, value: Any) -> Any:
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        _drop_nulls(schema, value)
        props = schema.get("properties")
        if isinstance(props, dict):
            for key, sub in props.items():
                if not isinstance(sub, dict) or "default" not in sub:
                    continue
                if key not in value or (value[key] is None and sub.get("nullable") is not True):
                    value[key] = clone(sub["default"])
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
