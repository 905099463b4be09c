"""The oracle for ``shared.admission.policies``: kube-apiserver running the same
ValidatingAdmissionPolicies and bindings on a CRD.

Each request is sent to the CRD and decided by :func:`shared.admission.policies.admit` with the same
policies, bindings, namespace object and params read from the cluster. Allow/deny, code, reason,
message, causes and warnings must agree.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shared.admission.policies import CompiledPolicy, admit, compile_policy
from shared.admission.request import AdmissionRequest
from shared.api.attributes import ResourceAttributes
from shared.api.rest import User
from tests.kube import Api, wait_for

pytestmark = pytest.mark.integration

GROUP = "oracle.agl.test"
PLURAL = "vaptargets"
PROD, DEV, PARAMS = "vap-prod", "vap-dev", "vap-params"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "vaptarget", "kind": "Vaptarget", "listKind": "VaptargetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "tier": {"type": "string"}, "size": {"type": "string"}, "replicas": {"type": "integer"}}}},
        }}}],
    },
}


def _rules(operations: list[str]) -> dict[str, Any]:
    return {"resourceRules": [{"apiGroups": [GROUP], "apiVersions": ["v1"], "operations": operations,
                               "resources": [PLURAL]}]}


POLICIES: list[dict[str, Any]] = [
    {"metadata": {"name": "tier-per-namespace"}, "spec": {
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": _rules(["CREATE", "UPDATE"]),
        "matchConditions": [{"name": "not-exempt",
                             "expression": "!has(object.metadata.labels) || !('exempt' in object.metadata.labels)"}],
        "variables": [{"name": "tier", "expression": "has(object.spec.tier) ? object.spec.tier : 'none'"}],
        "validations": [
            {"expression": "variables.tier != params.data.tier",
             "messageExpression": "'tier ' + variables.tier + ' is not allowed in ' + request.namespace"},
            {"expression": "!has(object.spec.replicas) || object.spec.replicas <= 5", "reason": "Forbidden"},
        ],
    }},
    {"metadata": {"name": "size-warning"}, "spec": {
        "matchConstraints": _rules(["CREATE", "UPDATE"]),
        "validations": [{"expression": "!has(object.spec.size) || object.spec.size != 'xl'",
                         "message": "xl is expensive"}],
    }},
    {"metadata": {"name": "strict-errors"}, "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": _rules(["CREATE"]),
        "matchConditions": [{"name": "opted-in", "expression": "object.metadata.name.startsWith('strict-')"}],
        "validations": [{"expression": "object.spec.tier == 'gold'"}],
    }},
    {"metadata": {"name": "condition-errors"}, "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": _rules(["CREATE"]),
        "matchConditions": [
            {"name": "sized", "expression": "object.spec.size != ''"},
            {"name": "opted-in", "expression": "object.metadata.name.startsWith('cond-')"},
        ],
        "validations": [{"expression": "false", "message": "conditions matched"}],
    }},
    {"metadata": {"name": "variable-errors"}, "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": _rules(["CREATE"]),
        "matchConditions": [{"name": "opted-in", "expression": "object.metadata.name.startsWith('var-')"}],
        "variables": [{"name": "size", "expression": "object.spec.size"},
                      {"name": "unused", "expression": "object.spec.nothing"}],
        "validations": [{"expression": "variables.size != 'xxl'"}],
    }},
    {"metadata": {"name": "lenient-errors"}, "spec": {
        "failurePolicy": "Ignore",
        "matchConstraints": _rules(["CREATE"]),
        "validations": [{"expression": "object.spec.size == 'xl' || object.spec.tier != 'gold'"}],
    }},
    {"metadata": {"name": "protected-delete"}, "spec": {
        "matchConstraints": _rules(["DELETE"]),
        "validations": [{"expression": "!has(oldObject.metadata.labels) || "
                                       "!('protected' in oldObject.metadata.labels)"}],
    }},
]

BINDINGS: list[dict[str, Any]] = [
    {"metadata": {"name": "tier-prod"}, "spec": {
        "policyName": "tier-per-namespace", "validationActions": ["Deny"],
        "paramRef": {"name": "forbidden-tier", "namespace": PARAMS, "parameterNotFoundAction": "Deny"},
        "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}},
    }},
    {"metadata": {"name": "size-warn"}, "spec": {"policyName": "size-warning", "validationActions": ["Warn"]}},
    {"metadata": {"name": "protected"}, "spec": {"policyName": "protected-delete", "validationActions": ["Deny"]}},
    {"metadata": {"name": "strict"}, "spec": {"policyName": "strict-errors", "validationActions": ["Deny"]}},
    {"metadata": {"name": "lenient"}, "spec": {"policyName": "lenient-errors", "validationActions": ["Deny"]}},
    {"metadata": {"name": "conditions"}, "spec": {"policyName": "condition-errors", "validationActions": ["Deny"]}},
    {"metadata": {"name": "variables"}, "spec": {"policyName": "variable-errors", "validationActions": ["Deny"]}},
]


def _post(api: Api, path: str, body: dict[str, Any]) -> None:
    status, answer = api.request("POST", path, body)
    assert status in (201, 409), answer


@pytest.fixture(scope="module")
def cluster_policies(api: Api) -> Iterator[Api]:
    _post(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)
    for name, env in ((PROD, "prod"), (DEV, "dev"), (PARAMS, "params")):
        _post(api, "/api/v1/namespaces", {"metadata": {"name": name, "labels": {"env": env}}})
    _post(api, f"/api/v1/namespaces/{PARAMS}/configmaps",
          {"metadata": {"name": "forbidden-tier"}, "data": {"tier": "gold"}})
    for policy in POLICIES:
        _post(api, f"{ADMISSION}/validatingadmissionpolicies",
              {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", **policy})
    for binding in BINDINGS:
        _post(api, f"{ADMISSION}/validatingadmissionpolicybindings",
              {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", **binding})
    probe = _object(PROD, "probe", {"tier": "gold"})
    wait_for(lambda: api.request("POST", f"{_collection(PROD)}?dryRun=All", probe)[0] == 422,
             "the policies to be enforced", timeout=60)
    yield api
    for binding in BINDINGS:
        api.request("DELETE", f"{ADMISSION}/validatingadmissionpolicybindings/{binding['metadata']['name']}")
    for policy in POLICIES:
        api.request("DELETE", f"{ADMISSION}/validatingadmissionpolicies/{policy['metadata']['name']}")
    api.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{PLURAL}.{GROUP}")


@pytest.fixture(scope="module")
def compiled() -> list[CompiledPolicy]:
    return [compile_policy(policy) for policy in POLICIES]


def _collection(namespace: str) -> str:
    return f"/apis/{GROUP}/v1/namespaces/{namespace}/{PLURAL}"


def _object(namespace: str, name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": f"{GROUP}/v1", "kind": "Vaptarget", "metadata": metadata, "spec": spec}


def _send(api: Api, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any, list[str]]:
    """Like Api.request, keeping the Warning headers."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(api.cluster.server + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30, context=api.ctx) as response:
            return response.status, json.loads(response.read()), response.headers.get_all("Warning") or []
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers.get_all("Warning") or []


def _warning_text(header: str) -> str:
    # 299 - "text"
    return json.loads(header.split(" ", 2)[2])


class Oracle:
    def __init__(self, api: Api, policies: list[CompiledPolicy]) -> None:
        self.api = api
        self.policies = policies

    async def params(self, kind: dict[str, Any], ref: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
        assert kind == {"apiVersion": "v1", "kind": "ConfigMap"}
        status, found = self.api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{ref['name']}")
        return [found] if status == 200 else []

    def check(self, operation: str, namespace: str, obj: dict[str, Any] | None, old: dict[str, Any] | None,
              name: str) -> tuple[int, Any, list[str]]:
        if operation == "CREATE":
            status, answer, warnings = _send(self.api, "POST", _collection(namespace), obj)
        elif operation == "UPDATE":
            status, answer, warnings = _send(self.api, "PUT", f"{_collection(namespace)}/{name}", obj)
        else:
            status, answer, warnings = _send(self.api, "DELETE", f"{_collection(namespace)}/{name}", None)
        _, namespace_object = self.api.request("GET", f"/api/v1/namespaces/{namespace}")
        target = ResourceAttributes(operation.lower(), GROUP, "v1", PLURAL, namespace, name)
        request = AdmissionRequest(operation, target, "Vaptarget", User("agl-admin"), object=obj, old_object=old)
        verdict = asyncio.run(admit(self.policies, BINDINGS, request, namespace_object, self.params))
        assert [_warning_text(w) for w in warnings] == verdict.warnings
        if status in (200, 201):
            assert verdict.denial is None, verdict.denial.status()
        else:
            assert verdict.denial is not None, answer
            ours = verdict.denial.status()
            for key in ("code", "reason", "message"):
                assert ours[key] == answer[key], key
            assert ours["details"] == answer["details"]
        return status, answer, warnings


@pytest.fixture
def oracle(cluster_policies: Api, compiled: list[CompiledPolicy]) -> Oracle:
    return Oracle(cluster_policies, compiled)


def _name() -> str:
    return f"v-{uuid.uuid4().hex[:8]}"


def test_params_deny_a_value_in_one_namespace_only(oracle: Oracle) -> None:
    name = _name()
    status, answer, _ = oracle.check("CREATE", PROD, _object(PROD, name, {"tier": "gold"}), None, name)
    assert status == 422 and "tier gold is not allowed in vap-prod" in answer["message"]
    status, _, _ = oracle.check("CREATE", DEV, _object(DEV, name, {"tier": "gold"}), None, name)
    assert status == 201


def test_match_condition_exempts_and_reason_sets_the_code(oracle: Oracle) -> None:
    name = _name()
    status, _, _ = oracle.check("CREATE", PROD, _object(PROD, name, {"tier": "gold"}, {"exempt": "yes"}), None, name)
    assert status == 201
    other = _name()
    status, answer, _ = oracle.check("CREATE", PROD, _object(PROD, other, {"replicas": 9}), None, other)
    assert status == 403 and answer["reason"] == "Forbidden"


def test_warn_only_policy_adds_a_warning_and_allows(oracle: Oracle) -> None:
    name = _name()
    status, _, warnings = oracle.check("CREATE", DEV, _object(DEV, name, {"size": "xl"}), None, name)
    assert status == 201 and len(warnings) == 1


def test_update_and_delete_run_validating_policies(oracle: Oracle) -> None:
    name = _name()
    created = _object(PROD, name, {"tier": "silver"}, {"protected": "true"})
    status, stored, _ = oracle.check("CREATE", PROD, created, None, name)
    assert status == 201
    update = {**created, "metadata": {**created["metadata"], "resourceVersion": stored["metadata"]["resourceVersion"]},
              "spec": {"tier": "gold"}}
    status, _, _ = oracle.check("UPDATE", PROD, update, stored, name)
    assert status == 422
    status, answer, _ = oracle.check("DELETE", PROD, None, stored, name)
    assert status == 422 and "failed expression" in answer["message"]


def test_failure_policy_fail_denies_on_an_evaluation_error_and_ignore_skips(oracle: Oracle) -> None:
    name = f"strict-{_name()}"
    status, answer, _ = oracle.check("CREATE", DEV, _object(DEV, name, {"size": "s"}), None, name)
    assert status == 422 and "resulted in error" in answer["message"]
    # lenient-errors fails to evaluate (no spec.size) but ignores that; strict-errors does not match.
    other = _name()
    status, _, _ = oracle.check("CREATE", DEV, _object(DEV, other, {"tier": "gold"}), None, other)
    assert status == 201


def test_match_condition_errors_fail_the_policy_unless_another_condition_is_false(oracle: Oracle) -> None:
    name = f"cond-{_name()}"
    status, answer, _ = oracle.check("CREATE", DEV, _object(DEV, name, {"tier": "x"}), None, name)
    assert status == 422 and answer["message"].endswith("resulted in error: no such key: size")
    other = _name()
    status, _, _ = oracle.check("CREATE", DEV, _object(DEV, other, {"tier": "x"}), None, other)
    assert status == 201


def test_a_variable_fails_only_where_it_is_used(oracle: Oracle) -> None:
    name = f"var-{_name()}"
    status, _, _ = oracle.check("CREATE", DEV, _object(DEV, name, {"size": "s"}), None, name)
    assert status == 201
    other = f"var-{_name()}"
    status, answer, _ = oracle.check("CREATE", DEV, _object(DEV, other, {"tier": "x"}), None, other)
    assert status == 422 and 'composited variable "size" fails to evaluate' in answer["message"]
