"""The oracle for ``shared.admission``: kube-apiserver enforcing the same rules on a CRD.

A CRD whose ``spec`` schema carries ``x-kubernetes-validations`` of every kind a definition can
carry is installed on the real control plane. Each scenario sends a sequence of creates and updates
to it, and feeds the same values to :func:`shared.admission.validate` (create: the new spec; update:
the new spec and the stored one). Allow/deny, the code and the causes (reason, field, message) must
agree. Rules that do not compile must be refused with the same schema paths.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shared.admission import compile_schema, validate
from shared.admission.rules import CompiledSchema
from shared.api.errors import Cause
from tests.kube import Api, wait_for

pytestmark = pytest.mark.integration

GROUP = "oracle.agl.test"
PLURAL = "celoracles"
NAMESPACE = "default"
#: Where kube-apiserver reports a rule of a CRD's spec schema.
SCHEMA_BASE = "spec.validation.openAPIV3Schema.properties[spec]"


def _rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


SPEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        # cozystack's MariaDB definition: storageClass is immutable.
        "storageClass": {"type": "string", **_rules({"rule": "self == oldSelf", "message": "Value is immutable"})},
        "name": {"type": "string", "maxLength": 30, **_rules({
            "rule": "self.lowerAscii() == self",
            "messageExpression": "'name ' + self + ' must be lower case'",
        })},
        "app-name": {"type": "string"},
        "replicas": {"type": "integer"},
        "maxReplicas": {"type": "integer"},
        "ratio": {"type": "number", **_rules({"rule": "self * 2.0 <= 1.0"})},
        "tags": {
            "type": "array",
            "maxItems": 10,
            "items": {"type": "string", "maxLength": 20,
                      **_rules({"rule": "self.startsWith('t-')", "message": "tags start with t-"})},
            **_rules({"rule": "self.all(x, self.exists_one(y, y == x))", "reason": "FieldValueDuplicate"}),
        },
        "sorted": {"type": "array", "maxItems": 10, "items": {"type": "integer"},
                   **_rules({"rule": "self.isSorted()", "message": "must be sorted"})},
        "version": {"type": "string", **_rules({
            "rule": "!oldSelf.hasValue() || self >= oldSelf.value()",
            "optionalOldSelf": True,
            "message": "version may not go back",
        })},
        "since": {"type": "string", "format": "date-time", **_rules(
            {"rule": "self > timestamp('2020-01-01T00:00:00Z')", "message": "too old"},
            {"rule": "self >= oldSelf", "message": "since may not go back"},
        )},
        "window": {"type": "string", "format": "duration", "maxLength": 20, **_rules(
            {"rule": "self <= duration('1h')", "message": "window is over an hour"},
        )},
        "zones": {"type": "array", "maxItems": 5, "x-kubernetes-list-type": "set",
                  "items": {"type": "string", "maxLength": 10},
                  **_rules({"rule": "self == oldSelf", "message": "zones are immutable"})},
        "ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "maxItems": 5,
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string", "maxLength": 10}, "port": {"type": "integer"}},
                **_rules({"rule": "self.port >= oldSelf.port", "message": "port may not decrease"}),
            },
        },
        "limits": {
            "type": "object",
            "maxProperties": 10,
            "additionalProperties": {"type": "integer", **_rules({
                "rule": "self >= 0", "reason": "FieldValueForbidden", "message": "must not be negative",
            })},
        },
        "backup": {
            "type": "object",
            "properties": {
                "schedule": {"type": "string", **_rules({
                    "rule": "self.find('[0-9]+') != ''", "message": "schedule needs a number",
                })},
                "retention": {"type": "integer", **_rules({
                    "rule": "self >= oldSelf", "message": "retention may only grow",
                })},
            },
        },
    },
    **_rules(
        {
            "rule": "!has(self.replicas) || !has(self.maxReplicas) || self.replicas <= self.maxReplicas",
            "messageExpression": "'replicas of ' + self.name + ' exceed maxReplicas'",
            "reason": "FieldValueForbidden",
            "fieldPath": ".replicas",
        },
        {"rule": "!has(self.backup) || has(self.backup.schedule)", "reason": "FieldValueRequired",
         "fieldPath": ".backup", "message": "backup needs a schedule"},
        {"rule": "!has(self.app__dash__name) || self.app__dash__name != 'x'", "message": "app-name x is reserved"},
        {"rule": "self.name.size() <= 20"},
    ),
}


def _crd(plural: str, spec_schema: dict[str, Any]) -> dict[str, Any]:
    kind = plural.capitalize().rstrip("s")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural.rstrip("s"), "kind": kind, "listKind": f"{kind}List"},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}},
            }],
        },
    }


@pytest.fixture(scope="module")
def oracle(api: Api) -> Iterator[Api]:
    status, body = api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                               _crd(PLURAL, SPEC_SCHEMA))
    assert status == 201, body.get("message")

    def established() -> bool:
        _, crd = api.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}")
        conditions = crd.get("status", {}).get("conditions", [])
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for(established, "the oracle CRD to be established")
    # The resource can answer a moment after Established; a list shows it serves.
    wait_for(lambda: api.request("GET", _collection())[0] == 200, "the oracle resource to serve")
    yield api
    api.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}")


@pytest.fixture(scope="module")
def compiled() -> CompiledSchema:
    schema, errors = compile_schema(SPEC_SCHEMA)
    assert errors == []
    return schema


def _collection() -> str:
    return f"/apis/{GROUP}/v1/namespaces/{NAMESPACE}/{PLURAL}"


def _key(cause: Cause) -> tuple[str, str, str]:
    return cause.get("reason", ""), cause.get("field", ""), cause.get("message", "")


class Sequence:
    """One object driven through creates and updates on the CRD and through the evaluator at once."""

    def __init__(self, api: Api, compiled: CompiledSchema) -> None:
        self.api = api
        self.compiled = compiled
        self.name = f"o-{uuid.uuid4().hex[:8]}"
        self.stored: dict[str, Any] | None = None

    def send(self, spec: dict[str, Any]) -> list[Cause]:
        """Create (first call) or update the object with ``spec``; assert both sides agree and return
        kube-apiserver's causes ([] when it accepted)."""
        body: dict[str, Any] = {"apiVersion": f"{GROUP}/v1", "kind": "Celoracle",
                                "metadata": {"name": self.name, "namespace": NAMESPACE}, "spec": spec}
        old_spec = self.stored["spec"] if self.stored else None
        if self.stored is None:
            status, answer = self.api.request("POST", _collection(), body)
        else:
            body["metadata"]["resourceVersion"] = self.stored["metadata"]["resourceVersion"]
            status, answer = self.api.request("PUT", f"{_collection()}/{self.name}", body)
        ours = validate(self.compiled, copy.deepcopy(spec), copy.deepcopy(old_spec))
        if status in (200, 201):
            assert ours == [], f"kube-apiserver accepted {spec} (old {old_spec}); we deny: {ours}"
            self.stored = answer
            return []
        assert status == 422 and answer["reason"] == "Invalid", answer
        theirs = answer["details"]["causes"]
        assert sorted(map(_key, ours)) == sorted(map(_key, theirs)), f"spec {spec} (old {old_spec})"
        return list(theirs)


@pytest.fixture
def sequence(oracle: Api, compiled: CompiledSchema) -> Sequence:
    return Sequence(oracle, compiled)


def test_immutable_storage_class_as_in_mariadb(sequence: Sequence) -> None:
    assert sequence.send({"name": "db", "storageClass": "fast"}) == []
    denied = sequence.send({"name": "db", "storageClass": "slow"})
    assert [_key(c) for c in denied] == [
        ("FieldValueInvalid", "spec.storageClass", 'Invalid value: "slow": Value is immutable')]
    assert sequence.send({"name": "db", "storageClass": "fast", "replicas": 1}) == []


def test_cross_field_rule_with_message_expression_reason_and_field_path(sequence: Sequence) -> None:
    denied = sequence.send({"name": "db", "replicas": 5, "maxReplicas": 3})
    assert [_key(c) for c in denied] == [
        ("FieldValueForbidden", "spec.replicas", "Forbidden: replicas of db exceed maxReplicas")]
    assert sequence.send({"name": "db", "replicas": 3, "maxReplicas": 3}) == []


def test_required_reason_on_a_nested_field_path(sequence: Sequence) -> None:
    assert sequence.send({"name": "db", "backup": {"retention": 1}})
    assert sequence.send({"name": "db", "backup": {"schedule": "daily"}})
    assert sequence.send({"name": "db", "backup": {"schedule": "every 6h"}}) == []


def test_list_item_rule_and_duplicate_reason(sequence: Sequence) -> None:
    denied = sequence.send({"name": "db", "tags": ["t-a", "b"]})
    assert [c["field"] for c in denied] == ["spec.tags[1]"]
    assert sequence.send({"name": "db", "tags": ["t-a", "t-a"]})
    assert sequence.send({"name": "db", "tags": ["t-a", "t-b"]}) == []


def test_map_value_rule(sequence: Sequence) -> None:
    assert sequence.send({"name": "db", "limits": {"cpu": 2, "memory": -1}})
    assert sequence.send({"name": "db", "limits": {"cpu": 2}}) == []


def test_transition_rule_on_a_nested_optional_field(sequence: Sequence) -> None:
    assert sequence.send({"name": "db"}) == []
    # No old value at spec.backup.retention yet: the transition rule does not run.
    assert sequence.send({"name": "db", "backup": {"schedule": "1h", "retention": 5}}) == []
    assert sequence.send({"name": "db", "backup": {"schedule": "1h", "retention": 3}})
    assert sequence.send({"name": "db", "backup": {"schedule": "1h", "retention": 7}}) == []


def test_transition_rule_on_map_list_items_correlates_by_key(sequence: Sequence) -> None:
    assert sequence.send({"name": "db", "ports": [{"name": "http", "port": 80}]}) == []
    assert sequence.send({"name": "db", "ports": [{"name": "http", "port": 70}]})
    # A new key has no old item: its rule does not run; the old item moved to index 1 still does.
    assert sequence.send({"name": "db", "ports": [{"name": "https", "port": 1}, {"name": "http", "port": 80}]}) == []
    denied = sequence.send({"name": "db", "ports": [{"name": "https", "port": 1}, {"name": "http", "port": 79}]})
    assert [c["field"] for c in denied] == ["spec.ports[1]"]


def test_set_lists_compare_regardless_of_order(sequence: Sequence) -> None:
    assert sequence.send({"name": "db", "zones": ["a", "b"]}) == []
    assert sequence.send({"name": "db", "zones": ["b", "a"]}) == []
    assert sequence.send({"name": "db", "zones": ["a", "c"]})


def test_optional_old_self_runs_on_create_too(sequence: Sequence) -> None:
    assert sequence.send({"name": "db", "version": "2"}) == []
    assert sequence.send({"name": "db", "version": "1"})
    assert sequence.send({"name": "db", "version": "3"}) == []


def test_number_is_a_double_even_when_the_json_is_an_integer(sequence: Sequence) -> None:
    denied = sequence.send({"name": "db", "ratio": 1})
    assert [c["message"] for c in denied] == ['Invalid value: 1: failed rule: self * 2.0 <= 1.0']
    assert sequence.send({"name": "db", "ratio": 0}) == []


def test_extension_functions_and_escaped_property_names(sequence: Sequence) -> None:
    assert sequence.send({"name": "Db"})
    assert sequence.send({"name": "db", "sorted": [3, 1]})
    assert sequence.send({"name": "db", "backup": {"schedule": "daily"}})
    assert sequence.send({"name": "db", "app-name": "x"})
    assert sequence.send({"name": "db", "sorted": [1, 3], "app-name": "y", "backup": {"schedule": "1d"}}) == []


def test_date_time_and_duration_strings_are_timestamps_and_durations(sequence: Sequence) -> None:
    assert sequence.send({"name": "db", "since": "2021-05-01T10:00:00Z", "window": "30m"}) == []
    denied = sequence.send({"name": "db", "since": "2021-04-01T10:00:00Z", "window": "90m"})
    assert sorted(c["message"] for c in denied) == [
        'Invalid value: "2021-04-01T10:00:00Z": since may not go back',
        'Invalid value: "90m": window is over an hour',
    ]
    assert sequence.send({"name": "db", "since": "2019-01-01T00:00:00Z"})


def test_runtime_error_and_several_causes(sequence: Sequence) -> None:
    # No name: the root rule fails with "no such key"; the other violations are reported alongside.
    denied = sequence.send({"replicas": 2, "maxReplicas": 1, "tags": ["x"]})
    assert len(denied) == 3


BAD_RULES: list[tuple[str, dict[str, Any], str]] = [
    ("syntax", {"type": "object", "properties": {"a": {"type": "string", **_rules({"rule": "self =="})}}},
     "properties[a].x-kubernetes-validations[0].rule"),
    ("message-expression", {"type": "object", "properties": {"a": {"type": "string", **_rules(
        {"rule": "self == 'a'", "messageExpression": "self +"})}}},
     "properties[a].x-kubernetes-validations[0].messageExpression"),
    ("uncorrelatable", {"type": "object", "properties": {"a": {
        "type": "array", "maxItems": 5,
        "items": {"type": "string", "maxLength": 5, **_rules({"rule": "self == oldSelf"})},
    }}},
     "properties[a].items.x-kubernetes-validations[0].rule"),
    ("field-path", {"type": "object", "properties": {"a": {"type": "string"}}, **_rules(
        {"rule": "true", "fieldPath": ".b"})},
     "x-kubernetes-validations[0].fieldPath"),
    ("optional-old-self", {"type": "object", "properties": {"a": {"type": "string", **_rules(
        {"rule": "self == 'a'", "optionalOldSelf": True})}}},
     "properties[a].x-kubernetes-validations[0].optionalOldSelf"),
]


@pytest.mark.parametrize(("case", "schema", "path"), BAD_RULES, ids=[case for case, _, _ in BAD_RULES])
def test_a_rule_that_does_not_compile_is_refused_with_its_path(api: Api, case: str, schema: dict[str, Any],
                                                              path: str) -> None:
    status, answer = api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                 _crd(f"bad{case.replace('-', '')}s", schema))
    if status == 201:
        api.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{answer['metadata']['name']}")
    assert status == 422, answer
    theirs = {c["field"] for c in answer["details"]["causes"]}
    _, errors = compile_schema(schema, base=SCHEMA_BASE)
    assert {e.path for e in errors} == theirs
    assert f"{SCHEMA_BASE}.{path}" in theirs


def test_message_expression_fallback_and_duplicate_and_runtime_error_messages(sequence: Sequence) -> None:
    denied = sequence.send({"name": "db", "tags": ["t-a", "t-a"]})
    assert [_key(c) for c in denied] == [("FieldValueDuplicate", "spec.tags", "Duplicate value")]
    denied = sequence.send({"replicas": 1})
    assert [c["message"] for c in denied] == [
        'Invalid value: "object": no such key: name evaluating rule: self.name.size() <= 20']


RATCHET_PLURAL = "ratchets"
RATCHET_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"a": {"type": "string", "maxLength": 20}, "b": {"type": "string"}},
}


def test_ratcheting_an_object_that_predates_a_rule(api: Api) -> None:
    """A rule added after an object was stored does not block updates that leave its field alone."""
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    status, crd = api.request("POST", crds, _crd(RATCHET_PLURAL, RATCHET_SCHEMA))
    assert status == 201, crd
    try:
        collection = f"/apis/{GROUP}/v1/namespaces/{NAMESPACE}/{RATCHET_PLURAL}"
        wait_for(lambda: api.request("GET", collection)[0] == 200, "the ratchet resource to serve")
        body = {"apiVersion": f"{GROUP}/v1", "kind": "Ratchet", "metadata": {"name": "r", "namespace": NAMESPACE},
                "spec": {"a": "legacy", "b": "1"}}
        status, stored = api.request("POST", collection, body)
        assert status == 201, stored

        ruled = copy.deepcopy(RATCHET_SCHEMA)
        ruled["properties"]["a"].update(_rules({"rule": "self.startsWith('x')", "message": "a starts with x"}))
        _, crd = api.request("GET", f"{crds}/{RATCHET_PLURAL}.{GROUP}")
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = ruled
        status, answer = api.request("PUT", f"{crds}/{RATCHET_PLURAL}.{GROUP}", crd)
        assert status == 200, answer
        fresh = {**body, "metadata": {"name": "probe", "namespace": NAMESPACE}}
        wait_for(lambda: api.request("POST", f"{collection}?dryRun=All", fresh)[0] == 422, "the new rule to apply")

        rules, errors = compile_schema(ruled)
        assert errors == []
        for spec in ({"a": "legacy", "b": "2"}, {"a": "legacy2", "b": "2"}):
            metadata = {**body["metadata"], "resourceVersion": stored["metadata"]["resourceVersion"]}
            update = {**body, "metadata": metadata, "spec": spec}
            status, answer = api.request("PUT", f"{collection}/r", update)
            ours = validate(rules, spec, stored["spec"])
            if status == 200:
                assert ours == [], spec
                stored = answer
            else:
                assert sorted(map(_key, ours)) == sorted(map(_key, answer["details"]["causes"])), spec
        assert stored["spec"] == {"a": "legacy", "b": "2"}
    finally:
        api.request("DELETE", f"{crds}/{RATCHET_PLURAL}.{GROUP}")
