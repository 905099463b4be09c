"""shared.api.goformat: bad values printed as Go prints them (``strconv.Quote``, ``json.Marshal``)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api import goformat


@pytest.mark.parametrize(("text", "quoted"), [
    ("abc", '"abc"'),
    ("\u0661\u0662", '"\u0661\u0662"'),  # printable: as it is (json.dumps writes \\u0661)
    ("\u00e9t\u00e9", '"\u00e9t\u00e9"'),
    ('say "hi" \\ bye', '"say \\"hi\\" \\\\ bye"'),
    ("a\nb\tc\r\a\b\f\v", '"a\\nb\\tc\\r\\a\\b\\f\\v"'),
    ("\x00\x1f\x7f", '"\\x00\\x1f\\x7f"'),  # json.dumps writes \\u0000 and leaves DEL as it is
    ("\u00a0\u2028\u200b", '"\\u00a0\\u2028\\u200b"'),  # separators and format characters are not printable
    ("\U000e0001", '"\\U000e0001"'),
    ("<&>", '"<&>"'),
])
def test_quote_is_strconv_quote(text: str, quoted: str) -> None:
    assert goformat.quote(text) == quoted


@pytest.mark.parametrize(("value", "marshalled"), [
    ({"b": 1, "a": ["x", None, True]}, '{"a":["x",null,true],"b":1}'),
    (["<a&b>", "\u00e9", "\u2028"], '["\\u003ca\\u0026b\\u003e","\u00e9","\\u2028"]'),
])
def test_marshal_is_encoding_json(value: Any, marshalled: str) -> None:
    assert goformat.marshal(value) == marshalled


def test_marshal_keeps_a_structs_order_when_asked() -> None:
    assert goformat.marshal({"name": "n", "kind": "k"}, sort_keys=False) == '{"name":"n","kind":"k"}'


@pytest.mark.parametrize(("value", "shown"), [
    ("x\n", '"x\\n"'), (True, "true"), (3, "3"), (["a"], '["a"]'), ({"k": "<"}, '{"k":"\\u003c"}'), (None, "null"),
])
def test_a_bad_value_is_printed_as_error_body_prints_it(value: Any, shown: str) -> None:
    assert goformat.bad_value(value) == shown


@pytest.mark.parametrize(("value", "shown"), [
    (10.0, "10"), (2.5, "2.5"), (1e6, "1e+06"), (1234567.5, "1.2345675e+06"), (100000.0, "100000"),
    (0.0001, "0.0001"), (1e-05, "1e-05"), (-3.25, "-3.25"), (1e21, "1e+21"), (0.0, "0"), (-0.0, "-0"),
    (5e-324, "5e-324"),
])
def test_a_float_is_printed_as_go_prints_a_float64(value: float, shown: str) -> None:
    assert goformat.float_value(value) == shown
    assert goformat.bad_value(value) == shown


@pytest.mark.parametrize(("text", "number"), [("0", 0), ("00", 0), ("42", 42), (str(2**64 - 1), 2**64 - 1)])
def test_parse_uint64_reads_what_strconv_parseuint_reads(text: str, number: int) -> None:
    assert goformat.parse_uint64(text) == number


@pytest.mark.parametrize(("text", "error"), [
    ("abc", 'strconv.ParseUint: parsing "abc": invalid syntax'),
    ("-1", 'strconv.ParseUint: parsing "-1": invalid syntax'),
    ("+1", 'strconv.ParseUint: parsing "+1": invalid syntax'),
    ("1.5", 'strconv.ParseUint: parsing "1.5": invalid syntax'),
    ("", 'strconv.ParseUint: parsing "": invalid syntax'),
    (str(2**64), f'strconv.ParseUint: parsing "{2**64}": value out of range'),
])
def test_parse_uint64_refuses_in_go_s_words(text: str, error: str) -> None:
    with pytest.raises(ValueError) as caught:
        goformat.parse_uint64(text)
    assert str(caught.value) == error
