"""Regular expressions as Go reads them (shared.patterns), and the hand-written name rules' anchors.

kube-apiserver matches a CRD's ``pattern`` and checks names with Go's ``regexp``; Python's ``re`` differs in ways
a request can reach (a final newline before ``$``, Unicode ``\\d``/``\\w``/``\\s``, POSIX classes, lookarounds).
The rows below are Go's answers; tests/integration/test_patterns.py asks kube-apiserver the same on a CRD.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import patterns
from shared.admission.library import _is_quantity
from shared.api import ownership
from shared.api.discovery import sort_versions
from shared.api.durations import go_duration
from shared.api.labels import label_value_errors
from shared.api.names import dns1035_label_error, dns1123_label_error, dns1123_subdomain_error
from shared.schema.validation import schema_error, validate

#: (pattern, text, whether Go's regexp.MatchString matches)
MATCHES = [
    ("^[0-9]+$", "8080", True),
    ("^[0-9]+$", "8080\n", False),  # Go's $ is the end of the text, without (?m)
    ("(?m)^[0-9]+$", "8080\nx", True),
    ("^\\d+$", "12", True),
    ("^\\d+$", "\u0661\u0662", False),  # Perl classes are ASCII in Go
    ("^\\w+$", "\u00e9", False),
    ("^\\s$", "\u00a0", False),
    ("^[[:alpha:]]+$", "abc", True),  # a POSIX class, not a set of ':', 'a', 'l', ...
    ("^[[:alpha:]]+$", "a:", False),
    ("^\\pL+\\z", "\u00e9t\u00e9", True),  # Unicode classes and \z, which Python's re does not know
    ("b", "abc", True),  # unanchored: a pattern matches anywhere
]


@pytest.mark.parametrize(("pattern", "text", "matches"), MATCHES)
def test_a_pattern_matches_as_in_go(pattern: str, text: str, matches: bool) -> None:
    assert patterns.search(pattern, text) is matches


@pytest.mark.parametrize(("pattern", "reason"), [
    ("^(?!tmp)", "invalid perl operator"),
    ("(?<=a)b", "invalid perl operator"),
    ("(a)\\1", "invalid escape sequence"),
    ("a{1001}", "invalid repetition size"),
    ("\\C", "invalid escape sequence"),
    ("(unclosed", "missing )"),
])
def test_a_pattern_go_refuses_is_refused_with_its_reason(pattern: str, reason: str) -> None:
    error = patterns.pattern_error(pattern)
    assert error is not None and reason in error and repr(pattern) in error
    with pytest.raises(ValueError, match="error parsing regexp"):
        patterns.compiled(pattern)


@pytest.mark.parametrize("pattern", ["\\\\C", "[[:alpha:]]", "\\pL\\z", "(?P<n>a)", "\\Q.*\\E", "a{1000}"])
def test_a_pattern_go_accepts_compiles(pattern: str) -> None:
    assert patterns.pattern_error(pattern) is None


def test_a_compiled_pattern_is_kept() -> None:
    assert patterns.compiled("^kept[0-9]$") is patterns.compiled("^kept[0-9]$")


# --------------------------------------------------------------------------- in a schema


def test_schema_patterns_are_go_regular_expressions() -> None:
    error = schema_error({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?!tmp)"}}})
    assert error is not None and "properties/a/pattern" in error and "invalid perl operator" in error
    error = schema_error({"type": "object", "patternProperties": {"(?=x)": {}}})
    assert error is not None and "invalid perl operator" in error
    assert schema_error({"type": "string", "pattern": "^\\pL+\\z"}) is None
    assert schema_error({"type": "string", "pattern": "^[[:alpha:]]+$"}) is None


SCHEMA: Any = {"type": "object", "additionalProperties": False,
               "properties": {"port": {"type": "string", "pattern": "^[0-9]+$"},
                              "digits": {"type": "string", "pattern": "^\\d+$"}},
               "patternProperties": {"^x-[a-z]+$": {"type": "integer"}}}


@pytest.mark.parametrize(("spec", "fields"), [
    ({"port": "8080", "digits": "12", "x-a": 1}, []),
    ({"port": "8080\n"}, ["spec.port"]),
    ({"digits": "\u0661\u0662"}, ["spec.digits"]),
    ({"x-a\n": 1}, ["spec.x-a\n"]),  # no patternProperties key: unknown
    ({"x-a": "one"}, ["spec.x-a"]),  # a patternProperties key: its schema applies
])
def test_values_are_validated_with_go_patterns(spec: Any, fields: list[str]) -> None:
    assert [cause["field"] for cause in validate(SCHEMA, spec)] == fields


# --------------------------------------------------------------------------- the rules written with Python's re


@pytest.mark.parametrize("check", [
    lambda text: dns1035_label_error(text) is None,
    lambda text: dns1123_label_error(text) is None,
    lambda text: dns1123_subdomain_error(text) is None,
    lambda text: ownership.qualified_name_errors(text) == [],
    lambda text: label_value_errors(text) == [],
], ids=["dns1035", "dns1123-label", "dns1123-subdomain", "qualified-name", "label-value"])
def test_a_name_rule_refuses_a_final_newline(check: Any) -> None:
    assert check("abc")
    assert not check("abc\n")


def test_other_hand_written_rules_refuse_a_final_newline_and_non_ascii_digits() -> None:
    assert go_duration("10m") == "10m0s"
    with pytest.raises(ValueError):
        go_duration("10m\n")
    assert _is_quantity("12Gi") and not _is_quantity("\u0661\u0662Gi")
    # A version that is no Kubernetes version sorts last, by name.
    assert sort_versions(["v1\n", "v1alpha1", "v\u0662"]) == ["v1alpha1", "v1\n", "v\u0662"]


# --------------------------------------------------------------------------- Python's re where it means the same


#: Pieces of patterns: what _as_python rewrites or passes on, and what it must leave to RE2.
PIECES = ["a", "b", "0", "9", "é", ".", "^", "$", "\\.", "\\$", "\\-", "\\n", "\\d", "\\w", "\\s", "\\b", "\\z",
          "\\pL", "[a-c]", "[^0-9]", "[$]", "[[:alpha:]]", "[]a]", "[a-]", "(", ")", "(?:", "(?i)", "(?m)", "|",
          "*", "+", "?", "*?", "{2}", "{1,}", "{0,2}", "{,2}", "{", "}"]
TEXT = st.text(st.sampled_from(["a", "b", "c", "0", "9", "\u0661", "é", "\n", ".", "$", "-", " ", "\u00a0", ":"]),
               max_size=6)


@settings(max_examples=3000, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=6), texts=st.lists(TEXT, min_size=1, max_size=4))
def test_the_fast_path_answers_as_re2(pieces: list[str], texts: list[str]) -> None:
    """Whatever ``matcher`` hands to Python's re matches exactly where RE2 (Go's reading) does."""
    pattern = "".join(pieces)
    if patterns.pattern_error(pattern) is not None:
        return
    search = patterns.matcher(pattern)
    for text in texts:
        assert (search(text) is not None) is (patterns.compiled(pattern).search(text) is not None), (pattern, text)


@pytest.mark.parametrize(("pattern", "python"), [
    ("^[0-9]+$", True), ("^([0-9]{1,3}\\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])$", True), ("[$]x", True),
    ("^\\d+$", False), ("^[[:alpha:]]$", False), ("(?i)a", False), ("a{,2}", False), ("\\pL", False),
])
def test_plain_patterns_take_the_fast_path(pattern: str, python: bool) -> None:
    assert (patterns._as_python(pattern) is not None) is python
