"""Kubernetes label and field selectors.

Label selectors are parsed into requirements so a service can validate them up front (a bad
selector is the client's 400, not the backing apiserver's), rewrite the user's keys into the keys
the backing objects carry, and match objects it holds in memory.  Field selectors are restricted
to ``metadata.name`` and ``metadata.namespace``: those are the only fields every backing object
can answer without reading the user-facing object first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.api import errors

EQUALS = "="
NOT_EQUALS = "!="
IN = "in"
NOT_IN = "notin"
EXISTS = "exists"
DOES_NOT_EXIST = "!"

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_NAME_CHARACTERS = ("must consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


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


def _bad(message: str) -> errors.ApiError:
    return errors.bad_request(f"unable to parse requirement: {message}")


def label_key_error(key: str) -> str | None:
    """Why ``key`` is not a valid label key (optional DNS-subdomain prefix, then a name), or None."""
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not all(_DNS1123_LABEL.fullmatch(p) for p in prefix.split("."))):
        return f"prefix part of {key!r} must be a lowercase DNS subdomain of at most 253 characters"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return f"name part of {key!r} must be no more than 63 characters"
    if not _NAME.fullmatch(name):
        return f"name part of {key!r} {_NAME_CHARACTERS}"
    return None


def label_value_error(value: str) -> str | None:
    """Why ``value`` is not a valid label value (empty is valid), or None."""
    if value == "":
        return None
    if len(value) > 63:
        return f"value {value!r} must be no more than 63 characters"
    if not _NAME.fullmatch(value):
        return f"value {value!r} {_NAME_CHARACTERS}"
    return None


# --- lexer -------------------------------------------------------------------------------------

_SYMBOLS = ("!=", "==", "!", "=", "(", ")", ",")
_SPECIAL = set("!=(),<> \t\r\n")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        symbol = next((s for s in _SYMBOLS if text.startswith(s, i)), None)
        if symbol is not None:
            out.append(symbol)
            i += len(symbol)
            continue
        if ch in "<>":
            raise _bad(f"operator {ch!r} is not supported")
        start = i
        while i < len(text) and text[i] not in _SPECIAL:
            i += 1
        out.append(text[start:i])
    return out


def _is_identifier(tok: str | None) -> bool:
    return tok is not None and tok not in _SYMBOLS


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def take(self) -> str | None:
        tok = self.peek()
        self.pos += 1
        return tok

    def requirement(self) -> Requirement:
        negate = False
        if self.peek() == "!":
            self.take()
            negate = True
        key = self.take()
        if not _is_identifier(key) or key is None:
            raise _bad(f"found {key or 'end of string'!r}, expected a label key")
        if (problem := label_key_error(key)) is not None:
            raise _bad(f"invalid label key {key!r}: {problem}")
        nxt = self.peek()
        if negate:
            if nxt not in (None, ","):
                raise _bad(f"found {nxt!r}, expected ',' or end of string after '!{key}'")
            return Requirement(key, DOES_NOT_EXIST)
        if nxt in (None, ","):
            return Requirement(key, EXISTS)
        op = self.take()
        if op in ("=", "==", "!="):
            value = self.peek()
            if value in (None, ","):
                value = ""
            else:
                self.take()
                if not _is_identifier(value) or value is None:
                    raise _bad(f"found {value!r}, expected a value")
            if (problem := label_value_error(value)) is not None:
                raise _bad(f"invalid label value: {problem}")
            return Requirement(key, NOT_EQUALS if op == "!=" else EQUALS, (value,))
        if op in (IN, NOT_IN):
            if self.take() != "(":
                raise _bad(f"expected '(' after {op!r}")
            values: list[str] = []
            expect_value = True
            while True:
                tok = self.take()
                if tok is None:
                    raise _bad("found end of string, expected ')'")
                if tok == ")":
                    if expect_value and values:
                        values.append("")
                    break
                if tok == ",":
                    if expect_value:
                        values.append("")
                    expect_value = True
                    continue
                if not expect_value or not _is_identifier(tok):
                    raise _bad(f"found {tok!r}, expected ',' or ')'")
                values.append(tok)
                expect_value = False
            if not values:
                raise _bad(f"for 'in', 'notin' operators, values set can't be empty (key {key!r})")
            for v in values:
                if (problem := label_value_error(v)) is not None:
                    raise _bad(f"invalid label value: {problem}")
            return Requirement(key, op, tuple(sorted(set(values))))
        raise _bad(f"found {op!r}, expected one of '=', '==', '!=', 'in', 'notin'")


def parse_label_selector(text: str) -> Selector:
    """Parse a label selector; raise 400 with the reason when it is malformed.

    Requirements come back sorted by key (as kube-apiserver sorts them), ``==`` normalised to ``=``.
    """
    if text.strip() == "":
        return ()
    parser = _Parser(text)
    reqs: list[Requirement] = []
    while True:
        reqs.append(parser.requirement())
        tok = parser.take()
        if tok is None:
            break
        if tok != ",":
            raise _bad(f"found {tok!r}, expected ','")
        if parser.peek() is None:
            raise _bad("found end of string after ',', expected a requirement")
    return tuple(sorted(reqs, key=lambda r: r.key))


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


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(value):
        if value[i] == "\\":
            if i + 1 >= len(value) or value[i + 1] not in "\\,=":
                raise errors.bad_request(f"invalid field selector value {value!r}: invalid escape sequence")
            out.append(value[i + 1])
            i += 2
            continue
        if value[i] in ",=":
            raise errors.bad_request(f"invalid field selector value {value!r}: unescaped {value[i]!r}")
        out.append(value[i])
        i += 1
    return "".join(out)


def _split_requirement(term: str) -> tuple[str, str, str]:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
        i += 1
    raise errors.bad_request(f"invalid selector: '{term}'; can't understand '{term}'")


def parse_field_selector(text: str) -> tuple[FieldRequirement, ...]:
    """Parse a field selector into ``(field, "=" | "!=", value)`` triples.

    Only ``metadata.name`` and ``metadata.namespace`` are supported; anything else is the 400
    kube-apiserver answers for a CRD ("field label not supported: <field>").
    """
    if text.strip() == "":
        return ()
    out: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        if term.strip() == "":
            raise errors.bad_request(f"invalid selector: '{text}'; empty requirement")
        raw_field, op, raw_value = _split_requirement(term)
        field = raw_field.strip()
        if field not in SUPPORTED_FIELDS:
            raise errors.bad_request(f"field label not supported: {field}")
        out.append((field, NOT_EQUALS if op == "!=" else EQUALS, _unescape(raw_value.strip())))
    return tuple(out)


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
