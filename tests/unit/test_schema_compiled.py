"""The compiled check (shared.schema.compiled): it never accepts what the full validator rejects, and it is used.

The full validator is the dialect validator the differential tier holds to kube-apiserver's CRD validation; the
compiled check only lets validation skip it for values it accepts.  So the property that matters is one-sided:
every value the compiled check accepts has no cause from the full validator.  The other side, that it accepts the
valid values writes carry, is what makes it worth having; the examples below check that too.
"""

from __future__ import annotations

import copy
import glob
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.schema import validation
from shared.schema.compiled import acceptor
from shared.schema.dialect import to_jsonschema

ROOT = Path(__file__).resolve().parents[2]

NULLABLE = {"type": "object", "properties": {
    "choice": {"type": "string", "nullable": True, "enum": ["x", "y"]},
    "count": {"type": "integer", "nullable": True, "minimum": 1},
    "either": {"nullable": True, "anyOf": [{"type": "string"}, {"type": "integer"}]},
    "strict": {"type": "string", "nullable": False},
    "together": {"nullable": True, "allOf": [{"type": "string"}]},
}}
INT_OR_STRING = {"type": "object", "properties": {
    "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}],
             "pattern": "^[0-9]+$"},
    "size": {"x-kubernetes-int-or-string": True},
    "maybe": {"x-kubernetes-int-or-string": True, "nullable": True},
    "bounded": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer", "minimum": 3}, {"type": "string"}]},
    "off": {"x-kubernetes-int-or-string": False, "anyOf": [{"type": "integer"}, {"type": "string"}]},
}}
BOUNDS = {"type": "object", "additionalProperties": False, "required": ["n"], "properties": {
    "n": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 10},
    "s": {"type": "string", "minLength": 2, "maxLength": 3, "pattern": "^[a-z]+$", "format": "hostname"},
    "l": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "boolean"}},
    "m": {"type": "object", "minProperties": 1, "maxProperties": 2, "additionalProperties": {"type": "integer"},
          "x-kubernetes-map-type": "atomic"},
    "o": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
    "no": {"not": {"type": "string"}},
    "k": {"const": "fixed"},
    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}}
#: Patterns Python's re reads otherwise than Go's regexp (and so the full validator, shared.patterns).
PATTERNS = {"type": "object", "properties": {
    "end": {"type": "string", "pattern": "^[0-9]+$"},
    "digits": {"type": "string", "pattern": "^\\d+$"},
    "word": {"type": "string", "pattern": "^\\w+$"},
    "space": {"type": "string", "pattern": "^\\s*$"},
    "posix": {"type": "string", "pattern": "^[[:alpha:]]+$"},
    "twice": {"allOf": [{"pattern": "^[0-9]+$"}, {"pattern": "^\\d+$"}]},
}}
#: Each holds one keyword the compiled check cannot keep; the full validator answers every value.
UNSUPPORTED = [
    {"type": "array", "uniqueItems": True},
    {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}},
    {"type": "object", "patternProperties": {"^a": {"type": "integer"}}},
    {"type": "number", "multipleOf": 0.1},
    {"type": "string", "pattern": "^(?!a$)"},
    {"enum": [1, 2]},
    {"const": 1},
    {"type": "object", "properties": {"a": True}},
    {"type": "object", "dependentRequired": {"a": ["b"]}},
    {"if": {"type": "string"}, "then": {"minLength": 1}},
]

ATOMS = st.sampled_from([
    None, True, False, 0, 1, -1, 1.0, 2.5, 3, 10, 10.5, 11, "", "a", "ab", "abc", "abcd", "A", "a\n", "ab\n", "12",
    "12\n", "x", "y", "fixed", "fixed\n", "10.0.0.0/16", "10.0.0.0/16\n", "eu-west-1", "é", [], {},
    "\u0661\u0662", " ", "\u00a0", "a:",
])


def _values(schema: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped after the schema, so most reach its keywords; any part may be an atom of the wrong type."""
    if not isinstance(schema, dict) or depth > 4:
        return ATOMS
    shaped: list[st.SearchStrategy[Any]] = [ATOMS]
    properties = schema.get("properties")
    if isinstance(properties, dict) or schema.get("type") == "object":
        known = {name: _values(sub, depth + 1) for name, sub in (properties or {}).items()}
        extra = st.dictionaries(st.sampled_from(["extra", "zz"]), _values(schema.get("additionalProperties"),
                                                                          depth + 1), max_size=2)
        shaped.append(st.builds(lambda a, b: {**b, **a}, st.fixed_dictionaries({}, optional=known), extra))
    if isinstance(schema.get("items"), dict) or schema.get("type") == "array":
        shaped.append(st.lists(_values(schema.get("items"), depth + 1), max_size=3))
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key) or []:
            shaped.append(_values(branch, depth + 1))
    return st.one_of(shaped)


def _samples() -> list[tuple[str, Any]]:
    files = glob.glob(str(ROOT / "deploy/samples/definitions/*.yaml"))
    files += glob.glob(str(ROOT / "tests/data/flux/definitions/*.yaml"))
    found = []
    for path in sorted(files):
        for doc in yaml.safe_load_all(Path(path).read_text()):
            text = ((doc or {}).get("spec") or {}).get("application", {}).get("openAPISchema")
            if text:
                found.append((doc["metadata"]["name"], json.loads(text)))
    return found


SCHEMAS = [("nullable", NULLABLE), ("int-or-string", INT_OR_STRING), ("bounds", BOUNDS), ("patterns", PATTERNS),
           *_samples()]


def _full_errors(schema: Any, value: Any) -> list[Any]:
    return list(validation._checks_for(schema).full.iter_errors(value))


@pytest.mark.parametrize(("name", "schema"), SCHEMAS, ids=[name for name, _ in SCHEMAS])
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_what_the_compiled_check_accepts_the_full_validator_accepts(name: str, schema: Any, data: Any) -> None:
    accepts = validation._checks_for(schema).accepts
    assert accepts is not None, f"{name}: no compiled check"
    value = data.draw(_values(schema))
    if accepts(value):
        assert _full_errors(schema, value) == [], f"{name}: the compiled check accepted {value!r}"


@pytest.mark.parametrize(("schema", "value"), [
    (NULLABLE, {"choice": None, "count": None, "either": None, "together": "t"}),
    (NULLABLE, {"choice": "x", "count": 2, "either": 3, "strict": "s"}),
    (INT_OR_STRING, {"port": 80, "size": "1Gi", "maybe": None, "bounded": 5, "off": "o"}),
    (INT_OR_STRING, {"port": "8080", "size": 3, "maybe": 1.0, "bounded": "b"}),
    (BOUNDS, {"n": 0.5, "s": "ab", "l": [True], "m": {"a": 1}, "o": 2.5, "no": 1, "k": "fixed", "free": {"a": [1]}}),
    (PATTERNS, {"end": "12", "digits": "12", "word": "ab_1", "space": " ", "posix": "abc", "twice": "7"}),
])
def test_the_compiled_check_accepts_valid_values(schema: Any, value: Any) -> None:
    assert _full_errors(schema, value) == []
    accepts = validation._checks_for(schema).accepts
    assert accepts is not None and accepts(value)


@pytest.mark.parametrize(("schema", "value"), [
    (NULLABLE, {"strict": None}),
    (NULLABLE, {"together": None}),
    (INT_OR_STRING, {"size": 1.5}),
    (INT_OR_STRING, {"size": None}),
    (INT_OR_STRING, {"bounded": 2}),
    (INT_OR_STRING, {"port": "80a"}),
    (BOUNDS, {"n": 0}),
    (BOUNDS, {"n": 1, "k": "other"}),
    (BOUNDS, {"n": 1, "extra": 1}),
    (BOUNDS, {"n": True}),
    (PATTERNS, {"end": "12\n"}),
    (PATTERNS, {"digits": "\u0661\u0662"}),
    (PATTERNS, {"posix": "a:"}),
    (PATTERNS, {"twice": "\u0661"}),
])
def test_values_the_full_validator_rejects_are_not_accepted(schema: Any, value: Any) -> None:
    assert _full_errors(schema, value) != []
    accepts = validation._checks_for(schema).accepts
    assert accepts is not None and not accepts(value)


@pytest.mark.parametrize("schema", UNSUPPORTED, ids=[next(iter(set(s) - {"type"})) for s in UNSUPPORTED])
def test_a_keyword_the_check_cannot_keep_leaves_the_schema_uncompiled(schema: Any) -> None:
    assert acceptor(to_jsonschema(schema)) is None


def test_every_sample_kind_has_a_compiled_check() -> None:
    """The samples are what the bench and the differential tier write: without a check they take the slow path."""
    names = [name for name, schema in _samples() if validation._checks_for(schema).accepts is None]
    assert len(_samples()) >= 5
    assert names == []


class _Counting:
    """The full validator, counting the values it is asked about."""

    def __init__(self, full: Any) -> None:
        self.full, self.asked = full, 0

    def iter_errors(self, value: Any) -> Any:
        self.asked += 1
        return self.full.iter_errors(value)


def test_a_valid_value_skips_the_full_validator_and_an_invalid_one_gets_its_causes() -> None:
    schema = copy.deepcopy(BOUNDS)
    counting = _Counting(validation._checks_for(schema).full)
    validation._CHECKS.put(schema, None, replace(validation._checks_for(schema), full=counting))

    assert validation.validate(schema, {"n": 1, "s": "abc"}) == []
    assert counting.asked == 0
    causes = validation.validate(schema, {"n": 1, "s": "ABC"})
    assert counting.asked == 1
    assert [c["field"] for c in causes] == ["spec.s"]
