"""Go's ``encoding/json`` errors, worded as kube-apiserver relays them for a malformed request body.

Go checks a whole document with its scanner before it decodes any of it, and reports the first byte the scanner
refuses (``invalid character 'x' after object key``) or an early end (``unexpected end of JSON input``).  Python's
decoders word the same mistakes differently (``Expecting ':' delimiter: line 1 column 5``) and accept a few
documents Go refuses (``NaN``, ``Infinity``), so the scanner's states are written here: no Python library
reproduces them.  Only the first error matters, so the scanner is a plain loop over one state per byte.

Before it decodes a body into its type, kube-apiserver reads the body's ``apiVersion`` and ``kind`` into a struct of
two strings (:func:`read_object`): that read fails first, with a syntax error, or with Go's ``UnmarshalTypeError``
for a body that is no object or whose ``apiVersion`` or ``kind`` is no string.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from shared.api import goformat

__all__ = ["Unreadable", "json_type", "read_object", "syntax_error"]

#: Go's limit on nested objects and arrays (``maxNestingDepth``).
MAX_DEPTH = 10000
_SPACE = b" \t\r\n"
_DIGITS = b"0123456789"
_HEX = b"0123456789abcdefABCDEF"
_ESCAPES = b'bfnrt\\/"'
#: Go's ``reflect`` name of the struct kube-apiserver reads ``apiVersion`` and ``kind`` into, as its errors print it.
_VERSION_KIND = ('struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
                 'Kind string "json:\\"kind,omitempty\\"" }')


class _Refused(Exception):
    """The scanner's first error, as Go words it."""


def _char(byte: int) -> str:
    """A byte as Go's ``quoteChar`` shows it: single quotes, escaped as ``strconv.Quote`` escapes (the byte read
    as the code point of its value, as Go's ``string(rune(c))``)."""
    if byte == ord("'"):
        return "'\\''"
    if byte == ord('"'):
        return "'\"'"
    return "'" + goformat.quote(chr(byte))[1:-1] + "'"


def _refuse(byte: int, context: str) -> _Refused:
    return _Refused(f"invalid character {_char(byte)} {context}")


class _Scanner:
    """Go's scanner: ``step`` is the state for the next byte; ``stack`` the objects and arrays still open."""

    OBJECT_KEY, OBJECT_VALUE, ARRAY_VALUE = range(3)

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.step: Callable[[int], None] = self.begin_value
        self.ended = False
        #: The word being read (true, false, null) and how much of it was read; the hex digits a \u escape lacks.
        self.literal = b""
        self.literal_at = 0
        self.hex_left = 0

    # ---------------------------------------------------------------- values
    def begin_value(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == ord("{"):
            self.step = self.begin_key_or_empty
            self.push(c, self.OBJECT_KEY)
        elif c == ord("["):
            self.step = self.begin_value_or_empty
            self.push(c, self.ARRAY_VALUE)
        elif c == ord('"'):
            self.step = self.in_string
        elif c == ord("-"):
            self.step = self.negative
        elif c == ord("0"):
            self.step = self.zero
        elif c in b"123456789":
            self.step = self.integer
        elif c in b"tfn":
            self.literal = {ord("t"): b"true", ord("f"): b"false", ord("n"): b"null"}[c]
            self.literal_at = 1
            self.step = self.in_literal
        else:
            raise _refuse(c, "looking for beginning of value")

    def begin_value_or_empty(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == ord("]"):
            self.end_value(c)
        else:
            self.begin_value(c)

    def begin_key_or_empty(self, c: int) -> None:
        if c in _SPACE:
            return
        if c == ord("}"):
            self.stack[-1] = self.OBJECT_VALUE  # Go closes an empty object as it closes one after a value
            self.end_value(c)
        else:
            self.begin_key(c)

    def begin_key(self, c: int) -> None:
        if c in _SPACE:
            return
        if c != ord('"'):
            raise _refuse(c, "looking for beginning of object key string")
        self.step = self.in_string

    def end_value(self, c: int) -> None:
        if not self.stack:
            self.ended = True
            self.end_top(c)
            return
        if c in _SPACE:
            self.step = self.end_value
            return
        top = self.stack[-1]
        if top == self.OBJECT_KEY:
            if c != ord(":"):
                raise _refuse(c, "after object key")
            self.stack[-1] = self.OBJECT_VALUE
            self.step = self.begin_value
        elif top == self.OBJECT_VALUE:
            if c == ord(","):
                self.stack[-1] = self.OBJECT_KEY
                self.step = self.begin_key
            elif c == ord("}"):
                self.pop()
            else:
                raise _refuse(c, "after object key:value pair")
        else:
            if c == ord(","):
                self.step = self.begin_value
            elif c == ord("]"):
                self.pop()
            else:
                raise _refuse(c, "after array element")

    def end_top(self, c: int) -> None:
        self.step = self.end_top
        if c not in _SPACE:
            raise _refuse(c, "after top-level value")

    def push(self, c: int, kind: int) -> None:
        self.stack.append(kind)
        if len(self.stack) > MAX_DEPTH:
            raise _refuse(c, "exceeded max depth")

    def pop(self) -> None:
        self.stack.pop()
        self.step = self.end_value
        if not self.stack:
            self.ended = True
            self.step = self.end_top

    # ---------------------------------------------------------------- strings
    def in_string(self, c: int) -> None:
        if c == ord('"'):
            self.step = self.end_value
        elif c == ord("\\"):
            self.step = self.in_escape
        elif c < 0x20:
            raise _refuse(c, "in string literal")

    def in_escape(self, c: int) -> None:
        if c in _ESCAPES:
            self.step = self.in_string
        elif c == ord("u"):
            self.hex_left = 4
            self.step = self.in_unicode_escape
        else:
            raise _refuse(c, "in string escape code")

    def in_unicode_escape(self, c: int) -> None:
        if c not in _HEX:
            raise _refuse(c, "in \\u hexadecimal character escape")
        self.hex_left -= 1
        if not self.hex_left:
            self.step = self.in_string

    # ---------------------------------------------------------------- numbers
    def negative(self, c: int) -> None:
        if c == ord("0"):
            self.step = self.zero
        elif c in b"123456789":
            self.step = self.integer
        else:
            raise _refuse(c, "in numeric literal")

    def integer(self, c: int) -> None:
        if c not in _DIGITS:
            self.zero(c)

    def zero(self, c: int) -> None:
        if c == ord("."):
            self.step = self.dot
        elif c in b"eE":
            self.step = self.exponent
        else:
            self.end_value(c)

    def dot(self, c: int) -> None:
        if c not in _DIGITS:
            raise _refuse(c, "after decimal point in numeric literal")
        self.step = self.fraction

    def fraction(self, c: int) -> None:
        if c in b"eE":
            self.step = self.exponent
        elif c not in _DIGITS:
            self.end_value(c)

    def exponent(self, c: int) -> None:
        if c in b"+-":
            self.step = self.exponent_sign
        else:
            self.exponent_sign(c)

    def exponent_sign(self, c: int) -> None:
        if c not in _DIGITS:
            raise _refuse(c, "in exponent of numeric literal")
        self.step = self.exponent_digits

    def exponent_digits(self, c: int) -> None:
        if c not in _DIGITS:
            self.end_value(c)

    # ---------------------------------------------------------------- true, false, null
    def in_literal(self, c: int) -> None:
        expected = self.literal[self.literal_at]
        if c != expected:
            raise _refuse(c, f"in literal {self.literal.decode()} (expecting {_char(expected)})")
        self.literal_at += 1
        if self.literal_at == len(self.literal):
            self.step = self.end_value


def syntax_error(raw: bytes) -> str | None:
    """Go's ``SyntaxError`` text for the first mistake in ``raw``, or None when ``raw`` is one valid JSON value."""
    scanner = _Scanner()
    try:
        for c in raw:
            scanner.step(c)
        if not scanner.ended:
            scanner.step(ord(" "))  # Go ends a document by scanning one space: a number then ends, a word does not
    except _Refused as refused:
        return str(refused)
    return None if scanner.ended else "unexpected end of JSON input"

#: The struct's fields by their names folded: Go matches an object's keys to them regardless of case.
_VERSION_KIND_FIELDS = {"apiversion": "apiVersion", "kind": "kind"}


class Unreadable(ValueError):
    """kube-apiserver could not read a body's apiVersion and kind; the message is its own."""


def read_object(raw: bytes, **options: Any) -> Any:
    """``raw`` decoded by ``json.loads(**options)``, once Go would have read its ``apiVersion`` and ``kind``
    (:class:`Unreadable` otherwise: ``couldn't get version/kind; json parse error: ...``).  Bytes that are not UTF-8
    are read as U+FFFD, as Go reads them."""
    mistake = syntax_error(raw)
    stated = None if mistake is not None else json.loads(raw.decode(errors="replace"), **options)
    if isinstance(stated, list | str | int | float | bool):
        mistake = f"json: cannot unmarshal {json_type(stated)} into Go value of type {_VERSION_KIND}"
    elif isinstance(stated, dict):
        mistake = next((f"json: cannot unmarshal {json_type(value)} into Go struct field .{field} of type string"
                        for key, value in stated.items()
                        if (field := _VERSION_KIND_FIELDS.get(key.casefold())) is not None
                        and value is not None and not isinstance(value, str)), None)
    if mistake is not None:
        raise Unreadable(f"couldn't get version/kind; json parse error: {mistake}")
    return stated


def json_type(value: object) -> str:
    """The JSON type of a decoded value as Go's ``UnmarshalTypeError`` names it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
