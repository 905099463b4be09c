"""shared.admission.policies and .matching on their own: the cases tests/integration/test_vap_oracle.py
does not drive through kube-apiserver (audit, missing params, authorizer, subresources, selectors)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from shared.admission.matching import matches, rule_matches
from shared.admission.policies import AUDIT_KEY, Verdict, admit, compile_policy, may_apply
from shared.admission.request import AdmissionRequest
from shared.api.attributes import ResourceAttributes
from shared.api.errors import ApiError
from shared.api.rest import User

RULE = {"apiGroups": ["apps.cozystack.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
        "resources": ["mariadbs"]}


def _admit(*args: Any) -> Verdict:
    return asyncio.run(admit(*args))


def _request(operation: str = "CREATE", resource: str = "mariadbs", subresource: str = "",
             old_object: dict[str, Any] | None = None) -> AdmissionRequest:
    target = ResourceAttributes(operation.lower(), "apps.cozystack.io", "v1alpha1", resource, "tenant-a", "db",
                                subresource)
    return AdmissionRequest(operation, target, "MariaDB", User("alice", groups=("dev",)),
                            object={"metadata": {"name": "db", "labels": {"team": "x"}}, "spec": {"size": "xl"}},
                            old_object=old_object)


def _policy(name: str, expression: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {
        "matchConstraints": {"resourceRules": [RULE]}, "validations": [{"expression": expression}], **spec}}


def _binding(policy: str, *actions: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"{policy}-binding"},
            "spec": {"policyName": policy, "validationActions": list(actions), **spec}}


async def _no_params(*_: Any) -> list[dict[str, Any]]:
    return []


def test_resource_rules_match_group_version_resource_operation_scope_and_subresource() -> None:
    assert rule_matches(RULE, _request())
    assert not rule_matches(RULE, _request(operation="DELETE"))
    assert not rule_matches(RULE, _request(resource="postgreses"))
    assert not rule_matches(RULE, _request(subresource="status"))
    assert rule_matches({**RULE, "resources": ["mariadbs/*"]}, _request(subresource="status"))
    assert rule_matches({**RULE, "resources": ["*/status"]}, _request(subresource="status"))
    assert not rule_matches({**RULE, "scope": "Cluster"}, _request())
    assert not rule_matches({**RULE, "resourceNames": ["other"]}, _request())


def test_selectors_and_exclusions() -> None:
    namespace = {"metadata": {"name": "tenant-a", "labels": {"env": "prod"}}}
    prod = {"resourceRules": [RULE], "namespaceSelector": {"matchExpressions": [
        {"key": "env", "operator": "In", "values": ["prod"]}]}}
    assert matches(prod, _request(), namespace, empty_matches_all=False)
    assert not matches(prod, _request(), {"metadata": {}}, empty_matches_all=False)
    by_team = {"objectSelector": {"matchLabels": {"team": "y"}}}
    assert not matches(by_team, _request(), namespace, empty_matches_all=True)
    old = {"metadata": {"labels": {"team": "y"}}}
    assert matches(by_team, _request(operation="UPDATE", old_object=old), namespace, empty_matches_all=True)
    assert not matches({"resourceRules": [RULE], "excludeResourceRules": [RULE]}, _request(), namespace,
                       empty_matches_all=False)
    assert not matches({}, _request(), namespace, empty_matches_all=False)


def test_audit_action_records_the_failed_validation() -> None:
    policy = compile_policy(_policy("p", "object.spec.size != 'xl'", auditAnnotations=[
        {"key": "size", "valueExpression": "object.spec.size"}]))
    verdict = _admit([policy], [_binding("p", "Audit")], _request(), None, _no_params)
    assert verdict.denial is None and verdict.warnings == []
    assert verdict.audit_annotations["p/size"] == "xl"
    assert json.loads(verdict.audit_annotations[AUDIT_KEY]) == [{
        "message": "failed expression: object.spec.size != 'xl'", "policy": "p", "binding": "p-binding",
        "expressionIndex": 0, "validationActions": ["Audit"]}]


def test_missing_params_follow_parameter_not_found_action() -> None:
    policy = compile_policy(_policy("p", "object.spec.size != params.data.size",
                                    paramKind={"apiVersion": "v1", "kind": "ConfigMap"}))
    deny = _binding("p", "Deny", paramRef={"name": "absent", "parameterNotFoundAction": "Deny"})
    allow = _binding("p", "Deny", paramRef={"name": "absent", "parameterNotFoundAction": "Allow"})
    denial = _admit([policy], [deny], _request(), None, _no_params).denial
    assert denial is not None and "no params found" in denial.message
    assert _admit([policy], [allow], _request(), None, _no_params).denial is None

    async def lookup(kind: dict[str, Any], ref: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
        assert (kind["kind"], ref["name"], namespace) == ("ConfigMap", "absent", "tenant-a")
        return [{"data": {"size": "xl"}}]

    assert _admit([policy], [allow], _request(), None, lookup).denial is not None


def test_params_that_cannot_be_read_fail_per_failure_policy() -> None:
    async def forbidden(*_: Any) -> list[dict[str, Any]]:
        raise ApiError(403, "Forbidden", 'configmaps "limits" is forbidden')

    for failure_policy, denied in (("Fail", True), ("Ignore", False)):
        policy = compile_policy(_policy("p", "params.data.size != object.spec.size", failurePolicy=failure_policy,
                                        paramKind={"apiVersion": "v1", "kind": "ConfigMap"}))
        binding = _binding("p", "Deny", paramRef={"name": "limits"})
        denial = _admit([policy], [binding], _request(), None, forbidden).denial
        assert (denial is not None) is denied
        if denial is not None:
            assert denial.message.endswith('failed to configure binding: configmaps "limits" is forbidden')


def test_an_unsupported_binding_like_authorizer_fails_per_failure_policy() -> None:
    expression = "authorizer.group('').resource('pods').check('get').allowed()"
    strict = compile_policy(_policy("strict", expression, failurePolicy="Fail"))
    lenient = compile_policy(_policy("lenient", expression, failurePolicy="Ignore"))
    denial = _admit([strict], [_binding("strict", "Deny")], _request(), None, _no_params).denial
    assert denial is not None and "compilation error" in denial.message and denial.code == 422
    assert _admit([lenient], [_binding("lenient", "Deny")], _request(), None, _no_params).denial is None


def test_request_and_variables_are_bound() -> None:
    policy = compile_policy(_policy(
        "p", "variables.who != 'alice' || request.userInfo.groups.exists(g, g == 'admins')",
        variables=[{"name": "who", "expression": "request.userInfo.username"}]))
    verdict = _admit([policy], [_binding("p", "Deny", "Warn")], _request(), None, _no_params)
    assert verdict.denial is not None and len(verdict.warnings) == 1
    assert verdict.denial.status()["details"]["causes"] == [{"message": (
        "ValidatingAdmissionPolicy 'p' with binding 'p-binding' denied request: failed expression: "
        "variables.who != 'alice' || request.userInfo.groups.exists(g, g == 'admins')")}]


def test_may_apply_tells_when_the_namespace_need_not_be_read() -> None:
    """A write no binding can select is allowed without reading its namespace (one kube round trip less);
    a namespace selector alone never rules a binding out, since it needs the namespace's labels."""
    policy = compile_policy(_policy("p", "object.spec.size != 'xl'"))
    other = compile_policy({**_policy("o", "true"), "spec": {"matchConstraints": {"resourceRules": [
        {**RULE, "resources": ["postgreses"]}]}, "validations": [{"expression": "true"}]}})
    assert not may_apply([policy, other], [], _request())
    assert not may_apply([policy, other], [_binding("o", "Deny")], _request())
    assert not may_apply([policy], [_binding("p", "Deny")], _request(operation="DELETE"))
    assert not may_apply([policy], [_binding("missing", "Deny")], _request())
    assert not may_apply([policy], [_binding("p", "Deny", matchResources={"excludeResourceRules": [RULE]})],
                         _request())
    assert may_apply([policy, other], [_binding("p", "Deny")], _request())
    by_namespace = _binding("p", "Deny", matchResources={"namespaceSelector": {"matchLabels": {"env": "prod"}}})
    assert may_apply([policy], [by_namespace], _request())
    assert may_apply([compile_policy(_policy("n", "true", matchConstraints={
        "resourceRules": [RULE], "namespaceSelector": {"matchLabels": {"env": "prod"}}}))],
        [_binding("n", "Deny")], _request())
