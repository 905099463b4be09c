"""Simple ``validation`` conditions as JSON Schema keywords.

Translated: ``can(regex("re", var.x))`` -> ``pattern``; ``contains([...], var.x)``,
``var.x == "a"`` and an ``||`` of those -> ``enum``;
``length(var.x) OP n`` -> min/max Length, Items or Properties by the variable's type;
``var.x OP n`` -> ``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum``; and
any ``&&`` of those.  The variable must be referenced whole (``var.x``, not ``var.x.y``): a
keyword applies to the whole value.  Anything else returns None; the caller keeps the condition
as text.  Translations narrow what the API accepts to what the module accepts, so a user sees the
error at ``kubectl apply`` instead of at plan time.
"""

from __future__ import annotations

from typing import Any

from tofu_agl.generate.hcl import BinOp, Call, Expr, Lit, Other, Tup

JSON = dict[str, Any]

_FLIPPED = {">=": "<=", "<=": ">=", ">": "<", "<": ">", "==": "=="}
_LENGTH_KEYWORDS = {"string": "Length", "array": "Items", "object": "Properties"}


def translate(condition: Expr, variable: str, schema: JSON) -> JSON | None:
    """Schema keywords equivalent to ``condition`` on ``var.<variable>``, or None."""
    reference = Other(f"var.{variable}")
    match condition:
        case BinOp("&&", left, right):
            first, second = translate(left, variable, schema), translate(right, variable, schema)
            if first is None or second is None or first.keys() & second.keys():
                return None
            return first | second
        case BinOp("||", left, right):
            first, second = translate(left, variable, schema), translate(right, variable, schema)
            if first is None or second is None or first.keys() != {"enum"} or second.keys() != {"enum"}:
                return None
            return {"enum": first["enum"] + [v for v in second["enum"] if v not in first["enum"]]}
        case BinOp("==", ref, Lit(value)) | BinOp("==", Lit(value), ref) if ref == reference:
            return {"enum": [value]}
        case Call("can", (Call("regex", (Lit(str(pattern)), ref)),)) if ref == reference:
            return {"pattern": pattern} if schema.get("type") == "string" else None
        case Call("contains", (Tup(items), ref)) if ref == reference and all(isinstance(i, Lit) for i in items):
            return {"enum": [i.value for i in items if isinstance(i, Lit)]}
        case BinOp(op, left, Lit(int() | float() as bound)) if op in _FLIPPED and not isinstance(bound, bool):
            return _comparison(op, left, bound, reference, schema)
        case BinOp(op, Lit(int() | float() as bound), right) if op in _FLIPPED and not isinstance(bound, bool):
            return _comparison(_FLIPPED[op], right, bound, reference, schema)
    return None


def _comparison(op: str, subject: Expr, bound: float, reference: Other, schema: JSON) -> JSON | None:
    if subject == reference and schema.get("type") == "number":
        return _bounds(op, bound, "minimum", "maximum", exclusive=True)
    if subject == Call("length", (reference,)):
        suffix = _LENGTH_KEYWORDS.get(str(schema.get("type")))
        if suffix is None or bound != int(bound):
            return None
        count = int(bound)
        # lengths are whole numbers: > n is >= n + 1
        if op == ">":
            op, count = ">=", count + 1
        elif op == "<":
            op, count = "<=", count - 1
        if count < 0:
            return None
        return _bounds(op, count, f"min{suffix}", f"max{suffix}", exclusive=False)
    return None


def _bounds(op: str, bound: float, lower: str, upper: str, *, exclusive: bool) -> JSON | None:
    if op == ">=":
        return {lower: bound}
    if op == "<=":
        return {upper: bound}
    if op == "==":
        return {lower: bound, upper: bound}
    if exclusive and op == ">":
        return {"exclusiveMinimum": bound}
    if exclusive and op == "<":
        return {"exclusiveMaximum": bound}
    return None
