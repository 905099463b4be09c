"""Go's encoding/json syntax errors for malformed documents (the texts of Go 1.26's ``json.Unmarshal``; the contract
tier compares the DELETE bodies among them with kube-apiserver's answers)."""

from __future__ import annotations

import json

import pytest

from shared.api.gojson import syntax_error

GO_ERRORS = [
    (b"abc", "invalid character 'a' looking for beginning of value"),
    (b"", "unexpected end of JSON input"),
    (b"  \n", "unexpected end of JSON input"),
    (b"{", "unexpected end of JSON input"),
    (b'"ab', "unexpected end of JSON input"),
    (b'{"a" 1}', "invalid character '1' after object key"),
    (b'{"a":1 "b":2}', "invalid character '\"' after object key:value pair"),
    (b'{"a":1,}', "invalid character '}' looking for beginning of object key string"),
    (b"{1:2}", "invalid character '1' looking for beginning of object key string"),
    (b"[1,]", "invalid character ']' looking for beginning of value"),
    (b"[1 2]", "invalid character '2' after array element"),
    (b'{"a":1}x', "invalid character 'x' after top-level value"),
    (b"01", "invalid character '1' after top-level value"),
    (b"tru", "invalid character ' ' in literal true (expecting 'e')"),
    (b"[fals]", "invalid character ']' in literal false (expecting 'e')"),
    (b"nUll", "invalid character 'U' in literal null (expecting 'u')"),
    (b"1.", "invalid character ' ' after decimal point in numeric literal"),
    (b"1.e5", "invalid character 'e' after decimal point in numeric literal"),
    (b"1e", "invalid character ' ' in exponent of numeric literal"),
    (b"1e+x", "invalid character 'x' in exponent of numeric literal"),
    (b"-", "invalid character ' ' in numeric literal"),
    (b"-a", "invalid character 'a' in numeric literal"),
    (b'"\\x"', "invalid character 'x' in string escape code"),
    (b'"\\u12"', "invalid character '\"' in \\u hexadecimal character escape"),
    (b'"a\tb"', "invalid character '\\t' in string literal"),
    (b'"a\x01b"', "invalid character '\\x01' in string literal"),
    (b"NaN", "invalid character 'N' looking for beginning of value"),
    (b"'a'", "invalid character '\\'' looking for beginning of value"),
    (b"\xef\xbb\xbf{}", "invalid character '\u00ef' looking for beginning of value"),
    (b"\x85", "invalid character '\\u0085' looking for beginning of value"),
    (b"\x7f", "invalid character '\\x7f' looking for beginning of value"),
    (b"[" * 10001, "invalid character '[' exceeded max depth"),
]


@pytest.mark.parametrize(("raw", "message"), GO_ERRORS)
def test_a_malformed_document_gets_gos_first_syntax_error(raw: bytes, message: str) -> None:
    assert syntax_error(raw) == message


@pytest.mark.parametrize("raw", [
    b"{}", b"[]", b"null", b" true ", b"-0.5e+3", b"0", b'"\\u00e9\\n"', b'{"a": [1, {"b": null}], "c": "d"}\n',
    b"[" * 10000 + b"]" * 10000, "\"caf\u00e9\"".encode(), b'"\xff"',
])
def test_a_valid_document_has_no_syntax_error(raw: bytes) -> None:
    assert syntax_error(raw) is None


def test_what_pythons_decoder_refuses_is_refused_and_what_only_python_reads_too() -> None:
    """Python's decoder may read what is left once Go's checks pass: it refuses nothing Go reads, and the words only
    Python reads (NaN, Infinity) are refused."""
    for raw in (b"[1,]", b"{,}", b"{'a': 1}", b"1 2", b"[01]", b"+1", b".5", b'"\\a"'):
        with pytest.raises(ValueError):
            json.loads(raw)
        assert syntax_error(raw) is not None, raw
    for raw in (b"NaN", b"Infinity", b"-Infinity", b"[1, NaN]"):
        json.loads(raw)
        assert syntax_error(raw) is not None, raw
