"""Reading a module's variables and outputs with python-hcl2.

Attribute values that are plain data (descriptions, defaults, flags) come from python-hcl2's
dict form.  Type constraints and validation conditions are expressions, which that form only
gives back as source text; they are parsed again into python-hcl2's rule tree and reduced here to
the few node kinds the generator reasons about (:data:`Expr`).  Anything else stays
:class:`Other` with its source text, so callers can compare or report it.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
from hcl2.rules.base import AttributeRule
from hcl2.rules.containers import ObjectRule, TupleRule
from hcl2.rules.expressions import BinaryOpRule, BinaryTermRule, ExprTermRule, UnaryOpRule
from hcl2.rules.functions import FunctionCallRule
from hcl2.rules.indexing import GetAttrExprTermRule, IndexExprTermRule
from hcl2.rules.literal_rules import (
    FloatLitRule,
    IdentifierRule,
    IntLitRule,
    KeywordRule,
    LiteralValueRule,
)
from hcl2.rules.strings import StringRule

_VALUES = hcl2.SerializationOptions(
    strip_string_quotes=True,
    explicit_blocks=False,
    with_comments=False,
    preserve_heredocs=True,
    preserve_scientific_notation=False,
)
_TRANSLATED = frozenset({"type", "default", "description", "nullable", "sensitive", "validation"})
_HEREDOC = re.compile(r"\A<<(-?)([A-Za-z_][A-Za-z0-9_-]*)\n(.*?)[ \t]*\2\s*\Z", re.DOTALL)


class ModuleError(Exception):
    """The module cannot be read at all (no ``*.tf`` / ``*.tofu`` files, or one does not parse)."""


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Obj:
    items: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class Tup:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Name:
    """A bare identifier: a type keyword such as ``string`` in a type constraint."""

    name: str


@dataclass(frozen=True)
class Lit:
    value: str | int | float | bool | None


@dataclass(frozen=True)
class BinOp:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Other:
    """Any other expression, as its source text.

    Traversals (``var.region``, ``var.subnets[0].cidr``) are compared by that text; conditionals,
    ``for`` expressions and templates are only shown.
    """

    text: str


Expr = Call | Obj | Tup | Name | Lit | BinOp | Other


@dataclass(frozen=True)
class Validation:
    condition: Expr
    text: str
    error_message: str


@dataclass(frozen=True)
class Variable:
    name: str
    type: Expr | None
    has_default: bool
    default: Any
    description: str | None
    nullable: bool | None
    sensitive: bool
    validations: tuple[Validation, ...] = field(default=())
    #: Attributes of the block the generator does not translate (``deprecated``...).
    other_attributes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Output:
    name: str
    sensitive: bool


@dataclass(frozen=True)
class Module:
    variables: tuple[Variable, ...]
    outputs: tuple[Output, ...]
    #: Files OpenTofu would read that the generator does not (JSON syntax, ``*.tf.json``).
    unread: tuple[str, ...] = ()


def module_files(directory: Path) -> list[Path]:
    """The native-syntax files OpenTofu reads, in name order.

    ``x.tofu`` replaces ``x.tf`` when both exist (OpenTofu 1.8+).
    """
    tofu = {path.stem for path in directory.glob("*.tofu")}
    files = [*directory.glob("*.tofu"), *(p for p in directory.glob("*.tf") if p.stem not in tofu)]
    return sorted(files, key=lambda path: path.name)


def read_module(directory: Path) -> Module:
    """Every variable and output declared in the module in ``directory``, files in name order."""
    files = module_files(directory)
    if not files:
        raise ModuleError(f"{directory}: no *.tf or *.tofu files")
    variables: list[Variable] = []
    outputs: list[Output] = []
    for path in files:
        try:
            body = hcl2.loads(path.read_text(encoding="utf-8"), serialization_options=_VALUES)
        except Exception as error:  # python-hcl2 raises lark's many error types
            raise ModuleError(f"{path}: {error}") from error
        for block in body.get("variable", []):
            variables.extend(_variable(name, attrs) for name, attrs in block.items())
        for block in body.get("output", []):
            outputs.extend(Output(name, attrs.get("sensitive") is True) for name, attrs in block.items())
    unread = sorted(p.name for pattern in ("*.tf.json", "*.tofu.json") for p in directory.glob(pattern))
    return Module(tuple(variables), tuple(outputs), tuple(unread))


def _variable(name: str, attrs: dict[str, Any]) -> Variable:
    type_text = attrs.get("type")
    return Variable(
        name=name,
        type=parse_expression(source(type_text)) if isinstance(type_text, str) else None,
        has_default="default" in attrs,
        default=_data(attrs.get("default")),
        description=(string_value(attrs.get("description")) or "").strip() or None,
        nullable=attrs.get("nullable"),
        sensitive=attrs.get("sensitive") is True,
        validations=tuple(_validation(block) for block in attrs.get("validation", [])),
        other_attributes=tuple(sorted(attrs.keys() - _TRANSLATED)),
    )


def _validation(block: dict[str, Any]) -> Validation:
    condition = block.get("condition")
    text = source(condition) if isinstance(condition, str) else _literal_text(condition)
    return Validation(parse_expression(text), text, string_value(block.get("error_message")) or "")


def _data(value: Any) -> Any:
    """A constant from python-hcl2's dict form, heredoc strings unwrapped at any depth."""
    if isinstance(value, str):
        return string_value(value)
    if isinstance(value, list):
        return [_data(item) for item in value]
    if isinstance(value, dict):
        return {key: _data(item) for key, item in value.items()}
    return value


def string_value(value: Any) -> str | None:
    """A string attribute's value; heredocs are kept verbatim by python-hcl2 and unwrapped here.

    (Its own heredoc conversion escapes quotes and backslashes, which a heredoc does not.)
    """
    if not isinstance(value, str):
        return None
    heredoc = _HEREDOC.match(value)
    if heredoc is None:
        return value
    flush, _marker, body = heredoc.groups()
    return textwrap.dedent(body) if flush else body


def source(text: str) -> str:
    """The expression inside python-hcl2's ``${...}`` wrapping (bare keywords come unwrapped)."""
    return text[2:-1] if text.startswith("${") and text.endswith("}") else text


def parse_expression(text: str) -> Expr:
    """``text`` (one HCL expression) as an :data:`Expr`."""
    start = hcl2.parses(f"expression = {text}\n")
    attribute = next(c for c in start.body.children if isinstance(c, AttributeRule))
    return _expr(attribute.expression)


def literal(expr: Expr) -> Any:
    """The JSON value of a constant expression; ValueError when it is not constant."""
    if isinstance(expr, Lit):
        return expr.value
    if isinstance(expr, Tup):
        return [literal(item) for item in expr.items]
    if isinstance(expr, Obj):
        return {key: literal(value) for key, value in expr.items}
    raise ValueError(f"not a constant: {text_of(expr)}")


def text_of(expr: Expr) -> str:
    """Approximate source text of ``expr``, for messages."""
    match expr:
        case Call(name, args):
            return f"{name}({', '.join(text_of(a) for a in args)})"
        case Obj(items):
            return "{" + ", ".join(f"{k} = {text_of(v)}" for k, v in items) + "}"
        case Tup(items):
            return "[" + ", ".join(text_of(i) for i in items) + "]"
        case Name(name):
            return name
        case Lit(value):
            return _literal_text(value)
        case BinOp(op, left, right):
            return f"{text_of(left)} {op} {text_of(right)}"
        case Other(text):
            return text
    raise AssertionError(expr)


def _literal_text(value: str | int | float | bool | None) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def _expr(rule: Any) -> Expr:
    if isinstance(rule, ExprTermRule):
        return _expr(rule.expression)
    if isinstance(rule, FunctionCallRule):
        name = "::".join(str(i.serialize()) for i in rule.identifiers)
        args = rule.arguments.arguments if rule.arguments else []
        return Call(name, tuple(_expr(a) for a in args))
    if isinstance(rule, ObjectRule):
        return Obj(tuple((_key(e.key.value), _expr(e.expression)) for e in rule.elements))
    if isinstance(rule, TupleRule):
        return Tup(tuple(_expr(e) for e in rule.elements))
    if isinstance(rule, IdentifierRule):
        return Name(str(rule.serialize()))
    if isinstance(rule, StringRule):
        if all(part.content.lark_name() == "STRING_CHARS" for part in rule.string_parts):
            return Lit(str(rule.serialize(_VALUES)))
        return Other(str(rule.serialize()))
    if isinstance(rule, IntLitRule | FloatLitRule):
        return _number(rule)
    if isinstance(rule, LiteralValueRule | KeywordRule):
        value = rule.serialize()
        return Lit(value) if value is None or isinstance(value, bool) else Other(str(value))
    if isinstance(rule, GetAttrExprTermRule | IndexExprTermRule):
        return Other(source(str(rule.serialize())))
    if isinstance(rule, BinaryOpRule):
        return _binary(rule)
    if isinstance(rule, UnaryOpRule):
        operand = _expr(rule.expr_term)
        if rule.operator.strip() == "-" and isinstance(operand, Lit) and isinstance(operand.value, int | float):
            return Lit(-operand.value)
    return Other(source(str(rule.serialize())))


def _number(rule: IntLitRule | FloatLitRule) -> Expr:
    text = str(rule.token.value)
    try:
        return Lit(int(text))
    except ValueError:
        try:
            return Lit(float(text))
        except ValueError:
            return Other(text)


def _binary(rule: BinaryOpRule) -> Expr:
    term: BinaryTermRule = rule.binary_term
    return BinOp(str(term.binary_operator.serialize()).strip(), _expr(rule.expr_term), _expr(term.expr_term))


def _key(rule: Any) -> str:
    if isinstance(rule, StringRule):
        return str(rule.serialize(_VALUES))
    return str(rule.serialize())
