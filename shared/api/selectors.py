"""Kubernetes label and field selectors.

Label selectors are parsed into requirements so a service can validate them up front (a bad
selector is the client's 400, not the backing apiserver's), rewrite the user's keys into the keys
the backing objects carry, and match objects it holds in memory.  Field selectors are restricted
to ``metadata.name`` and ``metadata.namespace``: those are the only fields every backing object
can answer without reading the user-facing object first.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.api import errors, goformat
from shared.api.labels import label_value_errors
from shared.api.ownership import qualified_name_errors

EQUALS = "="
NOT_EQUALS = "!="
IN = "in"
NOT_IN = "notin"
EXISTS = "exists"
DOES_NOT_EXIST = "!"

GREATER_THAN = ">"
LESS_THAN = "<"


@dataclass(frozen=True)
class Requirement:
    """One ``key op values`` clause; ``values`` is empty for exists / does-not-exist."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator in (IN, NOT_IN):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        return f"{self.key}{self.operator}{self.values[0]}"


Selector = tuple[Requirement, ...]


# --- label selectors: kube-apiserver's grammar and its words ----------------------------------------------------
# Written by hand: no Python library parses Kubernetes label selectors.  The lexer and the parser below take
# the same decisions, in the same order, as apimachinery's ``labels.Parse`` (which kube-apiserver runs on a
# list's or a watch's ``labelSelector``), so that a malformed selector is refused with the message a custom
# resource's list gives, and a selector it accepts (``a in ()``, ``a>1``) is accepted here too.

class _Token(enum.Enum):
    END = enum.auto()
    CLOSED_PAR = enum.auto()
    COMMA = enum.auto()
    DOES_NOT_EXIST = enum.auto()
    DOUBLE_EQUALS = enum.auto()
    EQUALS = enum.auto()
    GREATER_THAN = enum.auto()
    IDENTIFIER = enum.auto()
    IN = enum.auto()
    LESS_THAN = enum.auto()
    NOT_EQUALS = enum.auto()
    NOT_IN = enum.auto()
    OPEN_PAR = enum.auto()


_LITERAL_TOKENS = {")": _Token.CLOSED_PAR, ",": _Token.COMMA, "!": _Token.DOES_NOT_EXIST, "==": _Token.DOUBLE_EQUALS,
                   "=": _Token.EQUALS, ">": _Token.GREATER_THAN, "in": _Token.IN, "<": _Token.LESS_THAN,
                   "!=": _Token.NOT_EQUALS, "notin": _Token.NOT_IN, "(": _Token.OPEN_PAR}
_OPERATORS = {_Token.IN: IN, _Token.NOT_IN: NOT_IN, _Token.EQUALS: EQUALS, _Token.DOUBLE_EQUALS: EQUALS,
              _Token.NOT_EQUALS: NOT_EQUALS, _Token.GREATER_THAN: GREATER_THAN, _Token.LESS_THAN: LESS_THAN}
#: The binary operators in the order kube-apiserver lists them when it expected one.
_BINARY_OPERATORS = "in, notin, =, ==, !=, gt, lt"
_SPECIAL_SYMBOLS = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
#: Go reads the selector byte by byte and a 0 byte ends it wherever it stands; so does the end of the text.
_END = "\x00"


class _Unparsable(Exception):
    """A requirement kube-apiserver cannot parse; its message is Go's error text."""


def _lex(text: str) -> list[tuple[_Token, str]]:
    """Every token of ``text`` up to and with the end, with the text it was read from."""
    tokens: list[tuple[_Token, str]] = []
    pos = 0

    def read() -> str:
        nonlocal pos
        if pos >= len(text):
            return _END
        pos += 1
        return text[pos - 1]

    while True:
        char = read()
        while char in _WHITESPACE:
            char = read()
        if char == _END:
            tokens.append((_Token.END, ""))
            return tokens
        buffer = char
        if char in _SPECIAL_SYMBOLS:
            # The longest run of symbols that is an operator: "!=" and "==" are one, "=(" is two.
            while (char := read()) in _SPECIAL_SYMBOLS and buffer + char in _LITERAL_TOKENS:
                buffer += char
            if char != _END:
                pos -= 1
            tokens.append((_LITERAL_TOKENS[buffer], buffer))
            continue
        while (char := read()) != _END and char not in _SPECIAL_SYMBOLS and char not in _WHITESPACE:
            buffer += char
        if char != _END:
            pos -= 1
        tokens.append((_LITERAL_TOKENS.get(buffer, _Token.IDENTIFIER), buffer))


class _LabelSelectorParser:
    """A recursive descent over the tokens, with kube-apiserver's context rule: where a value may stand, ``in``
    and ``notin`` are plain identifiers (``a in (in)``, ``in=notin``)."""

    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool = True) -> tuple[_Token, str]:
        token, literal = self.tokens[self.pos]
        if values and token in (_Token.IN, _Token.NOT_IN):
            token = _Token.IDENTIFIER
        return token, literal

    def consume(self, values: bool = True) -> tuple[_Token, str]:
        found = self.lookahead(values)
        self.pos += 1
        return found

    def selector(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self.lookahead()
            if token is _Token.END:
                return requirements
            if token not in (_Token.IDENTIFIER, _Token.DOES_NOT_EXIST):
                raise errors.bad_request(f"found '{literal}', expected: !, identifier, or 'end of string'")
            try:
                requirements.append(self.requirement())
            except _Unparsable as exc:
                raise errors.bad_request(f"unable to parse requirement: {exc}") from None
            token, literal = self.consume()
            if token is _Token.END:
                return requirements
            if token is not _Token.COMMA:
                raise errors.bad_request(f"found '{literal}', expected: ',' or 'end of string'")
            token, literal = self.lookahead()
            if token not in (_Token.IDENTIFIER, _Token.DOES_NOT_EXIST):
                raise errors.bad_request(f"found '{literal}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        negated = self.lookahead()[0] is _Token.DOES_NOT_EXIST
        if negated:
            self.consume()
        token, key = self.consume()
        if token is not _Token.IDENTIFIER:
            raise _Unparsable(f"found '{key}', expected: identifier")
        if why := qualified_name_errors(key):
            raise _Unparsable(f"<nil>: Invalid value: {goformat.quote(key)}: {'; '.join(why)}")
        if negated:
            return Requirement(key, DOES_NOT_EXIST)
        if self.lookahead()[0] in (_Token.END, _Token.COMMA):
            return Requirement(key, EXISTS)
        token, literal = self.consume(values=False)
        operator = _OPERATORS.get(token)
        if operator is None:
            raise _Unparsable(f"found '{literal}', expected: {_BINARY_OPERATORS}")
        values = self.value_set() if operator in (IN, NOT_IN) else self.exact_value()
        return _requirement(key, operator, sorted(set(values)))

    def value_set(self) -> list[str]:
        token, literal = self.consume()
        if token is not _Token.OPEN_PAR:
            raise _Unparsable(f"found '{literal}' expected: '('")
        token, literal = self.lookahead()
        if token is _Token.CLOSED_PAR:
            self.consume()
            return [""]
        if token not in (_Token.IDENTIFIER, _Token.COMMA):
            raise _Unparsable(f"found '{literal}', expected: ',', ')' or identifier")
        values = self.identifiers()
        if self.consume()[0] is not _Token.CLOSED_PAR:
            raise _Unparsable(f"found '{literal}', expected: ')'")  # the text after '(', as kube-apiserver says
        return values

    def identifiers(self) -> list[str]:
        """A list of identifiers between commas, any of them empty; stops before the closing parenthesis."""
        values: list[str] = []
        while True:
            token, literal = self.consume()
            if token is _Token.IDENTIFIER:
                values.append(literal)
                following, text = self.lookahead()
                if following is _Token.CLOSED_PAR:
                    return values
                if following is not _Token.COMMA:
                    raise _Unparsable(f"found '{text}', expected: ',' or ')'")
            elif token is _Token.COMMA:
                if not values:
                    values.append("")
                following = self.lookahead()[0]
                if following in (_Token.CLOSED_PAR, _Token.COMMA):
                    values.append("")
                if following is _Token.CLOSED_PAR:
                    return values
            else:
                raise _Unparsable(f"found '{literal}', expected: ',', or identifier")

    def exact_value(self) -> list[str]:
        if self.lookahead()[0] in (_Token.END, _Token.COMMA):
            return [""]
        token, literal = self.consume()
        if token is not _Token.IDENTIFIER:
            raise _Unparsable(f"found '{literal}', expected: identifier")
        return [literal]


def _requirement(key: str, operator: str, values: list[str]) -> Requirement:
    """The requirement, once its values pass the checks kube-apiserver makes of a parsed one."""
    problems: list[str] = []
    if operator in (GREATER_THAN, LESS_THAN):
        problems += [f"values[{i}]: Invalid value: {goformat.quote(v)}: for 'Gt', 'Lt' operators, the value must be "
                     "an integer" for i, v in enumerate(values) if _go_int64(v) is None]
    for i, value in enumerate(values):
        if why := label_value_errors(value):
            problems.append(f"values[{i}][{key}]: Invalid value: {goformat.quote(value)}: {'; '.join(why)}")
    unique = list(dict.fromkeys(problems))
    if len(unique) == 1:
        raise _Unparsable(unique[0])
    if unique:
        raise _Unparsable(f"[{', '.join(unique)}]")
    return Requirement(key, operator, tuple(values))


def _go_int64(text: str) -> int | None:
    """``text`` as ``strconv.ParseInt(text, 10, 64)`` reads it, or None where that fails."""
    try:
        return goformat.parse_int64(text)
    except ValueError:
        return None


def parse_label_selector(text: str) -> Selector:
    """Parse a label selector; raise 400 with kube-apiserver's reason when it is malformed.

    Requirements come back sorted by key (as kube-apiserver sorts them), ``==`` normalised to ``=``, a set's
    values sorted and without repeats.
    """
    return tuple(sorted(_LabelSelectorParser(text).selector(), key=lambda r: r.key))


def render(selector: Sequence[Requirement]) -> str:
    """The canonical string form, parseable by :func:`parse_label_selector` and by kube."""
    return ",".join(str(r) for r in selector)


def translate_keys(selector: str | Sequence[Requirement], fn: Callable[[str], str]) -> Selector:
    """Map each requirement's key through ``fn`` (user-facing label key -> backing label key)."""
    reqs = parse_label_selector(selector) if isinstance(selector, str) else tuple(selector)
    return tuple(Requirement(fn(r.key), r.operator, r.values) for r in reqs)


def _matches_one(req: Requirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    value = labels.get(req.key)
    if req.operator == EXISTS:
        return present
    if req.operator == DOES_NOT_EXIST:
        return not present
    if req.operator in (EQUALS, IN):
        return present and value in req.values
    if req.operator in (NOT_EQUALS, NOT_IN):
        return not present or value not in req.values
    if req.operator in (GREATER_THAN, LESS_THAN):
        number, bound = _go_int64(value or ""), _go_int64(req.values[0]) if len(req.values) == 1 else None
        if number is None or bound is None:
            return False
        return number > bound if req.operator == GREATER_THAN else number < bound
    raise ValueError(f"unknown operator {req.operator!r}")


def matches(selector: Requirement | Sequence[Requirement], labels: Mapping[str, str] | None) -> bool:
    """True if ``labels`` satisfy the requirement (or every requirement of a selector)."""
    actual: Mapping[str, str] = labels or {}
    if isinstance(selector, Requirement):
        return _matches_one(selector, actual)
    return all(_matches_one(r, actual) for r in selector)


# --- field selectors ---------------------------------------------------------------------------

SUPPORTED_FIELDS = ("metadata.name", "metadata.namespace")

FieldRequirement = tuple[str, str, str]


def _field_terms(text: str) -> list[str]:
    """The comma-separated terms of a field selector; an escaped comma stays in its term, backslash and all."""
    terms: list[str] = []
    start, escaped = 0, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            terms.append(text[start:i])
            start = i + 1
    return [*terms, text[start:]] if text else []


def _unescape(value: str) -> str:
    """A term's value with its escapes undone; a bare ``,`` or ``=`` or an unknown escape is kube-apiserver's 400."""
    out: list[str] = []
    escaped = False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise errors.bad_request(f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise errors.bad_request(f"invalid field selector: unescaped character in value: {ord(char)}")
        else:
            out.append(char)
    if escaped:
        raise errors.bad_request("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _split_term(selector: str, term: str) -> tuple[str, str, str]:
    """``term`` split at its first operator, ``!=`` and ``==`` before ``=``; the field is taken as written."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    raise errors.bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")


def parse_field_selector(text: str) -> tuple[FieldRequirement, ...]:
    """Parse a field selector into ``(field, "=" | "!=", value)`` triples and check its fields: the two steps
    kube-apiserver takes, apart in a list (:func:`shared.server.options.parse_list_options`)."""
    return check_supported_fields(parse_field_terms(text))


def parse_field_terms(text: str) -> tuple[FieldRequirement, ...]:
    """A field selector's syntax, as kube-apiserver reads one for a custom resource: its terms sorted, empty ones
    skipped, nothing trimmed; a malformed term or value is its 400."""
    parsed = []
    for term in sorted(_field_terms(text)):
        if term:
            field, op, raw_value = _split_term(text, term)
            parsed.append((field, NOT_EQUALS if op == "!=" else EQUALS, _unescape(raw_value)))
    return tuple(parsed)


def check_supported_fields(terms: tuple[FieldRequirement, ...]) -> tuple[FieldRequirement, ...]:
    """``terms`` if each selects ``metadata.name`` or ``metadata.namespace``; else the 400 kube-apiserver answers
    for a custom resource ("field label not supported: <field>"), for the first other field in sorted order."""
    for field, _op, _value in terms:
        if field not in SUPPORTED_FIELDS:
            raise errors.bad_request(f"field label not supported: {field}")
    return terms


def render_field_selector(reqs: Sequence[FieldRequirement]) -> str:
    """The string form of parsed field requirements (values re-escaped)."""

    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")

    return ",".join(f"{f}{op}{esc(v)}" for f, op, v in reqs)


def field_matches(reqs: Sequence[FieldRequirement], obj: Mapping[str, Any]) -> bool:
    """True if ``obj`` satisfies every ``metadata.name`` / ``metadata.namespace`` requirement."""
    meta = obj.get("metadata") or {}
    for field, op, value in reqs:
        actual = meta.get(field.split(".", 1)[1]) or ""
        if (actual == value) != (op == EQUALS):
            return False
    return True
