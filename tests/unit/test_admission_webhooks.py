"""shared.admission.webhooks with a transport played by the test: the faults and configurations a real
kube-apiserver will not produce on demand (a v1 webhook with side effects, answers that break the
protocol). The behaviours kube-apiserver can show are compared with it in
tests/integration/test_webhooks.py."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from shared.admission import AdmissionRequest
from shared.admission import request as hooks_request
from shared.admission import webhooks as hooks
from shared.admission.webhooks import CallFailed, Webhook
from shared.api.attributes import ResourceAttributes
from shared.api.errors import ApiError
from shared.api.rest import User

JSON = dict[str, Any]
RULES = [{"apiGroups": ["apps.cozystack.io"], "apiVersions": ["*"], "operations": ["*"], "resources": ["things"]}]


def _hook(name: str, *, mutating: bool = False, configuration: str = "config", **fields: Any) -> Webhook:
    webhook = {"name": name, "rules": RULES, "sideEffects": "None", "admissionReviewVersions": ["v1"],
               "clientConfig": {"url": f"https://127.0.0.1:1/{name}"}, **fields}
    return hooks.compile_configuration({"metadata": {"name": configuration}, "webhooks": [webhook]},
                                       mutating=mutating)[0]


def _request(operation: str = "CREATE", *, dry_run: bool = False, name: str = "db",
             labels: dict[str, str] | None = None) -> AdmissionRequest:
    target = ResourceAttributes(operation.lower(), "apps.cozystack.io", "v1alpha1", "things", "tenant", name)
    obj: JSON = {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Thing",
                 "metadata": {"name": name, "namespace": "tenant", **({"labels": labels} if labels else {})},
                 "spec": {}}
    if operation == "DELETE":
        return AdmissionRequest(operation, target, "Thing", User("alice"), None, obj, dry_run)
    return AdmissionRequest(operation, target, "Thing", User("alice"), obj, None, dry_run)


Answer = Callable[[Webhook, JSON], JSON]


class Transport:
    """Answers each review with ``answer(webhook, request)`` as the response, and counts the calls."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.calls: list[tuple[str, JSON]] = []

    async def __call__(self, webhook: Webhook, review: JSON) -> JSON:
        request = review["request"]
        self.calls.append((webhook.name, request))
        response = {"uid": request["uid"], **self.answer(webhook, request)}
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def _allow(webhook: Webhook, request: JSON) -> JSON:
    return {"allowed": True}


def _patch(operations: list[JSON]) -> JSON:
    return {"allowed": True, "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(operations).encode()).decode()}


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_dry_run_refuses_a_webhook_with_side_effects_and_calls_the_others_with_dry_run() -> None:
    transport = Transport(_allow)
    for side_effects in ("Unknown", "Some"):
        with pytest.raises(ApiError) as refused:
            _run(hooks.validate([_hook("unsafe", sideEffects=side_effects)], _request(dry_run=True), None, transport))
        assert (refused.value.code, refused.value.reason) == (400, "BadRequest")
        assert refused.value.message == 'admission webhook "unsafe" does not support dry run'
    assert transport.calls == []
    # Without dry run the same webhook is called; sideEffects None is called with dryRun true.
    _run(hooks.validate([_hook("unsafe", sideEffects="Unknown")], _request(), None, transport))
    _run(hooks.validate([_hook("safe", sideEffects="NoneOnDryRun")], _request(dry_run=True), None, transport))
    assert [(name, request["dryRun"]) for name, request in transport.calls] == [("unsafe", False), ("safe", True)]


def test_a_webhook_without_side_effects_fails_a_dry_run_per_its_failure_policy() -> None:
    transport = Transport(_allow)
    with pytest.raises(ApiError) as failed:
        _run(hooks.validate([_hook("legacy", sideEffects=None)], _request(dry_run=True), None, transport))
    assert failed.value.message == ('Internal error occurred: failed calling webhook "legacy": '
                                    "Webhook SideEffects is nil")
    _run(hooks.validate([_hook("legacy", sideEffects=None, failurePolicy="Ignore")], _request(dry_run=True), None,
                        transport))
    assert transport.calls == []


def test_a_denial_is_the_webhooks_status_as_kube_returns_it() -> None:
    cases: list[tuple[JSON | None, int, str, str]] = [
        ({"code": 403, "reason": "Forbidden", "message": "no"}, 403, "Forbidden", ": no"),
        ({"code": 200, "message": "no"}, 400, "", ": no"),
        ({"reason": "Conflict"}, 400, "Conflict", ": Conflict"),
        (None, 400, "", " without explanation"),
    ]
    for status, code, reason, tail in cases:
        refusal = hooks.denial(_hook("deny"), status)
        assert (refusal.code, refusal.reason) == (code, reason)
        assert refusal.message == f'admission webhook "deny" denied the request{tail}'
        assert ("reason" in refusal.status()) == bool(reason)


def test_a_failed_call_follows_the_failure_policy() -> None:
    async def down(webhook: Webhook, review: JSON) -> JSON:
        raise CallFailed('failed to call webhook: Post "https://127.0.0.1:1/x?timeout=10s": dial tcp '
                         "127.0.0.1:1: connect: connection refused")

    with pytest.raises(ApiError) as failed:
        _run(hooks.validate([_hook("x")], _request(), None, down))
    text = ('failed calling webhook "x": failed to call webhook: Post "https://127.0.0.1:1/x?timeout=10s": dial tcp '
            "127.0.0.1:1: connect: connection refused")
    assert failed.value.status()["message"] == f"Internal error occurred: {text}"
    assert failed.value.details["causes"] == [{"message": text}]
    assert failed.value.code == 500 and failed.value.reason == "InternalError"
    outcome = _run(hooks.mutate([_hook("x", mutating=True, failurePolicy="Ignore")], _request(), None, down))
    assert outcome.object == _request().object


@pytest.mark.parametrize(("answer", "why"), [
    (lambda w, r: {"uid": "other", "allowed": True}, 'expected response.uid='),
    (lambda w, r: _patch([]), "validating webhook may not return response.patch"),
])
def test_an_answer_that_breaks_the_protocol_is_a_failed_call(answer: Answer, why: str) -> None:
    with pytest.raises(ApiError) as failed:
        _run(hooks.validate([_hook("x")], _request(), None, Transport(answer)))
    assert failed.value.code == 500 and "received invalid webhook response: " + why in failed.value.message


def test_mutating_webhooks_patch_in_order_and_reinvoke_once_if_needed() -> None:
    def label(key: str) -> Answer:
        def answer(webhook: Webhook, request: JSON) -> JSON:
            labels = request["object"]["metadata"].get("labels") or {}
            if key in labels:
                return {"allowed": True, "warnings": [f"{key} seen"]}
            if not labels:
                return _patch([{"op": "add", "path": "/metadata/labels", "value": {key: "y"}}])
            return _patch([{"op": "add", "path": f"/metadata/labels/{key}", "value": "y"}])

        return answer

    answers = {"a": label("a"), "b": label("b")}
    for policy, calls in (("IfNeeded", ["a", "b", "a"]), ("Never", ["a", "b"])):
        transport = Transport(lambda webhook, request: answers[webhook.name](webhook, request))
        # Configurations are called by name: "1-first" before "2-second" whatever order they come in.
        chain = hooks.ordered({"2-second": (_hook("b", mutating=True, configuration="2-second"),),
                               "1-first": (_hook("a", mutating=True, configuration="1-first",
                                                 reinvocationPolicy=policy),)})
        outcome = _run(hooks.mutate(chain, _request(), None, transport))
        assert outcome.object["metadata"]["labels"] == {"a": "y", "b": "y"}
        assert transport.names() == calls
        assert outcome.warnings == (["a seen"] if policy == "IfNeeded" else [])


def test_a_patch_on_delete_or_one_that_does_not_apply_is_an_internal_error() -> None:
    patching = Transport(lambda w, r: _patch([{"op": "remove", "path": "/spec/missing"}]))
    with pytest.raises(ApiError) as failed:
        _run(hooks.mutate([_hook("m", mutating=True)], _request(), None, patching))
    assert failed.value.code == 500
    with pytest.raises(ApiError) as failed:
        _run(hooks.mutate([_hook("m", mutating=True)], _request("DELETE"), None, patching))
    assert failed.value.message == ('admission webhook "m" attempted to modify the object, which is not supported '
                                    "for this operation")


def test_match_conditions_skip_or_fail_closed() -> None:
    conditions = [{"name": "opted-in", "expression": "object.metadata.name.startsWith('x')"},
                  {"name": "sized", "expression": "object.spec.size != ''"}]
    transport = Transport(_allow)
    strict, lenient = _hook("s", matchConditions=conditions), _hook("l", matchConditions=conditions,
                                                                     failurePolicy="Ignore")
    # A false condition skips the webhook even when another one errs.
    _run(hooks.validate([strict], _request(name="other"), None, transport))
    with pytest.raises(ApiError) as failed:
        _run(hooks.validate([strict], _request(name="xdb"), None, transport))
    assert (failed.value.code, failed.value.message) == (
        403, "things.apps.cozystack.io \"xdb\" is forbidden: expression 'object.spec.size != ''' resulted in error: "
             "no such key: size")
    _run(hooks.validate([lenient], _request(name="xdb"), None, transport))
    assert transport.calls == []


def test_selectors_choose_by_namespace_and_object_labels() -> None:
    webhook = _hook("v", namespaceSelector={"matchLabels": {"env": "prod"}},
                    objectSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]})
    prod = {"metadata": {"name": "tenant", "labels": {"env": "prod"}}}
    assert hooks.should_call(webhook, _request(), prod)
    assert not hooks.should_call(webhook, _request(), {"metadata": {"name": "tenant"}})
    assert not hooks.should_call(webhook, _request(labels={"skip": "1"}), prod)
    assert hooks.should_call(_hook("v", rules=[{**RULES[0], "operations": ["DELETE"]}]), _request("DELETE"), None)
    assert not hooks.should_call(_hook("v", rules=[{**RULES[0], "operations": ["DELETE"]}]), _request(), None)


def test_validating_webhooks_report_the_first_refusal_in_call_order() -> None:
    def answer(webhook: Webhook, request: JSON) -> JSON:
        if webhook.name == "ok":
            return {"allowed": True, "warnings": ["fine"]}
        return {"allowed": False, "status": {"message": webhook.name}, "warnings": [f"{webhook.name} says no"]}

    gathered = hooks.Outcome()
    with pytest.raises(ApiError) as refused:
        _run(hooks.validate([_hook("ok"), _hook("first"), _hook("second")], _request(), None, Transport(answer),
                            gathered))
    assert refused.value.message == 'admission webhook "first" denied the request: first'
    # The warnings of every webhook called stay with the refusal.
    assert gathered.warnings == ["fine", "first says no", "second says no"]
    outcome = _run(hooks.validate([_hook("ok"), _hook("ok")], _request(), None, Transport(answer)))
    assert outcome.warnings == ["fine", "fine"]


def test_the_review_is_admission_v1_with_the_request() -> None:
    transport = Transport(_allow)
    _run(hooks.validate([_hook("v")], _request("DELETE"), None, transport))
    request = transport.calls[0][1]
    assert request["kind"] == {"group": "apps.cozystack.io", "version": "v1alpha1", "kind": "Thing"}
    assert request["resource"] == {"group": "apps.cozystack.io", "version": "v1alpha1", "resource": "things"}
    assert (request["operation"], request["name"], request["namespace"]) == ("DELETE", "db", "tenant")
    assert request["object"] is None and request["oldObject"]["metadata"]["name"] == "db"
    assert request["userInfo"] == {"username": "alice"} and "subResource" not in request


def test_mutation_sees_the_defaults_and_writes_only_what_it_changed() -> None:
    schema = {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1},
                                               "tier": {"type": "string"},
                                               "storage": {"type": "object", "default": {},
                                                           "properties": {"size": {"type": "string",
                                                                                   "default": "1Gi"}}}}}
    seen: list[JSON] = []

    async def set_tier(request: AdmissionRequest) -> JSON | None:
        assert request.object is not None
        seen.append(request.object)
        return {**request.object, "spec": {**request.object["spec"], "tier": "gold"}}

    sent = _request()
    sent.object["spec"] = {"storage": {}}  # type: ignore[index]
    mutated = _run(hooks_request.mutate_as_crd(set_tier, schema, sent))
    assert seen[0]["spec"] == {"replicas": 1, "storage": {"size": "1Gi"}}
    assert mutated["spec"] == {"tier": "gold", "storage": {}}
    # Nothing changed: None, so the object goes on exactly as sent.
    assert _run(hooks_request.mutate_as_crd(hooks_request.mutate_nothing, schema, sent)) is None


def test_the_defaults_the_webhooks_saw_are_handed_on_only_when_nothing_changed_the_object() -> None:
    """A write defaults its spec once: what mutating admission saw goes on to validation unless a webhook changed
    the object (then validation defaults what the webhook returned) or the spec is not an object."""
    schema = {"type": "object", "properties": {"replicas": {"type": "integer", "default": 1},
                                               "tier": {"type": "string"}}}

    async def set_tier(request: AdmissionRequest) -> JSON | None:
        assert request.object is not None
        return {**request.object, "spec": {**request.object["spec"], "tier": "gold"}}

    sent = _request()
    sent.object["spec"] = {"tier": "small"}  # type: ignore[index]
    assert _run(hooks_request.mutate_with_defaults(hooks_request.mutate_nothing, schema, sent)) == (
        None, {"replicas": 1, "tier": "small"})
    mutated, defaulted = _run(hooks_request.mutate_with_defaults(set_tier, schema, sent))
    assert mutated is not None and mutated["spec"] == {"tier": "gold"} and defaulted is None
    sent.object["spec"] = "not an object"  # type: ignore[index]
    assert _run(hooks_request.mutate_with_defaults(hooks_request.mutate_nothing, schema, sent)) == (None, None)
