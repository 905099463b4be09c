"""Values printed as kube-apiserver prints them in its messages: Go's ``%q`` and ``encoding/json``.

A field error shows its bad value with ``%q`` when it is a string (``strconv.Quote``: printable characters as they
are, any Unicode letter or digit included, the rest escaped Go's way) and as ``json.Marshal`` writes it otherwise
(``<``, ``>`` and ``&`` escaped for HTML, map keys sorted).  Python's ``json.dumps`` differs in both, so a message
built with it reads ``"\\u0661"`` where kube-apiserver's reads the digit itself.  Neither Go format has a Python
library, so both are written here.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

__all__ = ["bad_value", "float_value", "marshal", "quote"]

_NAMED = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
#: What encoding/json escapes that Python's encoder writes as it is.
_HTML_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                            "\u2029": "\\u2029"})


def quote(text: str) -> str:
    """``text`` as Go's ``strconv.Quote`` writes it.

    Python's ``isprintable`` excludes the categories Go's ``IsPrint`` does (other and separator, the ASCII space
    aside); the two follow their own Unicode versions, so a character only the newer one assigns may differ.
    """
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        elif char in _NAMED:
            out.append(_NAMED[char])
        elif 0xD800 <= ord(char) <= 0xDFFF:
            out.append("\ufffd")  # Go's JSON decoder turns a lone surrogate into the replacement character
        elif ord(char) < 0x20 or char == "\x7f":
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def marshal(value: Any, *, sort_keys: bool = True) -> str:
    """``value`` as Go's ``json.Marshal`` writes it (maps sorted by key, as Go sorts them; a struct's fields are
    in its own order, so pass ``sort_keys=False`` with the keys already in that order)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys).translate(_HTML_SAFE)


def float_value(value: float) -> str:
    """``value`` as Go's ``%v`` prints a float64: the shortest digits that read back, in exponent form when the
    exponent is below -4 or 6 and above (``1e+06``, ``1.5e-05``), else without one and without a trailing ``.0``."""
    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)  # a finite float: JSON carries no NaN or infinity
    point = len(digit_tuple) + exponent  # where the decimal point falls in the digits
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    minus = "-" if sign else ""
    power = point - 1
    if power < -4 or power >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{minus}{mantissa}e{'+' if power >= 0 else '-'}{abs(power):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{minus}{digits}{'0' * (point - len(digits))}"
    return f"{minus}{digits[:point]}.{digits[point:]}"


def bad_value(value: Any) -> str:
    """A field error's bad value, as ``field.Error.ErrorBody`` prints it."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return float_value(value)
    return marshal(value)


_DECIMAL = re.compile(r"[+-]?[0-9]+")
_UNSIGNED = re.compile(r"[0-9]+")


def parse_int64(text: str) -> int:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it: optional sign, decimal digits, nothing else,
    within 64 bits.  Where that fails, a ValueError whose text is Go's error."""
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"strconv.ParseInt: parsing {quote(text)}: invalid syntax")
    number = int(text)
    if not -(2**63) <= number < 2**63:
        raise ValueError(f"strconv.ParseInt: parsing {quote(text)}: value out of range")
    return number


def parse_uint64(text: str) -> int:
    """``text`` as Go's ``strconv.ParseUint(text, 10, 64)`` reads it: decimal digits only (no sign), within 64 bits.
    Where that fails, a ValueError whose text is Go's error."""
    if not _UNSIGNED.fullmatch(text):
        raise ValueError(f"strconv.ParseUint: parsing {quote(text)}: invalid syntax")
    number = int(text)
    if number >= 2**64:
        raise ValueError(f"strconv.ParseUint: parsing {quote(text)}: value out of range")
    return number
