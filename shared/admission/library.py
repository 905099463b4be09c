"""Kubernetes CEL functions the runtime does not ship, written here.

kube-apiserver adds libraries of its own to CEL (lists, regex, quantity, url, ip, format...).
The C++ runtime brings the strings, optional, bindings, math and encoders extensions, so only these
are hand-written:

* lists: ``isSorted``, ``sum``, ``min``, ``max`` (``indexOf``/``lastIndexOf`` on lists cannot be
  declared: the strings extension owns those names in this runtime);
* regex: ``find``, ``findAll`` (RE2, as kube-apiserver's, so matching stays linear in the input);
* quantity: ``isQuantity`` only (the ``quantity`` type itself needs an opaque value type that the
  binding cannot declare).

Every function runs in time linear in its input, so the comprehension budget of the runtime still
bounds a rule. A Python exception becomes a CEL error value, which fails the rule.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from shared import patterns

#: The grammar of a resource.Quantity: sign, decimal number, then a binary or decimal SI suffix or
#: a decimal exponent.
_QUANTITY = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?")


def _is_sorted(items: list[Any]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(items))


def _sum(items: list[Any]) -> Any:
    # The sum of an empty list is the zero of its type; an untyped empty list sums to int 0.
    return sum(items[1:], items[0]) if items else 0


def _least(items: list[Any]) -> Any:
    if not items:
        raise ValueError("min called on empty list")
    return min(items)


def _greatest(items: list[Any]) -> Any:
    if not items:
        raise ValueError("max called on empty list")
    return max(items)


def _find(text: str, pattern: str) -> str:
    match = patterns.compiled(pattern).search(text)
    return match.group(0) if match else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in patterns.compiled(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def _is_quantity(text: str) -> bool:
    return _QUANTITY.fullmatch(text) is not None


def _member(name: str, overload: str, result: Any, parameters: list[Any], impl: Any) -> Any:
    from cel_expr_python import cel

    return cel.FunctionDecl(name, [cel.Overload(overload, result, parameters, is_member=True, impl=impl)])


def declarations() -> list[Any]:
    """The function declarations (with their implementations) to add to a CEL environment.

    The CEL runtime and RE2 are imported when the first environment is built, not with this module:
    together they are about 20 MiB resident.
    """
    from cel_expr_python import cel

    string, list_, dyn = cel.Type.STRING, cel.Type.LIST, cel.Type.DYN
    return [
        _member("isSorted", "list_is_sorted", cel.Type.BOOL, [list_], _is_sorted),
        _member("sum", "list_sum", dyn, [list_], _sum),
        _member("min", "list_min", dyn, [list_], _least),
        _member("max", "list_max", dyn, [list_], _greatest),
        _member("find", "string_find_string", string, [string, string], _find),
        cel.FunctionDecl("findAll", [
            cel.Overload("string_find_all_string", cel.Type.List(string), [string, string], is_member=True,
                         impl=_find_all),
            cel.Overload("string_find_all_string_int", cel.Type.List(string), [string, string, cel.Type.INT],
                         is_member=True, impl=_find_all),
        ]),
        cel.FunctionDecl("isQuantity", [
            cel.Overload("is_quantity_string", cel.Type.BOOL, [string], impl=_is_quantity),
        ]),
    ]
