"""Events, deletion and the rollout of a definition change to existing instances."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.contract.stack import KIND, ORACLE_GROUP, ORACLE_NAMESPACE, PREFIX, USER_KEY_PREFIX, Contract, Stack, served
from tests.kube import wait_for

#: The label that names the Application on its backing object (the same key on both stacks).
IDENTITY_LABEL = "apps.cozystack.io/application.name"
KIND_LABEL = "apps.cozystack.io/application.kind"
GROUP_LABEL = "apps.cozystack.io/application.group"

# ------------------------------------------------------------------------- Events


def test_a_create_records_no_event_and_an_update_shows_in_describe(contract: Contract, stack: Stack,
                                                                  oracle: str) -> None:
    """kube-apiserver records no Event when a custom resource is created or changed (the oracle CRD shows it), and a
    create through the service records none either: the backend controller's Events, relayed onto the Application,
    say what became of it.  The service's ``Updated`` Event is kept.  The create's answer came long before the
    patch was sent, so its Event, had there been one, would be written by the time the update's is."""
    contract.apply("described", {"size": 1})
    contract.patch("described", {"spec": {"size": 2}})
    backing = f"{stack.backing_kind} {stack.namespace}/{PREFIX}described"
    out = wait_for(lambda: (o := contract.kubectl("describe", stack.resource, "described").stdout)
                   and "Updated" in o and o, "describe to show the Updated event")
    assert f"{backing} updated" in out and f"{backing} created" not in out, out
    events = contract.events_of("described", stack.namespace)
    assert [e["reason"] for e in events] == ["Updated"], events
    assert events[0]["involvedObject"]["kind"] == KIND
    assert events[0]["involvedObject"]["apiVersion"] == stack.api_version
    assert events[0]["type"] == "Normal"

    # The oracle: a custom resource created and changed the same way has no Event at all.
    evented = f"evented-{stack.name}"
    code, body = contract.api.request("POST", oracle, stack.manifest(evented, {"size": 1}) | {
        "apiVersion": f"{ORACLE_GROUP}/v1alpha1", "metadata": {"name": evented}})
    assert code == 201, body
    code, body = contract.api.request("PATCH", f"{oracle}/{evented}", {"spec": {"size": 2}},
                                      content_type="application/merge-patch+json")
    assert code == 200, body
    assert contract.events_of(evented, ORACLE_NAMESPACE) == []


# ------------------------------------------------------------------------- deletion


def test_delete_answers_200_and_removes_both(contract: Contract, stack: Stack) -> None:
    contract.apply("gone", {"size": 1})
    code, body = contract.api.request("DELETE", stack.path("gone"))
    assert code == 200, body
    # Gone at once (no finalizer): a Success Status naming the Application, as for a custom resource.
    assert (body["kind"], body["status"], body["details"]["name"]) == ("Status", "Success", "gone"), body
    assert contract.backing("gone") is None
    code, body = contract.api.request("GET", stack.path("gone"))
    assert code == 404 and body["reason"] == "NotFound", body
    assert contract.kubectl("get", stack.resource, "gone", check=False).returncode != 0


def test_delete_with_a_backend_finalizer_keeps_the_application_visible(contract: Contract, stack: Stack) -> None:
    contract.apply("finalized", {"size": 1})
    contract.api.request("PATCH", stack.backing_path("finalized"),
                         {"metadata": {"finalizers": [stack.backing_finalizer]}},
                         content_type="application/merge-patch+json")
    code, body = contract.api.request("DELETE", stack.path("finalized"))
    assert code == 200, body
    app = contract.get("finalized")
    assert app["metadata"].get("deletionTimestamp"), app
    assert (contract.backing("finalized") or {})["metadata"].get("deletionTimestamp")
    code, body = contract.api.request("PATCH", stack.backing_path("finalized"), {"metadata": {"finalizers": None}},
                                      content_type="application/merge-patch+json")
    assert code == 200, body
    wait_for(lambda: contract.backing("finalized") is None, "backing object gone")
    code, body = contract.api.request("GET", stack.path("finalized"))
    assert code == 404, body


# ------------------------------------------------------------------------- rollout


def _rollout_definition(stack: Stack, singular: str = "contractrollout", kind: str = "ContractRollout",
                        prefix: str = "rollout-") -> dict[str, Any]:
    """Another contract definition, so that its rollout touches no other test's objects."""
    defn = copy.deepcopy(stack.definition)
    defn["metadata"]["name"] = singular
    defn["spec"]["application"].update(kind=kind, plural=f"{singular}s", singular=singular)
    defn["spec"]["release"]["prefix"] = prefix
    return defn


def test_definition_change_rolls_out_to_existing_instances(contract: Contract, stack: Stack) -> None:
    defn = _rollout_definition(stack)
    resource = f"contractrollouts.{stack.group}"
    contract.kubectl_input("apply", "-f", "-", body=json.dumps(defn))
    wait_for(lambda: resource in served(contract.cluster, stack.group), f"{resource} served", timeout=60)
    names = ("one", "two")
    for name in names:
        manifest = stack.manifest(name, {"size": 1}, labels={"team": "a"}) | {"kind": "ContractRollout"}
        assert contract.kubectl_input("apply", "-f", "-", body=json.dumps(manifest)).returncode == 0
    backing_of = {n: f"rollout-{n}" for n in names}
    before = {n: contract.backing_named(b) for n, b in backing_of.items()}

    changed, carries_change = stack.rollout(defn)
    # The identity label is reserved: a definition that names it changes nothing of it, on either stack.
    changed["spec"]["release"]["labels"] = {"contract.example/origin": "definition-v2", "contract.example/new": "yes",
                                            IDENTITY_LABEL: "someone-else"}
    contract.kubectl_input("apply", "-f", "-", body=json.dumps(changed))
    for name, backing in backing_of.items():
        wait_for(lambda b=backing: carries_change(contract.backing_named(b)), f"rollout to {backing}")
        after = contract.backing_named(backing)
        labels = after["metadata"]["labels"]
        assert labels["contract.example/origin"] == "definition-v2" and labels["contract.example/new"] == "yes"
        # The user's own labels and spec are not the definition's to change.
        assert labels["apps.cozystack.io-team"] == "a"
        assert labels[IDENTITY_LABEL] == name, labels
        assert stack.written_spec(after) == stack.written_spec(before[name])
    event = wait_for(lambda: next((e for e in contract.events_of("contractrollout") if e["reason"] == "RolledOut"
                                   and "2" in e["message"]), None), "RolledOut event on the definition")
    assert event["type"] == "Normal" and event["involvedObject"]["name"] == "contractrollout", event

    code, v3 = contract.api.request("GET", f"/openapi/v3/apis/{stack.group}/v1alpha1")
    assert code == 200 and any(key.endswith(".ContractRollout") for key in v3["components"]["schemas"]), v3

    # Deleting the definition stops serving the kind and never touches a backing object.
    contract.kubectl("delete", stack.definition_resource, "contractrollout")
    wait_for(lambda: resource not in served(contract.cluster, stack.group), f"{resource} no longer served")
    for backing in backing_of.values():
        assert contract.backing_named(backing)["metadata"].get("deletionTimestamp") is None
    assert stack.resource in served(contract.cluster, stack.group)


def _impostor_labels(version: str) -> dict[str, str]:
    """Release labels that name every key a definition must not set, beside one it may."""
    return {"contract.example/origin": f"definition-{version}", IDENTITY_LABEL: f"someone-else-{version}",
            KIND_LABEL: f"Impostor{version}", GROUP_LABEL: f"impostor-{version}.example",
            f"{USER_KEY_PREFIX}team": f"definition-{version}"}


def test_a_definition_never_sets_identity_or_user_labels(contract: Contract, stack: Stack) -> None:
    """On create and on rollout alike: a definition's release labels are its own keys only."""
    defn = _rollout_definition(stack, "contractreserved", "ContractReserved", "reserved-")
    defn["spec"]["release"]["labels"] = _impostor_labels("v1")
    resource = f"contractreserveds.{stack.group}"
    contract.kubectl_input("apply", "-f", "-", body=json.dumps(defn))
    wait_for(lambda: resource in served(contract.cluster, stack.group), f"{resource} served", timeout=60)
    users = {"labelled": {"team": "a"}, "bare": {}}
    for name, labels in users.items():
        manifest = stack.manifest(name, {"size": 1}, labels=labels) | {"kind": "ContractReserved"}
        assert contract.kubectl_input("apply", "-f", "-", body=json.dumps(manifest)).returncode == 0

    def check(version: str) -> None:
        for name, labels in users.items():
            backing = contract.backing_named(f"reserved-{name}")["metadata"]["labels"]
            assert {k: v for k, v in backing.items() if not k.startswith("contract.example/")} == {
                IDENTITY_LABEL: name, KIND_LABEL: "ContractReserved", GROUP_LABEL: stack.group,
                **{f"{USER_KEY_PREFIX}{k}": v for k, v in labels.items()}}, backing
            assert backing["contract.example/origin"] == f"definition-{version}"
            code, app = contract.api.request("GET", f"/apis/{stack.api_version}/namespaces/{stack.namespace}/"
                                                    f"contractreserveds/{name}")
            assert code == 200 and (app["metadata"].get("labels") or {}) == labels, app

    check("v1")
    changed, carries_change = stack.rollout(defn)
    changed["spec"]["release"]["labels"] = _impostor_labels("v2")
    contract.kubectl_input("apply", "-f", "-", body=json.dumps(changed))
    for name in users:
        wait_for(lambda b=f"reserved-{name}": carries_change(contract.backing_named(b)), f"rollout to {name}")
    wait_for(lambda: all(contract.backing_named(f"reserved-{n}")["metadata"]["labels"]["contract.example/origin"]
                         == "definition-v2" for n in users), "the release label rolled out")
    check("v2")
    contract.kubectl("delete", stack.definition_resource, "contractreserved")
    wait_for(lambda: resource not in served(contract.cluster, stack.group), f"{resource} no longer served")
