"""How an Application spec becomes OpenTofu input variables (Terraform ``vars``), and back.

Kubernetes users write camelCase; OpenTofu modules declare snake_case variables.  A definition
picks ``variableNaming``: ``snake_case`` converts each top-level key and the keys of
schema-declared nested objects (``cidrBlock`` -> ``cidr_block``), ``verbatim`` passes keys as
written.  Keys of free-form maps (``additionalProperties``) are data, not names, and are never
converted.  Because the mapping is driven by the schema, it can be inverted exactly when an
object is read back, provided that no two sibling keys map to one name; the definition's
acceptance checks that (see :func:`naming_problems`) before a kind is served.
"""

from __future__ import annotations

import functools
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
#: strict subset, so every accepted name is one OpenTofu accepts.  Nested object attributes follow
#: the same rule without the reserved names.
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

SNAKE_CASE = "snake_case"
VERBATIM = "verbatim"
NAMINGS = (SNAKE_CASE, VERBATIM)
#: Schema extension marking a top-level property whose variable is ``sensitive`` in the module:
#: ``tofu_agl.generate`` writes it into a definition, the plan preview redacts the values it marks.
SENSITIVE = "x-cozystack-sensitive"

_ACRONYM_BOUNDARY = re.compile(r"([A-Z]+)([A-Z][a-z])")
_WORD_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])")


@functools.lru_cache(maxsize=4096)
def to_snake_case(key: str) -> str:
    """``cidrBlock`` -> ``cidr_block``, ``HTTPPort`` -> ``http_port``, ``dbName2`` -> ``db_name2``.

    Hyphens become underscores (``node-count`` -> ``node_count``); snake_case input is
    returned unchanged.  Memoised: the keys are a definition's property names, and every list of
    Applications converts each of them once per object (two regex substitutions, a third of a
    projection's time).
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
        elif not VARIABLE_NAME.fullmatch(name):
            problems.append(f"property {path!r}: attribute name {name!r} must match {VARIABLE_NAME.pattern}")
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



def marshal_vars(schema: dict[str, Any], naming: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Terraform ``vars`` for an (already defaulted) Application spec, sorted by name.

    Nested values are passed whole, never flattened: tofu-controller writes ``vars`` to a tfvars
    JSON file, so lists and objects keep their HCL types.  Raises ValueError, starting with the
    spec path and ``": "``, when two keys would map onto one name (validation reports it as 422).
    """
    snake = naming == SNAKE_CASE
    props = _properties(schema)
    by_name: dict[str, Any] = {}
    for key, value in spec.items():
        name = variable_name(key, naming)
        if name in by_name:
            raise ValueError(f'spec.{key}: becomes variable "{name}", which another key also uses')
        by_name[name] = _to_vars_value(value, _schema_of(props, key), snake, f"spec.{key}")
    return [{"name": name, "value": by_name[name]} for name in sorted(by_name)]


def unmarshal_vars(schema: dict[str, Any], naming: str, tf_vars: list[Any] | None) -> dict[str, Any]:
    """The Application spec encoded in Terraform ``vars`` (inverse of :func:`marshal_vars`).

    Variables fed from elsewhere (``valueFrom``) are not part of the spec and are skipped; a name
    the schema does not know is shown verbatim, so nothing written directly to the Terraform hides.
    """
    snake = naming == SNAKE_CASE
    props = _properties(schema)
    declared = {variable_name(p, naming): p for p in props}
    spec: dict[str, Any] = {}
    for item in tf_vars or []:
        var_name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(var_name, str) or ("valueFrom" in item and "value" not in item):
            continue
        key: str = declared.get(var_name, var_name)
        spec[key] = _from_vars_value(item.get("value"), _schema_of(props, key), snake)
    return spec


def _properties(schema: Any) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


def _schema_of(props: dict[str, Any], key: str) -> dict[str, Any]:
    sub = props.get(key)
    return sub if isinstance(sub, dict) else {}


def _items(schema: dict[str, Any]) -> dict[str, Any]:
    items = schema.get("items")
    return items if isinstance(items, dict) else {}


def _to_vars_value(value: Any, schema: dict[str, Any], snake: bool, path: str) -> Any:
    """Copy ``value``, renaming schema-declared object keys to snake_case when ``snake``.

    Walks ``properties`` and array ``items`` only, the paths :func:`naming_problems` checks for
    clashes when the definition is accepted.  Keys of free-form maps and undeclared keys are
    kept; a clash among the resulting keys raises ValueError.
    """
    if isinstance(value, list):
        return [_to_vars_value(v, _items(schema), snake, f"{path}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return clone(value)
    props = _properties(schema)
    out: dict[str, Any] = {}
    for key, sub in value.items():
        if key in props:
            target = to_snake_case(key) if snake else key
            child = _to_vars_value(sub, _schema_of(props, key), snake, f"{path}.{key}")
        else:
            target, child = key, clone(sub)
        if target in out:
            raise ValueError(f'{path}.{key}: becomes "{target}" in the module input, which another key also uses')
        out[target] = child
    return out


def _from_vars_value(value: Any, schema: dict[str, Any], snake: bool) -> Any:
    """Inverse of :func:`_to_vars_value` through the same schema."""
    if isinstance(value, list):
        return [_from_vars_value(v, _items(schema), snake) for v in value]
    if not isinstance(value, dict):
        return clone(value)
    props = _properties(schema)
    declared: dict[str, str] = {}
    if snake:
        for prop in props:
            declared.setdefault(to_snake_case(prop), prop)
    out: dict[str, Any] = {}
    for key, sub in value.items():
        original = declared.get(key, key)
        if original in props:
            out[original] = _from_vars_value(sub, _schema_of(props, original), snake)
        else:
            out[key] = clone(sub)
    return out
