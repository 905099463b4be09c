"""How Application spec keys become OpenTofu input variables, and back.

Kubernetes users write camelCase; OpenTofu modules declare snake_case variables.  A definition
picks ``variableNaming``: ``snake_case`` converts each top-level key and the keys of
schema-declared nested objects (``cidrBlock`` -> ``cidr_block``), ``verbatim`` passes keys as
written.  Keys of free-form maps (``additionalProperties``) are data, not names, and are never
converted.  Because the mapping is driven by the schema, it can be inverted exactly when an
object is read back, provided that no two sibling keys map to one name; the definition's
acceptance checks that (see :func:`naming_problems`) before a kind is served.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from shared.bodies import clone

#: Names OpenTofu refuses for input variables because a ``module`` block gives them another
#: meaning: its attributes and block types (``internal/configs/module_call.go``, moduleBlockSchema,
#: checked in ``named_values.go`` decodeVariableBlock; OpenTofu v1.10).
RESERVED: frozenset[str] = frozenset(
    {
        "source", "version", "count", "for_each", "depends_on", "providers",
        "_", "lifecycle", "locals", "provider",
    }
)
#: OpenTofu's identifier rule (hclsyntax.ValidIdentifier): a letter or underscore, then letters,
#: digits, underscores and dashes.  OpenTofu also takes non-ASCII letters; we keep to ASCII, a
#: strict subset, so every accepted name is one OpenTofu accepts.
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
#: Nested object attributes only have to be HCL identifiers (verbatim keeps camelCase there).
ATTRIBUTE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

SNAKE_CASE = "snake_case"
VERBATIM = "verbatim"
NAMINGS = (SNAKE_CASE, VERBATIM)

_ACRONYM_BOUNDARY = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")


def to_snake_case(key: str) -> str:
    """``cidrBlock`` -> ``cidr_block``, ``HTTPPort`` -> ``http_port``, ``dbName2`` -> ``db_name2``.

    Hyphens become underscores (``node-count`` -> ``node_count``); snake_case input is
    returned unchanged.
    """
    out = _ACRONYM_BOUNDARY.sub(r"\1_\2", key)
    out = _WORD_BOUNDARY.sub(r"\1_\2", out)
    return out.replace("-", "_").lower()


def variable_name(key: str, naming: str) -> str:
    """The name ``key`` gets under ``naming`` (``snake_case`` or ``verbatim``)."""
    if naming == SNAKE_CASE:
        return to_snake_case(key)
    if naming == VERBATIM:
        return key
    raise ValueError(f"unknown variable naming {naming!r}: expected one of {', '.join(NAMINGS)}")


def variable_name_error(name: str) -> str | None:
    """Why ``name`` cannot be an OpenTofu input variable, or None."""
    if not VARIABLE_NAME.fullmatch(name):
        return f"variable name {name!r} must match {VARIABLE_NAME.pattern}"
    if name in RESERVED:
        return f"variable name {name!r} is reserved by OpenTofu"
    return None


def object_property_names(schema: dict[str, Any], naming: str) -> list[tuple[str, str]]:
    """``(json path, name under naming)`` for every schema-declared property.

    Covers the top-level properties and, recursively, the properties of nested objects reached
    through ``properties`` and array ``items``; not the values of ``additionalProperties`` maps.
    Paths are dotted with ``[]`` for array items: ``subnets[].availabilityZone``.
    """
    return [(path, name) for path, _key, name, _level in _walk(schema, naming, "", 0)]


def naming_problems(schema: dict[str, Any], naming: str) -> list[str]:
    """Every reason the schema's property names cannot be mapped under ``naming``.

    Top-level names must be valid, non-reserved variable names; nested names must be HCL
    identifiers; and no two keys of one object may map to the same name (the mapping would not
    be invertible).  An empty list means the schema is fine.
    """
    problems: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for path, key, name, level in _walk(schema, naming, "", 0):
        parent = path[: len(path) - len(key)]
        if level == 0:
            error = variable_name_error(name)
            if error:
                problems.append(f"property {path!r}: {error}")
        elif not ATTRIBUTE_NAME.match(name):
            problems.append(f"property {path!r}: attribute name {name!r} must match {ATTRIBUTE_NAME.pattern}")
        other = seen.setdefault((parent, name), key)
        if other != key:
            where = f" in {parent.rstrip('.')!r}" if parent else ""
            problems.append(f"properties {other!r} and {key!r}{where} both map to {name!r}")
    return problems


def _walk(schema: Any, naming: str, prefix: str, level: int) -> Iterator[tuple[str, str, str, int]]:
    if not isinstance(schema, dict):
        return
    props = schema.get("properties")
    if isinstance(props, dict):
        for key, sub in props.items():
            path = f"{prefix}{key}"
            yield path, key, variable_name(key, naming), level
            yield from _walk(sub, naming, f"{path}.", level + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        base = prefix[:-1] if prefix.endswith(".") else prefix
        yield from _walk(items, naming, f"{base}[].", level)


def rename_keys(schema: dict[str, Any], value: Any, naming: str, *, reverse: bool = False) -> Any:
    """Rename the schema-declared keys of ``value`` (a spec) to variable names, or back.

    Follows exactly the paths :func:`object_property_names` reports: declared properties are
    renamed, array items are walked, free-form map keys and undeclared keys are kept as they
    are.  With ``reverse=True`` maps variable names back to the schema's keys.  Returns a new
    value; ``value`` is not modified.
    """
    if naming == VERBATIM:
        return clone(value)
    return _rename(schema, value, naming, reverse)


def _rename(schema: Any, value: Any, naming: str, reverse: bool) -> Any:
    if not isinstance(schema, dict):
        return clone(value)
    if isinstance(value, dict):
        props = schema.get("properties")
        if not isinstance(props, dict):
            return clone(value)
        mapping = (
            {variable_name(k, naming): k for k in props}
            if reverse
            else {k: variable_name(k, naming) for k in props}
        )
        out: dict[str, Any] = {}
        for key, val in value.items():
            target = mapping.get(key)
            if target is None:
                out[key] = clone(val)
                continue
            declared = key if not reverse else target
            out[target] = _rename(props[declared], val, naming, reverse)
        return out
    if isinstance(value, list):
        items = schema.get("items")
        return [_rename(items, v, naming, reverse) for v in value]
    return value
