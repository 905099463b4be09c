"""Admission webhooks on the served kinds of both services, with kube-apiserver as the oracle.

Each stack serves a ``Hooked`` kind; a CRD ``Hooked`` with the same schema is the oracle. The same
Mutating/ValidatingWebhookConfigurations select both (their rules list the three groups), served by
this test over TLS on 127.0.0.1 (:mod:`tests.webhooks`). The same requests go to both: allow/deny,
code, reason, message, warnings, what the webhooks were sent and how often must agree, and a refused
request must leave nothing behind. Each test registers its configurations and removes them, which
also shows the set is live in both.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import webhooks
from tests.contract.stack import STACKS, USER_KEY_PREFIX
from tests.kube import Api, send, wait_for
from tests.oracle_kinds import (
    Kind,
    Target,
    assert_delete_refused,
    assert_same_refusal,
    assert_update_refused,
    both,
    ensure_namespace,
    fixtures,
    normalized,
)

pytestmark = pytest.mark.integration

JSON = dict[str, Any]

HOOKED = Kind("Hooked", "hookeds", "webhooks.example", {
    "type": "object",
    "properties": {"size": {"type": "string"}, "tier": {"type": "string"},
                   "replicas": {"type": "integer", "default": 1}},
})
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
GROUPS = [HOOKED.oracle_group, *(stack.group for stack in STACKS.values())]
#: The ExternalName Service (to localhost) through which one webhook is reached, as in a cluster.
HOOK_SERVICE, HOOK_NAMESPACE = "agl-test-hooks", "agl-test-hooks"
#: How long the slow webhook takes to answer; its configuration gives it one second.
SLOW_SECONDS = 3


class Hooks:
    """The test's webhooks: what each path decides, and every review each path was sent."""

    def __init__(self) -> None:
        self.port = 0
        self.ca_bundle = ""
        self.seen: dict[str, list[JSON]] = defaultdict(list)
        self._lock = threading.Lock()

    def routes(self) -> dict[str, webhooks.Decide]:
        decisions = {"/mutate": self._mutate, "/validate": self._validate, "/deny-all": self._deny_all,
                     "/slow": self._slow, "/record": self._allow, "/reinvoke-a": self._label("a-seen"),
                     "/reinvoke-b": self._label("b-seen"), "/backing-tier": self._backing_tier}
        return {path: self._recorded(path, decide) for path, decide in decisions.items()}

    def _recorded(self, path: str, decide: Any) -> webhooks.Decide:
        def handle(review: JSON) -> JSON:
            request = review["request"]
            with self._lock:
                self.seen[path].append(request)
            response = {"uid": request["uid"], **decide(request)}
            return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

        return handle

    def calls(self, path: str, name: str, group: str = "") -> list[JSON]:
        """The reviews ``path`` was sent for objects called ``name`` (of ``group`` only, if given)."""
        with self._lock:
            return [request for request in self.seen[path] if request.get("name") == name
                    and (not group or request["kind"]["group"] == group)]

    @staticmethod
    def _patch(operations: list[JSON]) -> JSON:
        return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(operations).encode()).decode()}

    def _mutate(self, request: JSON) -> JSON:
        obj = request["object"]
        operations: list[JSON] = []
        if "labels" not in obj["metadata"]:
            operations.append({"op": "add", "path": "/metadata/labels", "value": {}})
        operations.append({"op": "add", "path": "/metadata/labels/mutated", "value": "yes"})
        if "tier" not in obj.get("spec", {}):
            operations.append({"op": "add", "path": "/spec/tier", "value": "standard"})
        return {"allowed": True, "warnings": ["mutated by the test webhook"], **self._patch(operations)}

    def _backing_tier(self, request: JSON) -> JSON:
        """Sets ``tier`` in a backing object's values (HelmRelease) or variables (Terraform) on its way in."""
        spec = request["object"].get("spec") or {}
        if isinstance(spec.get("vars"), list):
            operation: JSON = {"op": "add", "path": "/spec/vars/-", "value": {"name": "tier", "value": "backing"}}
        else:
            operation = {"op": "add", "path": "/spec/values/tier", "value": "backing"}
        return {"allowed": True, **self._patch([operation])}

    def _label(self, key: str) -> Any:
        def decide(request: JSON) -> JSON:
            labels = request["object"]["metadata"].get("labels")
            if labels is not None and key in labels:
                return {"allowed": True}
            if labels is None:
                operation: JSON = {"op": "add", "path": "/metadata/labels", "value": {key: "y"}}
            else:
                operation = {"op": "add", "path": f"/metadata/labels/{key}", "value": "y"}
            return {"allowed": True, **self._patch([operation])}

        return decide

    @staticmethod
    def _validate(request: JSON) -> JSON:
        if request["operation"] == "DELETE":
            if "protected" in (request["oldObject"]["metadata"].get("labels") or {}):
                return {"allowed": False, "status": {"code": 403, "reason": "Forbidden",
                                                     "message": "protected objects cannot be deleted"}}
            return {"allowed": True}
        if request["object"]["spec"].get("size") == "forbidden":
            return {"allowed": False, "warnings": ["size forbidden was asked for"],
                    "status": {"code": 422, "reason": "Invalid", "message": "size forbidden is not allowed"}}
        return {"allowed": True, "warnings": ["checked by the test webhook"]}

    @staticmethod
    def _deny_all(request: JSON) -> JSON:
        return {"allowed": False, "status": {"message": "denied by the test webhook"}}

    @staticmethod
    def _slow(request: JSON) -> JSON:
        time.sleep(SLOW_SECONDS)
        return {"allowed": True}

    @staticmethod
    def _allow(request: JSON) -> JSON:
        return {"allowed": True}

    # ------------------------------------------------------------------ configurations

    def hook(self, name: str, path: str, operations: list[str], test: str, *, service: bool = False,
             **fields: Any) -> JSON:
        """A webhook selecting ``Hooked`` in every group, in the namespaces of ``test``."""
        client: JSON
        if service:
            client = {"service": {"name": HOOK_SERVICE, "namespace": HOOK_NAMESPACE, "port": self.port, "path": path}}
        else:
            client = {"url": f"https://127.0.0.1:{self.port}{path}"}
        return {"name": f"{name}.webhooks.example", "clientConfig": {**client, "caBundle": self.ca_bundle},
                "rules": [{"apiGroups": GROUPS, "apiVersions": ["*"], "operations": operations,
                           "resources": [HOOKED.plural], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"webhooks-test": test}},
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5, **fields}


def _free_port() -> int:
    """A port nothing listens on (taken and given back at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def hooks(api: Api, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hooks]:
    directory: Path = tmp_path_factory.mktemp("webhooks")
    cert = webhooks.certificate(directory, f"{HOOK_SERVICE}.{HOOK_NAMESPACE}.svc")
    state = Hooks()
    with webhooks.serve(state.routes(), cert.cert, cert.key) as port:
        state.port, state.ca_bundle = port, cert.ca_bundle
        ensure_namespace(api, HOOK_NAMESPACE)
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": HOOK_SERVICE},
                   "spec": {"type": "ExternalName", "externalName": "localhost",
                            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}}
        api.request("DELETE", f"/api/v1/namespaces/{HOOK_NAMESPACE}/services/{HOOK_SERVICE}")
        status, answer = api.request("POST", f"/api/v1/namespaces/{HOOK_NAMESPACE}/services", service)
        assert status == 201, answer
        yield state


oracle, ours = fixtures(HOOKED)


@contextlib.contextmanager
def registered(api: Api, mutating: bool, name: str, hooks_: list[JSON]) -> Iterator[None]:
    """A webhook configuration, present for the block."""
    kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
    collection = f"{ADMISSION}/{kind.lower()}s"
    api.request("DELETE", f"{collection}/{name}")
    status, answer = api.request("POST", collection, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                                                      "metadata": {"name": name}, "webhooks": hooks_})
    assert status == 201, answer
    try:
        yield
    finally:
        api.request("DELETE", f"{collection}/{name}")


def _namespace(api: Api, test: str, ours: Target, **labels: str) -> str:
    assert ours.stack is not None
    suffix = "-".join(labels)
    name = f"wh-{test}-{suffix}-{ours.stack.name}" if suffix else f"wh-{test}-{ours.stack.name}"
    return ensure_namespace(api, name, {"webhooks-test": test, **labels})


def _until(targets: tuple[Target, ...], what: str, check: Any) -> None:
    """Wait until ``check(target)`` holds for each target (kube-apiserver's and our informers lag a little)."""
    for target in targets:
        wait_for(lambda t=target: check(t), f"{what} on {target.group}", timeout=60)


def _post(target: Target, namespace: str, name: str, spec: JSON, labels: dict[str, str] | None = None,
          query: str = "") -> tuple[int, Any, list[str]]:
    return send(target.api, "POST", target.path(namespace) + query, target.manifest(namespace, name, spec, labels))


# --------------------------------------------------------------------------- mutating


REVIEWED = ("kind", "resource", "requestKind", "requestResource", "name", "namespace", "operation", "userInfo",
            "dryRun", "options", "subResource", "requestSubResource")


def _same_review(ours: Target, mine: JSON, theirs: JSON) -> None:
    """What the webhook was sent for our kind is what kube-apiserver sends for the CRD."""
    mine = normalized(ours, mine)
    for key in REVIEWED:
        assert mine.get(key) == theirs.get(key), key
    for key in ("apiVersion", "kind", "spec"):
        assert mine["object"][key] == theirs["object"][key], key
    assert mine["object"]["metadata"].get("labels") == theirs["object"]["metadata"].get("labels")
    assert mine["oldObject"] == theirs["oldObject"] is None


def test_a_mutating_webhook_sets_a_label_and_a_spec_default(ours: Target, oracle: Target, hooks: Hooks,
                                                           api: Api) -> None:
    assert ours.stack is not None
    namespace = _namespace(api, "mutate", ours)
    mutate = hooks.hook("mutate", "/mutate", ["CREATE", "UPDATE"], "mutate", service=True)
    with registered(api, True, "agl-test-mutate", [mutate]):
        _until((ours, oracle), "the mutating webhook",
               lambda t: (_post(t, namespace, "probe", {}, query="?dryRun=All")[1].get("metadata", {})
                          .get("labels", {}).get("mutated") == "yes"))
        name = ours.name("m")
        mine = _post(ours, namespace, name, {"size": "s"})
        theirs = _post(oracle, namespace, name, {"size": "s"})
        assert mine[0] == theirs[0] == 201, (mine, theirs)
        for answer in (mine[1], theirs[1]):
            assert answer["metadata"]["labels"] == {"mutated": "yes"}
            assert answer["spec"] == {"size": "s", "tier": "standard", "replicas": 1}
        assert mine[2] == theirs[2] == ["mutated by the test webhook"]
        backing = ours.backing(namespace, name)
        assert backing is not None
        assert backing["metadata"]["labels"][f"{USER_KEY_PREFIX}mutated"] == "yes"
        assert ours.stack.written_spec(backing)["tier"] == "standard"
        calls = hooks.calls("/mutate", name)
        assert len(calls) == 2, calls
        _same_review(ours, calls[0], calls[1])
        # An update is mutated too: the webhook puts back a tier the client removed.
        for target in (ours, oracle):
            status, answer = target.patch(namespace, name, {"spec": {"tier": None}})
            assert status == 200, answer
            assert answer["spec"]["tier"] == "standard"
        updates = [call for call in hooks.calls("/mutate", name) if call["operation"] == "UPDATE"]
        assert len(updates) == 2
        assert normalized(ours, updates[0])["oldObject"]["spec"] == updates[1]["oldObject"]["spec"]


def test_a_create_answers_what_its_backing_object_became(ours: Target, hooks: Hooks, api: Api) -> None:
    """A webhook on the backing resource changes what kube-apiserver stores for a create through the service: the
    create answers the Application as stored, as a read returns it, not the one the service's admission saw
    (which a create otherwise reuses for the answer's spec)."""
    assert ours.stack is not None
    namespace = _namespace(api, "backing", ours)
    backing_group, backing_plural = ours.stack.backing_api.split("/")[2], ours.stack.backing.split(".")[0]
    hook = {**hooks.hook("backing", "/backing-tier", ["CREATE"], "backing"),
            "rules": [{"apiGroups": [backing_group], "apiVersions": ["*"], "operations": ["CREATE"],
                       "resources": [backing_plural], "scope": "Namespaced"}]}
    with registered(api, True, "agl-test-backing", [hook]):
        _until((ours,), "the backing webhook",
               lambda t: _post(t, namespace, "probe", {"size": "s"}, query="?dryRun=All")[1].get("spec", {})
               .get("tier") == "backing")
        name = ours.name("b")
        status, answer, _ = _post(ours, namespace, name, {"size": "s"})
        assert status == 201, answer
        status, read = ours.api.request("GET", ours.path(namespace, name))
        assert status == 200, read
        assert answer["spec"] == read["spec"] and answer["spec"]["tier"] == "backing", (answer, read)


def test_reinvocation_calls_an_earlier_webhook_again_once(ours: Target, oracle: Target, hooks: Hooks,
                                                         api: Api) -> None:
    namespace = _namespace(api, "reinvoke", ours)
    first = hooks.hook("reinvoke-a", "/reinvoke-a", ["CREATE"], "reinvoke", reinvocationPolicy="IfNeeded")
    second = hooks.hook("reinvoke-b", "/reinvoke-b", ["CREATE"], "reinvoke")
    with registered(api, True, "agl-test-reinvoke-1", [first]), registered(api, True, "agl-test-reinvoke-2", [second]):
        _until((ours, oracle), "both mutating webhooks",
               lambda t: set(_post(t, namespace, "probe", {}, query="?dryRun=All")[1].get("metadata", {})
                             .get("labels", {})) == {"a-seen", "b-seen"})
        counts = []
        name = ours.name("r")
        for target in (ours, oracle):
            status, answer, _ = _post(target, namespace, name, {})
            assert status == 201, answer
            assert answer["metadata"]["labels"] == {"a-seen": "y", "b-seen": "y"}
            counts.append((len(hooks.calls("/reinvoke-a", name, target.group)),
                           len(hooks.calls("/reinvoke-b", name, target.group))))
        assert counts[0] == counts[1] == (2, 1)


# --------------------------------------------------------------------------- validating


def test_a_validating_webhook_denies_as_on_the_crd(ours: Target, oracle: Target, hooks: Hooks, api: Api) -> None:
    namespace = _namespace(api, "validate", ours)
    validate = hooks.hook("validate", "/validate", ["CREATE", "UPDATE", "DELETE"], "validate")
    with registered(api, False, "agl-test-validate", [validate]):
        _until((ours, oracle), "the validating webhook",
               lambda t: _post(t, namespace, "probe", {"size": "forbidden"}, query="?dryRun=All")[0] == 422)
        big = ours.name("big")
        mine, theirs = both(ours, oracle, lambda t: t.create(namespace, big, {"size": "forbidden"}))
        assert_same_refusal(mine, theirs, 422)
        assert mine[1]["message"] == ('admission webhook "validate.webhooks.example" denied the request: '
                                      "size forbidden is not allowed")
        assert ours.backing(namespace, big) is None
        # The refusal carries the webhook's warnings, as kube-apiserver's does.
        refusals = [_post(t, namespace, big, {"size": "forbidden"}) for t in (ours, oracle)]
        assert refusals[0][0] == refusals[1][0] == 422
        assert refusals[0][2] == refusals[1][2] == ["size forbidden was asked for"]
        # Allowed with the webhook's warning; an update into the refused value changes nothing.
        kept = ours.name("kept")
        warnings = [_post(t, namespace, kept, {"size": "s"}, {"protected": "yes"}) for t in (ours, oracle)]
        assert [w[0] for w in warnings] == [201, 201] and warnings[0][2] == warnings[1][2] != []
        assert_update_refused(ours, oracle, namespace, kept, {"spec": {"size": "forbidden"}}, 422)
        # Delete runs validating admission too, dry-run included.
        assert_delete_refused(ours, oracle, namespace, kept, 403)


def test_selectors_and_match_conditions_choose_what_is_sent(ours: Target, oracle: Target, hooks: Hooks,
                                                            api: Api) -> None:
    open_namespace = _namespace(api, "select", ours)
    locked = _namespace(api, "select", ours, locked="yes")
    deny = hooks.hook("deny-all", "/deny-all", ["CREATE"], "select",
                      namespaceSelector={"matchLabels": {"locked": "yes"}},
                      objectSelector={"matchExpressions": [{"key": "exempt", "operator": "DoesNotExist"}]},
                      matchConditions=[{"name": "not-free", "expression": "!object.metadata.name.startsWith('free-')"}])
    # A condition that cannot be evaluated (no size) fails closed, unless another condition is false.
    conditions = hooks.hook("conditions", "/validate", ["CREATE"], "select",
                            namespaceSelector={"matchLabels": {"locked": "yes"}},
                            matchConditions=[
                                {"name": "opted-in", "expression": "object.metadata.name.startsWith('err-')"},
                                {"name": "sized", "expression": "object.spec.size != ''"}])
    with registered(api, False, "agl-test-select", [deny, conditions]):
        _until((ours, oracle), "the selective webhook",
               lambda t: _post(t, locked, "probe", {}, query="?dryRun=All")[0] == 400)
        denied = ours.name("a")
        mine, theirs = both(ours, oracle, lambda t: t.create(locked, denied, {}))
        assert_same_refusal(mine, theirs, 400)
        assert "reason" not in theirs[1]
        assert mine[1]["message"] == ('admission webhook "deny-all.webhooks.example" denied the request: '
                                      "denied by the test webhook")
        for where, base, labels in ((open_namespace, "b", None), (locked, "c", {"exempt": "yes"}),
                                    (locked, "free-d", None)):
            name = ours.name(base)
            mine, theirs = both(ours, oracle, lambda t, w=where, n=name, x=labels: t.create(w, n, {}, x))
            assert mine[0] == theirs[0] == 201, (base, mine, theirs)
        failing = ours.name("err-e")
        mine, theirs = both(ours, oracle, lambda t: t.create(locked, failing, {}, {"exempt": "yes"}))
        assert_same_refusal(mine, theirs, 403)
        assert mine[1]["message"].endswith("resulted in error: no such key: size")


# --------------------------------------------------------------------------- failures, timeouts, dry-run


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
@pytest.mark.parametrize("fault", ["down", "slow"])
def test_a_failed_call_follows_the_failure_policy(ours: Target, oracle: Target, hooks: Hooks, api: Api,
                                                  fault: str, policy: str) -> None:
    """A webhook nobody listens for, or one slower than its ``timeoutSeconds``: ``Fail`` refuses the
    request with kube-apiserver's 500 (naming the URL and the cause), ``Ignore`` lets it through."""
    namespace = _namespace(api, fault, ours)
    failing = hooks.hook(fault, f"/{fault}", ["CREATE"], fault, failurePolicy=policy, timeoutSeconds=1)
    if fault == "down":
        failing["clientConfig"]["url"] = f"https://127.0.0.1:{_free_port()}/down"
    probe = hooks.hook("deny-all", "/deny-all", ["CREATE"], fault, objectSelector={"matchLabels": {"probe": "yes"}})
    with registered(api, False, f"agl-test-{fault}-{policy.lower()}", [failing, probe]):
        _until((ours, oracle), "the configuration",
               lambda t: _post(t, namespace, "probe", {}, {"probe": "yes"}, query="?dryRun=All")[0] in (400, 500))
        name = ours.name(f"{fault}-{policy.lower()}")
        mine, theirs = both(ours, oracle, lambda t: t.create(namespace, name, {}))
        if policy == "Ignore":
            assert mine[0] == theirs[0] == 201, (mine, theirs)
            return
        assert_same_refusal(mine, theirs, 500)
        cause = "connect: connection refused" if fault == "down" else "context deadline exceeded"
        assert mine[1]["message"].endswith(cause), mine[1]["message"]
        assert ours.backing(namespace, name) is None


@pytest.mark.parametrize("side_effects", ["None", "NoneOnDryRun"])
def test_dry_run_calls_side_effect_free_webhooks_with_dry_run(ours: Target, oracle: Target, hooks: Hooks,
                                                              api: Api, side_effects: str) -> None:
    namespace = _namespace(api, "dry", ours)
    record = hooks.hook("record", "/record", ["CREATE", "DELETE"], "dry", sideEffects=side_effects)
    probe = hooks.hook("deny-all", "/deny-all", ["CREATE"], "dry", objectSelector={"matchLabels": {"probe": "yes"}})
    with registered(api, False, f"agl-test-dry-{side_effects.lower()}", [record, probe]):
        _until((ours, oracle), "the configuration",
               lambda t: _post(t, namespace, "probe", {}, {"probe": "yes"}, query="?dryRun=All")[0] == 400)
        name = ours.name(f"dry-{side_effects.lower()}")
        for target in (ours, oracle):
            status, answer, _ = _post(target, namespace, name, {}, query="?dryRun=All")
            assert status == 201, answer
            assert target.backing(namespace, name) is None
        calls = hooks.calls("/record", name)
        assert len(calls) == 2
        assert [call["dryRun"] for call in calls] == [True, True]
        assert normalized(ours, calls[0])["options"] == calls[1]["options"]


def test_a_webhook_with_side_effects_cannot_be_configured(hooks: Hooks, api: Api) -> None:
    """kube-apiserver refuses sideEffects Unknown/Some in v1, so no such webhook reaches a dry run
    (the services refuse the dry run if one ever does: tests/unit/test_webhooks.py)."""
    for side_effects in ("Unknown", "Some"):
        hook = hooks.hook("unsafe", "/record", ["CREATE"], "dry", sideEffects=side_effects)
        status, answer = api.request("POST", f"{ADMISSION}/validatingwebhookconfigurations", {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "agl-test-unsafe"}, "webhooks": [hook]})
        assert status == 422, answer
        assert "sideEffects" in answer["message"]


# --------------------------------------------------------------------------- the set is live


def test_a_new_configuration_applies_and_a_deleted_one_stops(ours: Target, oracle: Target, hooks: Hooks,
                                                            api: Api) -> None:
    namespace = _namespace(api, "live", ours)

    def allowed(target: Target) -> bool:
        return _post(target, namespace, "probe", {}, query="?dryRun=All")[0] == 201

    for target in (ours, oracle):
        assert allowed(target)
    with registered(api, False, "agl-test-live", [hooks.hook("deny-all", "/deny-all", ["CREATE"], "live")]):
        _until((ours, oracle), "the new configuration", lambda t: not allowed(t))
        name = ours.name("live")
        mine, theirs = both(ours, oracle, lambda t: t.create(namespace, name, {}))
        assert_same_refusal(mine, theirs, 400)
    _until((ours, oracle), "the configuration to be gone", allowed)
