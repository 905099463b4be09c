"""shared.admission on its own: what the oracle (tests/integration/test_cel_oracle.py) cannot reach
on a real CRD -- kube-apiserver refuses those rules statically -- or does not need a server for."""

from __future__ import annotations

import time
from typing import Any

import pytest

from shared.admission import compile_schema, validate
from shared.admission.expressions import CompileError, compile_expression, evaluate
from shared.admission.fieldpaths import Child, Key, resolve_rule_field_path
from shared.admission.values import escape_property, to_cel

SELF = frozenset({"self"})


def _rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def _eval(source: str, value: Any = None) -> Any:
    return evaluate(compile_expression(source, SELF), {"self": value})


def test_a_runaway_comprehension_is_stopped_and_later_rules_do_not_run() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "integer"},
                      **_rules({"rule": "self.all(x, self.all(y, x + y >= 0))"})},
            "name": {"type": "string", **_rules({"rule": "self == 'ok'"})},
        },
    }
    compiled, errors = compile_schema(schema)
    assert errors == []
    started = time.monotonic()
    causes = validate(compiled, {"items": list(range(5000)), "name": "not ok"})
    assert time.monotonic() - started < 2
    assert [c["field"] for c in causes] == ["spec.items"]
    assert "actual cost limit exceeded" in causes[0]["message"]
    assert "no further validation rules will be run" in causes[0]["message"]


def test_kubernetes_list_and_regex_functions() -> None:
    assert _eval("self.isSorted()", [1, 2, 2]) is True
    assert _eval("self.isSorted()", ["b", "a"]) is False
    assert _eval("self.sum()", [1, 2, 3]) == 6
    assert _eval("self.sum()", [0.5, 1.0]) == 1.5
    assert _eval("[].sum()") == 0
    assert _eval("self.min()", [3, 1, 2]) == 1
    assert _eval("self.max()", [3, 1, 2]) == 3
    assert _eval("'abc 123 def 456'.find('[0-9]+')") == "123"
    assert _eval("'abc'.find('[0-9]+')") == ""
    assert _eval("'a1b22c333'.findAll('[0-9]+')") == ["1", "22", "333"]
    assert _eval("'a1b22c333'.findAll('[0-9]+', 2)") == ["1", "22"]
    assert _eval("isQuantity('1Gi') && isQuantity('500m') && isQuantity('1e3') && !isQuantity('1 Gi')") is True


def test_min_of_an_empty_list_fails_the_rule_with_an_evaluation_error() -> None:
    compiled, _ = compile_schema({"type": "array", "items": {"type": "integer"}, **_rules({"rule": "self.min() > 0"})})
    causes = validate(compiled, [])
    assert causes[0]["message"] == 'Invalid value: "array": min called on empty list evaluating rule: self.min() > 0'


def test_extensions_from_the_runtime() -> None:
    assert _eval("self.lowerAscii().split('-').size()", "A-B-C") == 3
    assert _eval("'%s/%d'.format(['a', 1])") == "a/1"
    assert _eval("cel.bind(n, self.size(), n * n)", "abc") == 9
    assert _eval("math.greatest(1, 5, 3)") == 5
    assert _eval("base64.encode(b'hi')") == "aGk="


def test_compile_errors_carry_the_schema_path_and_the_compiler_message() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "string", **_rules({"rule": "self.noSuchFunction()"}, {"rule": "self.size()"})},
            "b": {"type": "string", **_rules({"rule": "true", "reason": "Nope"})},
            "c": {"type": "string", **_rules({"rule": "true", "message": "two\nlines"})},
            "d": {"type": "string", **_rules({"rule": "self == 'x'", "messageExpression": "1 + 1"})},
        },
    }
    _, errors = compile_schema(schema, base="root")
    by_path = {e.path: e.message for e in errors}
    assert set(by_path) == {
        "root.properties[a].x-kubernetes-validations[0].rule",
        "root.properties[a].x-kubernetes-validations[1].rule",
        "root.properties[b].x-kubernetes-validations[0].reason",
        "root.properties[c].x-kubernetes-validations[0].message",
        "root.properties[d].x-kubernetes-validations[0].messageExpression",
    }
    assert "undeclared reference to 'noSuchFunction'" in by_path["root.properties[a].x-kubernetes-validations[0].rule"]
    assert "must evaluate to a bool" in by_path["root.properties[a].x-kubernetes-validations[1].rule"]


def test_compile_error_text_points_into_the_rule_as_written() -> None:
    with pytest.raises(CompileError, match=r"<input>:1:8"):
        compile_expression("self ==", SELF)


def test_optional_old_self_is_empty_on_create_and_outside_correlation() -> None:
    schema = {"type": "string", **_rules({
        "rule": "oldSelf.hasValue() ? self != oldSelf.value() + '!' : self != 'first'",
        "optionalOldSelf": True,
    })}
    compiled, errors = compile_schema(schema)
    assert errors == []
    assert validate(compiled, "first")
    assert validate(compiled, "ok") == []
    assert validate(compiled, "a!", "a")
    assert validate(compiled, "first", "a") == []


def test_transition_rules_skip_create_and_uncorrelated_map_entries() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer", **_rules({"rule": "self >= oldSelf"})}}
    compiled, _ = compile_schema(schema)
    assert validate(compiled, {"a": 1}) == []
    assert [c["field"] for c in validate(compiled, {"a": 1, "b": 0}, {"a": 2})] == ["spec[a]"]


def test_ratcheting_keeps_an_unchanged_invalid_value() -> None:
    schema = {"type": "object", "properties": {
        "a": {"type": "string", **_rules({"rule": "self.startsWith('x')"})},
        "b": {"type": "string"},
    }}
    compiled, _ = compile_schema(schema)
    assert validate(compiled, {"a": "legacy", "b": "2"}, {"a": "legacy", "b": "1"}) == []
    assert validate(compiled, {"a": "legacy2"}, {"a": "legacy"})


def test_message_expression_falls_back_to_the_message_when_it_yields_no_usable_text() -> None:
    for expression in ("''", "'two\\nlines'", "self.missing"):
        schema = {"type": "object", **_rules({"rule": "false", "message": "fixed", "messageExpression": expression})}
        compiled, errors = compile_schema(schema)
        assert errors == []
        assert validate(compiled, {})[0]["message"] == "Invalid value: fixed", expression


def test_reasons_give_kube_apiserver_field_errors() -> None:
    def message(reason: str) -> str:
        compiled, _ = compile_schema({"type": "string", **_rules({"rule": "false", "reason": reason, "message": "m"})})
        cause = validate(compiled, "v")[0]
        assert cause["reason"] == reason
        return cause["message"]

    assert message("FieldValueInvalid") == 'Invalid value: "v": m'
    assert message("FieldValueForbidden") == "Forbidden: m"
    assert message("FieldValueRequired") == "Required value: m"
    assert message("FieldValueDuplicate") == 'Duplicate value: "v"'


def test_property_names_are_escaped_and_numbers_are_doubles() -> None:
    assert escape_property("foo-bar") == "foo__dash__bar"
    assert escape_property("a.b/c") == "a__dot__b__slash__c"
    assert escape_property("__x") == "__underscores__x"
    assert escape_property("namespace") == "__namespace__"
    assert escape_property("1abc") is None
    schema = {"type": "object", "properties": {"my-ratio": {"type": "number"}, "m": {
        "type": "object", "additionalProperties": {"type": "integer"}}}}
    assert to_cel(schema, {"my-ratio": 1, "m": {"k-1": 2}}) == {"my__dash__ratio": 1.0, "m": {"k-1": 2}}
    assert isinstance(to_cel(schema, {"my-ratio": 1})["my__dash__ratio"], float)


def test_rule_field_paths_resolve_against_the_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
                                               "m": {"type": "object", "additionalProperties": {"type": "string"}}}}
    assert resolve_rule_field_path(schema, ".a['b.c']") == (Child("a"), Child("b.c"))
    assert resolve_rule_field_path(schema, ".m['k']") == (Child("m"), Key("k"))
    with pytest.raises(ValueError):
        resolve_rule_field_path(schema, ".nope")
    with pytest.raises(ValueError):
        resolve_rule_field_path(schema, "a")


def test_the_sample_postgres_definition_compiles_and_keeps_storage_class_immutable() -> None:
    import json

    from tests.kube import load_fixture

    definition = load_fixture("postgres.yaml")
    schema = json.loads(definition["spec"]["application"]["openAPISchema"])
    compiled, errors = compile_schema(schema)
    assert errors == []
    assert validate(compiled, {"storageClass": "fast", "replicas": 2}) == []
    assert validate(compiled, {"storageClass": "fast", "replicas": 3}, {"storageClass": "fast", "replicas": 2}) == []
    assert validate(compiled, {"storageClass": "slow"}, {"storageClass": "fast"}) == [{
        "reason": "FieldValueInvalid", "field": "spec.storageClass",
        "message": 'Invalid value: "slow": storageClass cannot be changed'}]


def test_the_rules_of_one_request_share_a_budget() -> None:
    schema = {"type": "array", "items": {"type": "string", **_rules({"rule": "self.matches('^[a-z]+$')"})}}
    compiled, _ = compile_schema(schema)
    assert validate(compiled, ["abc"] * 100) == []
    causes = validate(compiled, ["abc"] * 20000, budget_seconds=0.01)
    assert len(causes) == 1
    assert causes[0]["message"] == ('Invalid value: "string": validation failed due to running out of cost budget, '
                                    "no further validation rules will be run")
