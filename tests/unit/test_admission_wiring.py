"""The pieces that wire shared.admission into the services, on their own (end to end against a CRD:
tests/integration/test_admission.py)."""

from __future__ import annotations

import json
from typing import Any

from shared.admission import AdmissionRequest, compile_schema, validate_with_schema_causes
from shared.admission.cluster import collect_warnings, warning_header
from shared.api import errors
from shared.api.rest import RequestContext, ResourceInfo, User, WriteOptions
from shared.service.acceptance import spec_rules, spec_schema_problem

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 10", "message": "too big"}]},
        "tier": {"type": "string", "enum": ["a", "b"]},
    },
}
RULES = compile_schema(SCHEMA)[0]


def _type_error(field: str) -> dict[str, str]:
    return errors.field_cause(field, "Invalid value: \"x\": must be of type integer", "FieldValueTypeInvalid")


def test_rules_run_after_a_clean_schema_check() -> None:
    causes = validate_with_schema_causes(RULES, [], {"size": 12})
    assert causes == [errors.field_cause("spec.size", "Invalid value: 12: too big")]


def test_a_type_or_enum_error_keeps_the_rules_from_running_as_kube_does() -> None:
    for blocking in (_type_error("spec.size"),
                     errors.field_cause("spec.tier", 'Unsupported value: "c": supported values: "a", "b"',
                                        "FieldValueNotSupported")):
        causes = validate_with_schema_causes(RULES, [blocking], {"size": 12})
        assert causes[0] == blocking and len(causes) == 2
        assert causes[1]["field"] == "<nil>" and "some validation rules were not checked" in causes[1]["message"]
    # Without rules there is nothing that was not checked.
    assert validate_with_schema_causes(compile_schema({"type": "object"})[0], [_type_error("spec.size")],
                                       {}) == [_type_error("spec.size")]


def test_required_and_too_long_causes_and_metadata_ones_block_the_rules_too() -> None:
    for blocking in (errors.field_cause("spec.tier", "Required value", "FieldValueRequired"),
                     errors.field_cause("spec.tier", "Too long: may not be more than 3 bytes", "FieldValueTooLong"),
                     errors.field_cause("spec.tier", "Too many: 4: must have at most 3 items", "FieldValueTooMany")):
        causes = validate_with_schema_causes(RULES, [blocking], {"size": 12})
        assert [c["field"] for c in causes] == ["spec.tier", "<nil>"]
    # A missing name blocks them as well; only the schema's causes and the note are returned.
    nameless = errors.field_cause("metadata.name", "Required value: name is required", "FieldValueRequired")
    assert [c["field"] for c in validate_with_schema_causes(RULES, [], {"size": 12}, prior=[nameless])] == ["<nil>"]
    # An invalid name does not (a FieldValueInvalid cause): the rules run.
    bad_name = errors.field_cause("metadata.name", 'Invalid value: "A": a DNS-1035 label ...')
    assert [c["field"] for c in validate_with_schema_causes(RULES, [], {"size": 12}, prior=[bad_name])] == [
        "spec.size"]


def test_an_unknown_field_does_not_block_the_rules() -> None:
    unknown = errors.field_cause("spec.extra", 'unknown field "extra"', "FieldValueNotSupported")
    assert [c["field"] for c in validate_with_schema_causes(RULES, [unknown], {"size": 12})] == [
        "spec.extra", "spec.size"]


def test_invalid_aggregates_several_causes_as_kube() -> None:
    one = errors.field_cause("spec.a", "Required value")
    two = errors.field_cause("spec.b", "Invalid value: 1: no")
    assert errors.invalid("g.io", "K", "n", [one]).message == 'K.g.io "n" is invalid: spec.a: Required value'
    assert errors.invalid("g.io", "K", "n", [one, two, one]).message == (
        'K.g.io "n" is invalid: [spec.a: Required value, spec.b: Invalid value: 1: no]')


def test_a_rule_that_does_not_compile_is_a_schema_problem_with_its_path() -> None:
    broken = json.dumps({"type": "object", "properties": {"size": {
        "type": "string", "x-kubernetes-validations": [{"rule": "self.noSuchFunction()"}]}}})
    problem = spec_schema_problem(broken) or ""
    assert problem.startswith("openAPISchema.properties[size].x-kubernetes-validations[0].rule: Invalid value: ")
    assert spec_rules(broken).empty()


def test_rules_are_compiled_once_per_schema_text() -> None:
    text = json.dumps(SCHEMA)
    assert spec_schema_problem(text) is None
    assert spec_rules(text) is spec_rules(json.dumps(SCHEMA)) and not spec_rules(text).empty()


def test_a_write_request_carries_kubes_options() -> None:
    info = ResourceInfo("apps.cozystack.io", "v1alpha1", "MariaDB", "mariadbs", "mariadb", {})
    ctx = RequestContext(User("alice"))
    request = AdmissionRequest.for_write("UPDATE", info, ctx, "tenant", "db", WriteOptions(True, "kubectl"),
                                         {"spec": {}}, {"spec": {}})
    assert (request.resource, request.namespace, request.name, request.kind) == ("mariadbs", "tenant", "db",
                                                                                 "MariaDB")
    assert request.as_cel()["options"] == {"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions",
                                           "dryRun": ["All"], "fieldManager": "kubectl"}
    assert request.as_cel()["dryRun"] is True
    deleted = AdmissionRequest.for_write("DELETE", info, ctx, "tenant", "db", WriteOptions(), old={"spec": {}})
    assert deleted.options == {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"} and deleted.object is None
    orphaning = WriteOptions(dry_run=True, deletion={"propagationPolicy": "Orphan", "gracePeriodSeconds": 0})
    orphaned = AdmissionRequest.for_write("DELETE", info, ctx, "tenant", "db", orphaning, old={"spec": {}})
    assert orphaned.as_cel()["options"] == {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions",
                                            "propagationPolicy": "Orphan", "gracePeriodSeconds": 0, "dryRun": ["All"]}


def test_warning_header_quotes_as_kube() -> None:
    header = warning_header('size "xl" is \\ discouraged')
    assert header == '299 - "size \\"xl\\" is \\\\ discouraged"'
    assert json.loads(header.split(" ", 2)[2]) == 'size "xl" is \\ discouraged'


def test_warnings_are_collected_per_request_only() -> None:
    with collect_warnings() as outer:
        with collect_warnings() as inner:
            inner.append("a")
        assert outer == []
