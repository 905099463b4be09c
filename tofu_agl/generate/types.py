"""OpenTofu type constraints as JSON Schema, keeping their structure.

=====================================  ==================================================
OpenTofu                               JSON Schema
=====================================  ==================================================
``string`` / ``number`` / ``bool``     ``type: string`` / ``number`` / ``boolean``
``any`` (or no ``type``)               no ``type``: any value
``list(T)``                            ``type: array, items: T``
``set(T)``                             ``type: array, items: T, uniqueItems: true``
``tuple([A, B])``                      ``type: array, prefixItems: [A, B]``, exactly 2 items
``map(T)``                             ``type: object, additionalProperties: T``
``object({a = T, b = optional(U)})``   ``type: object, properties``, ``required: [a]``
``optional(T, d)``                     ``T`` with ``default: d``
=====================================  ==================================================

Object attribute names follow the definition's naming (:class:`Naming`), and so do the keys of
defaults, so that tofu_agl's conversion hands the module exactly the names it declared.
"""

from __future__ import annotations

from typing import Any

from tofu_agl.generate.hcl import Call, Expr, Name, Obj, Tup, literal, text_of
from tofu_agl.variables import SNAKE_CASE, VERBATIM, to_snake_case, unmarshal_vars

JSON = dict[str, Any]

_PRIMITIVES: dict[str, JSON] = {
    "string": {"type": "string"},
    "number": {"type": "number"},
    "bool": {"type": "boolean"},
    "any": {},
}


def camel_case(name: str) -> str:
    """``cidr_block`` -> ``cidrBlock``; leading underscores and single words are kept."""
    stripped = name.lstrip("_")
    head, *rest = stripped.split("_")
    return name[: len(name) - len(stripped)] + head + "".join(word[:1].upper() + word[1:] for word in rest)


class Naming:
    """Which property name shows an OpenTofu name under the definition's ``variableNaming``.

    Under ``snake_case`` tofu_agl converts a property name back with
    :func:`~tofu_agl.variables.to_snake_case`, so the property is the camelCase form when that
    converts back exactly, the name itself when *it* does (``subnet_1a``), and nothing otherwise
    (``myVar`` or ``node-count`` cannot be reached: report and suggest ``verbatim``).

    tofu_agl converts only the names it reaches through ``properties`` and ``items``, not those
    inside map values (``additionalProperties``) or tuple elements (``prefixItems``); below those
    the names stay verbatim (:meth:`verbatim`).
    """

    def __init__(self, mode: str, problems: list[str]) -> None:
        self.mode = mode
        self.problems = problems

    def verbatim(self) -> Naming:
        return Naming(VERBATIM, self.problems)

    def property(self, name: str, where: str) -> str | None:
        if self.mode != SNAKE_CASE:
            return name
        for candidate in (camel_case(name), name):
            if to_snake_case(candidate) == name:
                return candidate
        self.problems.append(
            f"{where}: no property name converts back to {name!r} under variableNaming snake_case; "
            "left out (use --variable-naming verbatim)"
        )
        return None


def type_schema(expr: Expr | None, naming: Naming, where: str) -> JSON:
    """The schema of values of OpenTofu type ``expr`` (``None``: no constraint, any value).

    ``where`` names the value in problem messages (``variable 'subnets'[].tags``).
    """
    if expr is None:
        return {}
    match expr:
        case Name(name) if name in _PRIMITIVES:
            return dict(_PRIMITIVES[name])
        case Call("list" | "set" as kind, (element,)):
            schema: JSON = {"type": "array", "items": type_schema(element, naming, f"{where}[]")}
            if kind == "set":
                schema["uniqueItems"] = True
            return schema
        case Call("map", (element,)):
            values = type_schema(element, naming.verbatim(), f"{where}{{}}")
            return {"type": "object", "additionalProperties": values}
        case Call("tuple", (Tup(elements),)):
            items = [type_schema(e, naming.verbatim(), f"{where}[{i}]") for i, e in enumerate(elements)]
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        case Call("object", (Obj(attributes),)):
            return _object(attributes, naming, where)
    naming.problems.append(f"{where}: type {text_of(expr)} is not understood; any value accepted")
    return {}


def _object(attributes: tuple[tuple[str, Expr], ...], naming: Naming, where: str) -> JSON:
    properties: JSON = {}
    required: list[str] = []
    for attribute, expr in attributes:
        path = f"{where}.{attribute}"
        key = naming.property(attribute, path)
        if key is None:
            continue
        match expr:
            case Call("optional", (inner,)):
                properties[key] = type_schema(inner, naming, path)
            case Call("optional", (inner, default_expr)):
                properties[key] = with_default(type_schema(inner, naming, path), default_expr, naming, path)
            case _:
                properties[key] = type_schema(expr, naming, path)
                required.append(key)
    schema: JSON = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def with_default(schema: JSON, default_expr: Expr, naming: Naming, where: str) -> JSON:
    """``schema`` with the constant ``default_expr`` as its default, keys renamed to properties."""
    try:
        value = literal(default_expr)
    except ValueError as error:
        naming.problems.append(f"{where}: default left out: {error}")
        return schema
    return set_default(schema, value, naming.mode)


def set_default(schema: JSON, value: Any, mode: str) -> JSON:
    """``schema`` with ``value`` (written in the module's names) as default; null is no default."""
    if value is not None:
        # tofu_agl's own reading of a variable back into a spec renames exactly as it will write
        holder = {"type": "object", "properties": {"value": schema}}
        schema["default"] = unmarshal_vars(holder, mode, [{"name": "value", "value": value}])["value"]
    return schema
