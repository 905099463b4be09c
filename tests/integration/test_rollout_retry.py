"""A rollout that the API server rejects is retried until every instance has the definition's change.

The fault is a real one: kube-apiserver calls a ValidatingWebhookConfiguration served by this test
over TLS on 127.0.0.1, which denies the first patches of some backing objects -- as a policy engine
or a webhook that is briefly down would.  The service must not memoise the generation as rolled out
after the first round; it retries with backoff, and says how far it got in the definition's
``status.rollout`` and in its Events.

And what creates and a rollout cost the API server, counted by kube-apiserver itself (its
``apiserver_request_total`` metric).
"""

from __future__ import annotations

import copy
import json
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from localcluster.cluster import Cluster

from helm_agl import build as helm_build
from helm_agl.definition import ApplicationDefinition
from tests import webhooks
from tests.kube import get_json, kubectl, listed_objects, load_fixture, served_requests, wait_for
from tofu_agl import build as tofu_build
from tofu_agl.definition import TofuApplicationDefinition

#: Patches of each chosen backing object that the webhook denies before it lets one through.
REJECTIONS = 3
INSTANCES = ("a", "b", "c", "d")
#: Instances whose backing object is denied: the others roll out in the first round.
DENIED = ("b", "d")


@dataclass(frozen=True)
class Stack:
    service_fixture: str
    definition_fixture: str
    definitions: str
    app_group: str
    backing_group: str
    backing_version: str
    backing_plural: str


HELM = Stack("helm_service", "redis.yaml", "applicationdefinitions", "apps.cozystack.io",
             "helm.toolkit.fluxcd.io", "v2", "helmreleases")
TOFU = Stack("tofu_service", "vpc.yaml", "tofuapplicationdefinitions", "tofu.apps.cozystack.io",
             "infra.contrib.fluxcd.io", "v1alpha2", "terraforms")
SPECS = {"helm_service": {}, "tofu_service": {"region": "eu-west-1"}}


class DenyFirstPatches:
    """A validating admission webhook: denies the first ``REJECTIONS`` UPDATEs of each name in
    ``names`` once armed, allows everything else, and counts what it denied."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.armed = False
        self.denied: Counter[str] = Counter()
        #: Every name the webhook was asked about: shows when kube-apiserver has started calling it.
        self.seen: set[str] = set()
        self._lock = threading.Lock()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("name", "")
        with self._lock:
            self.seen.add(name)
            deny = (self.armed and request.get("operation") == "UPDATE" and name in self.names
                    and self.denied[name] < REJECTIONS)
            if deny:
                self.denied[name] += 1
                count = self.denied[name]
        response: dict[str, Any] = {"uid": request["uid"], "allowed": not deny}
        if deny:
            response["status"] = {"code": 403, "reason": "Forbidden",
                                  "message": f"denied by the test webhook ({count} of {REJECTIONS})"}
        return response


@dataclass
class Webhook:
    url: str
    ca_bundle: str
    policy: DenyFirstPatches


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Webhook]:
    """The webhook server, on a free port of 127.0.0.1 with a certificate for that address."""
    cert = webhooks.certificate(tmp_path)
    policy = DenyFirstPatches(set())

    def decide(review: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": policy.review(review["request"])}

    with webhooks.serve(decide, cert.cert, cert.key) as port:
        yield Webhook(f"https://127.0.0.1:{port}/validate", cert.ca_bundle, policy)


def _register(cluster: Cluster, hook: Webhook, stack: Stack, namespace: str) -> str:
    name = f"deny-first-patches-{namespace}"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "deny-first-patches.tests.cozystack.io",
            "clientConfig": {"url": hook.url, "caBundle": hook.ca_bundle},
            "rules": [{"apiGroups": [stack.backing_group], "apiVersions": [stack.backing_version],
                       "operations": ["UPDATE"], "resources": [stack.backing_plural], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    }
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(config))
    return name


def _wait_until_called(cluster: Cluster, hook: Webhook, backing: str, namespace: str, probe: str) -> None:
    """kube-apiserver picks a new webhook configuration up a moment after it is written: until it calls the
    webhook, the rollout's first patches would not be denied.  A server-side dry-run patch of an object the
    webhook allows shows when it is in effect, without counting as a denial."""

    def called() -> bool:
        kubectl(cluster, "patch", backing, probe, "-n", namespace, "--dry-run=server", "--type=merge",
                "-p", '{"metadata":{"annotations":{"tests.cozystack.io/probe":"x"}}}')
        return probe in hook.policy.seen

    wait_for(called, "kube-apiserver to call the webhook", timeout=60, interval=0.5)


def _definition(stack: Stack, namespace: str, stem: str = "flaky") -> dict[str, Any]:
    defn = copy.deepcopy(load_fixture(stack.definition_fixture))
    singular = f"{stem}{namespace.split('-')[-1]}"
    defn["metadata"] = {"name": singular}
    defn["spec"]["application"].update(kind=singular.capitalize(), plural=f"{singular}s", singular=singular)
    defn["spec"]["release"]["prefix"] = f"{singular}-"
    return defn


def _foreign_fence(cluster: Cluster, stack: Stack, defn: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The kind's read fence in ``namespace``, as another service serving the same kind writes it there when its
    read fences live in that namespace: in this service's cache too, and no instance."""
    body = (helm_build.fence(ApplicationDefinition.from_object(defn), group=stack.app_group) if stack is HELM else
            tofu_build.fence(TofuApplicationDefinition.from_object(defn), group=stack.app_group))
    body["metadata"]["namespace"] = namespace
    created: dict[str, Any] = json.loads(kubectl(cluster, "create", "-o", "json", "-f", "-",
                                                 input=json.dumps(body)).stdout)
    return created


def _events(cluster: Cluster, definition: str) -> list[dict[str, Any]]:
    listing = get_json(cluster, "events", "-A", "--field-selector", f"involvedObject.name={definition}")
    return list(listing["items"])


@pytest.mark.parametrize("stack", [HELM, TOFU], ids=["helm", "tofu"])
def test_rejected_rollout_is_retried_until_every_instance_has_it(
        control_plane: Cluster, webhook: Webhook, stack: Stack, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(stack.service_fixture)
    namespace = f"retry-{stack.service_fixture.split('_')[0]}"
    kubectl(control_plane, "create", "namespace", namespace, check=False)
    defn = _definition(stack, namespace)
    name, plural = defn["metadata"]["name"], defn["spec"]["application"]["plural"]
    prefix = defn["spec"]["release"]["prefix"]
    backing = f"{stack.backing_plural}.{stack.backing_group}"
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(defn))
    wait_for(lambda: plural in kubectl(control_plane, "api-resources", f"--api-group={stack.app_group}",
                                       "--cached=false").stdout, f"{plural} served", timeout=60)
    for instance in INSTANCES:
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps({
            "apiVersion": f"{stack.app_group}/v1alpha1", "kind": defn["spec"]["application"]["kind"],
            "metadata": {"name": instance, "namespace": namespace}, "spec": SPECS[stack.service_fixture]}))
    hook = _register(control_plane, webhook, stack, namespace)
    try:
        _wait_until_called(control_plane, webhook, backing, namespace, f"{prefix}{INSTANCES[0]}")
        webhook.policy.names = {f"{prefix}{i}" for i in DENIED}
        webhook.policy.armed = True
        changed = copy.deepcopy(defn)
        changed["spec"]["release"]["labels"] = {**defn["spec"]["release"]["labels"], "rollout": "two"}
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(changed))
        generation = get_json(control_plane, stack.definitions, name)["metadata"]["generation"]

        def labels() -> dict[str, str | None]:
            items = get_json(control_plane, backing, "-n", namespace)["items"]
            return {i["metadata"]["name"]: i["metadata"].get("labels", {}).get("rollout") for i in items}

        wait_for(lambda: set(labels().values()) == {"two"}, "every backing object rolled out", timeout=90)
        assert sorted(labels()) == sorted(f"{prefix}{i}" for i in INSTANCES)
        assert webhook.policy.denied == {f"{prefix}{i}": REJECTIONS for i in DENIED}

        def rollout_status() -> dict[str, Any] | None:
            progress = get_json(control_plane, stack.definitions, name).get("status", {}).get("rollout")
            return progress if progress and progress["complete"] else None

        progress = wait_for(rollout_status, "status.rollout complete")
        assert progress["observedGeneration"] == generation
        assert progress["attempts"] == REJECTIONS + 1
        assert (progress["instances"], progress["rolledOut"], progress["failed"]) == (len(INSTANCES),) * 2 + (0,)

        # Events are written in the background, after the status.
        events = wait_for(lambda: (found := _events(control_plane, name))
                          and any(e["reason"] == "RolledOut" for e in found) and found, "the RolledOut event")
        incomplete = [e for e in events if e["reason"] == "RolloutIncomplete"]
        assert incomplete and all(e["type"] == "Warning" for e in incomplete)
        assert any(f"{len(DENIED)} failed" in e["message"] and "denied by the test webhook" in e["message"]
                   for e in incomplete), incomplete
        done = [e for e in events if e["reason"] == "RolledOut"]
        assert done and done[-1]["type"] == "Normal" and "0 failed" in done[-1]["message"]
    finally:
        kubectl(control_plane, "delete", "validatingwebhookconfiguration", hook, "--ignore-not-found")
        kubectl(control_plane, "delete", stack.definitions, name, "--ignore-not-found")


@pytest.mark.parametrize("stack", [HELM, TOFU], ids=["helm", "tofu"])
def test_creates_and_rollout_cost_one_write_per_instance(
        control_plane: Cluster, stack: Stack, request: pytest.FixtureRequest) -> None:
    """Counted by kube-apiserver: a create through the service is one backing write (and no Event, as for a
    custom resource); a rollout is one patch per instance -- no read per instance, no second list by the kind's
    cache (the new storage takes it over instead of listing again), and no list of the instances either: the
    round reads that cache, proven current by one list of one object and a write of its read fence."""
    request.getfixturevalue(stack.service_fixture)
    namespace = f"cost-{stack.service_fixture.split('_')[0]}"
    kubectl(control_plane, "create", "namespace", namespace, check=False)
    defn = _definition(stack, namespace, stem="costly")
    name, plural = defn["metadata"]["name"], defn["spec"]["application"]["plural"]
    instances = [f"i{n}" for n in range(6)]

    def rolled_out(generation: int) -> dict[str, Any] | None:
        progress = get_json(control_plane, stack.definitions, name).get("status", {}).get("rollout")
        return progress if progress and progress["complete"] and progress["observedGeneration"] == generation \
            else None

    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(defn))
    try:
        wait_for(lambda: plural in kubectl(control_plane, "api-resources", f"--api-group={stack.app_group}",
                                           "--cached=false").stdout, f"{plural} served", timeout=60)
        wait_for(lambda: rolled_out(get_json(control_plane, stack.definitions, name)["metadata"]["generation"]),
                 "the first rollout")
        before = served_requests(control_plane, stack.backing_group, stack.backing_plural)
        apps = [{"apiVersion": f"{stack.app_group}/v1alpha1", "kind": defn["spec"]["application"]["kind"],
                 "metadata": {"name": i, "namespace": namespace}, "spec": SPECS[stack.service_fixture]}
                for i in instances]
        for app in apps:
            kubectl(control_plane, "create", "-f", "-", input=json.dumps(app))
        assert served_requests(control_plane, stack.backing_group, stack.backing_plural) - before == Counter(
            {"POST": len(instances)})

        foreign = _foreign_fence(control_plane, stack, defn, namespace)
        before = served_requests(control_plane, stack.backing_group, stack.backing_plural)
        listed_before = listed_objects(control_plane, stack.backing_group, stack.backing_plural)
        changed = copy.deepcopy(defn)
        changed["spec"]["release"]["labels"] = {**defn["spec"]["release"]["labels"], "rollout": "two"}
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(changed))
        generation = get_json(control_plane, stack.definitions, name)["metadata"]["generation"]
        progress = wait_for(lambda: rolled_out(generation), "status.rollout complete", timeout=60)
        assert (progress["instances"], progress["rolledOut"]) == (len(instances),) * 2
        spent = served_requests(control_plane, stack.backing_group, stack.backing_plural) - before
        # Beyond a patch per instance, what proving the cache current cost: one list of limit=1, and at most
        # one write of the kind's read fence (a patch; the first time, answered 404, then a create).
        extra = spent - Counter({"PATCH": len(instances)})
        assert spent["PATCH"] >= len(instances) and extra["LIST"] == 1, spent
        assert set(extra) <= {"LIST", "PATCH", "POST"} and extra["PATCH"] <= 1 and extra["POST"] <= 1, spent
        assert listed_objects(control_plane, stack.backing_group, stack.backing_plural) - listed_before == 1
        # Another service's read fence is in the kind's cache too, and is no instance: left as it was.
        resource = f"{stack.backing_plural}.{stack.backing_group}"
        assert get_json(control_plane, resource, foreign["metadata"]["name"], "-n", namespace)["metadata"][
            "resourceVersion"] == foreign["metadata"]["resourceVersion"]
    finally:
        kubectl(control_plane, "delete", stack.definitions, name, "--ignore-not-found")
