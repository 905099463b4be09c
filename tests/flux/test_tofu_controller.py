"""The Tofu kinds' whole lifecycle with the real tofu-controller v0.16.5 and OpenTofu.

tofu_agl writes Terraforms; source-controller fetches their modules from the git server of the local
stack; tofu-controller (its runner in-process, ``tofu`` on its PATH) plans, applies, writes outputs,
detects drift and destroys; OpenTofu keeps each instance's state in a Secret. Every status these
tests read was written by those programs; the tests only act as a user would, through kubectl and
the Application kinds, and look at kube-apiserver's objects to check what happened.

The module is ``tests/data/modules/lifecycle`` (built-ins only), published as the git repository
``lifecycle``. Two kinds use it: ``Widget`` (auto approval, varsFrom, runner service account overrides)
and ``Gadget`` (manual approval). With ``AGL_RECORD_FLUX=1`` the statuses of each phase are recorded
into ``tests/data/status/terraform-<phase>.yaml``; otherwise each run checks they keep that shape.
"""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localcluster import flux, gitserver, services
from localcluster.cluster import Cluster

from tests.flux import events, tofu
from tests.flux.kstatus import verdict
from tests.kube import ROOT, Api, get_json, kubectl, wait_for
from tests.recorded import record_or_check_event, record_or_check_terraform

GROUP = tofu.GROUP
SLOW = tofu.SLOW
NS = "tenant-lifecycle"
TF = "terraforms.infra.contrib.fluxcd.io"
MODULE = tofu.LIFECYCLE_MODULE
REPOSITORY = "lifecycle"
APPROVE = f"{GROUP}/approve-plan"
SCHEMA = tofu.LIFECYCLE_SCHEMA


def lifecycle_definition(cluster: Cluster, kind: str, plural: str, approve: str, **terraform: Any) -> dict[str, Any]:
    return tofu.definition(
        cluster, kind, plural, SCHEMA, REPOSITORY, approvePlan=approve, destroyResourcesOnDeletion=True,
        writeOutputsToSecret={"name": "{{ .name }}-outputs",
                              "outputs": ["instance_id", "received", "from_config", "from_secret_length"]},
        varsFrom=[{"kind": "ConfigMap", "name": "lifecycle-config", "optional": True},
                  {"kind": "Secret", "name": "lifecycle-secret", "optional": True}],
        variableNaming="snake_case", storeReadablePlan="human", **terraform)


def application(kind: str, name: str, spec: dict[str, Any], annotations: dict[str, str] | None = None
                ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def stack(control_plane: Cluster, tofu_service: services.Running,
          flux_controllers: flux.Controllers) -> Iterator[Cluster]:
    """The module's repository served, its GitRepository Ready, both kinds Accepted and served."""
    cluster = control_plane
    tofu.serve_module(cluster, REPOSITORY, MODULE)
    kubectl(cluster, "create", "namespace", NS, check=False)
    for defn in (lifecycle_definition(cluster, "Widget", "widgets", "auto", allowServiceAccountOverride=True),
                 lifecycle_definition(cluster, "Gadget", "gadgets", "manual")):
        kubectl(cluster, "apply", "-f", "-", input=json.dumps(defn))
    tofu.served(cluster, "widgets", "gadgets")
    yield cluster


# ------------------------------------------------------------------------------------------ helpers
def app_of(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    got: dict[str, Any] = get_json(cluster, plural, name, "-n", NS)
    return got


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {})


def row(cluster: Cluster, plural: str, name: str) -> dict[str, str]:
    return tofu.row(cluster, plural, name, NS)


def wait_status(cluster: Cluster, plural: str, name: str, status: str) -> dict[str, str]:
    return tofu.wait_status(cluster, plural, name, NS, status)


def outputs(cluster: Cluster, name: str) -> dict[str, str]:
    secret = get_json(cluster, "secret", f"{name}-outputs", "-n", NS)
    return {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}


def state(cluster: Cluster, terraform_name: str) -> dict[str, Any]:
    """OpenTofu's state for one Terraform, read from the Secret its kubernetes backend keeps."""
    secret = get_json(cluster, "secret", f"tfstate-default-{terraform_name}", "-n", NS)
    loaded: dict[str, Any] = json.loads(gzip.decompress(base64.b64decode(secret["data"]["tfstate"])))
    return loaded


def resources_in_state(cluster: Cluster, terraform_name: str) -> list[str]:
    return [f"{r['type']}.{r['name']}" for r in state(cluster, terraform_name).get("resources", [])
            if r.get("mode") == "managed"]


def create(cluster: Cluster, kind: str, name: str, spec: dict[str, Any]) -> None:
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(application(kind, name, spec)))


def delete(cluster: Cluster, plural: str, name: str) -> None:
    kubectl(cluster, "delete", plural, name, "-n", NS, "--wait=true", "--timeout=300s")


def approve_commands(cluster: Cluster, name: str) -> list[list[str]]:
    """The command(s) the AwaitingApproval condition prints, split as a shell would (they need no quoting):
    one annotate, or a removal and an annotate joined by ``&&``."""
    message = condition(app_of(cluster, "gadgets", name), "AwaitingApproval")["message"]
    printed = message[message.index("approve it with: ") + len("approve it with: "):]
    commands = [part.split() for part in printed.split(" && ")]
    assert all(c[:2] == ["kubectl", "annotate"] for c in commands), message
    assert commands[-1][-1].startswith(f"{APPROVE}=plan-"), message
    return commands


def run_printed(cluster: Cluster, commands: list[list[str]], kubeconfig: Any = None) -> int:
    """Run the printed commands as a shell runs ``a && b``: stop at the first that fails; its exit code."""
    for command in commands:
        code = kubectl(cluster, *command[1:], check=False, kubeconfig=kubeconfig).returncode
        if code != 0:
            return code
    return 0


# ------------------------------------------------------------------------------------------ tests
def test_auto_approval_plans_applies_and_writes_outputs(stack: Cluster) -> None:
    create(stack, "Widget", "alpha", {"size": 3, "zones": ["a", "b"], "settings": {"enabled": True}})
    wait_status(stack, "widgets", "alpha", "Ready")
    record_or_check_terraform("applied", get_json(stack, TF, "widget-alpha", "-n", NS))
    app = app_of(stack, "widgets", "alpha")
    assert condition(app, "Ready")["status"] == "True"
    assert verdict(app)[0] == "Current"
    assert condition(app, "Applied")["status"] == "True"
    written = outputs(stack, "alpha")
    assert json.loads(written["received"]) == {"size": 3, "zones": ["a", "b"],
                                               "settings": {"enabled": True, "label": "none"}}
    assert written["instance_id"] and written["instance_id"] in json.dumps(state(stack, "widget-alpha"))
    assert app["status"]["outputs"] == {"secretName": "alpha-outputs",
                                        "names": sorted(["instance_id", "received", "from_config",
                                                         "from_secret_length"])}
    assert written["instance_id"] not in json.dumps(app), "an output value leaked into the Application"
    assert "from_secret_length" in written
    assert row(stack, "widgets", "alpha")["OUTPUTS"] == "alpha-outputs"


def test_manual_approval_with_the_printed_command_every_time(stack: Cluster) -> None:
    create(stack, "Gadget", "beta", {"size": 2})
    shown = wait_status(stack, "gadgets", "beta", "AwaitingApproval")
    terraform = get_json(stack, TF, "gadget-beta", "-n", NS)
    record_or_check_terraform("pending", terraform)
    pending = terraform["status"]["plan"]["pending"]
    assert shown["PLAN"] == pending and pending.startswith("plan-")
    assert terraform["spec"]["approvePlan"] == ""

    readable = kubectl(stack, "get", "--raw", f"/apis/{GROUP}/v1alpha1/namespaces/{NS}/gadgets/beta/plan").stdout
    assert "terraform_data.instance will be created" in readable, readable

    # Wrong, abbreviated and unrelated ids: 422 naming the pending id, and nothing changes.
    api = Api(stack)
    path = f"/apis/{GROUP}/v1alpha1/namespaces/{NS}/gadgets/beta"
    for wrong_id in (f"{pending}0", pending[:-3], "plan-main-deadbeef00"):
        code, body = api.request("PATCH", path, {"metadata": {"annotations": {APPROVE: wrong_id}}},
                                 content_type="application/merge-patch+json")
        assert code == 422 and body["reason"] == "Invalid", body
        assert f'the pending plan is "{pending}"' in body["message"], body
        assert [c["field"] for c in body["details"]["causes"]] == [f"metadata.annotations[{APPROVE}]"]
    wrong = kubectl(stack, "annotate", "gadget", "beta", "-n", NS, f"{APPROVE}={pending}0", check=False)
    assert wrong.returncode != 0 and f'the pending plan is "{pending}"' in wrong.stderr, wrong.stderr
    assert get_json(stack, TF, "gadget-beta", "-n", NS)["metadata"]["resourceVersion"] == \
        terraform["metadata"]["resourceVersion"], "a refused approval changed the Terraform"

    # The printed command, run by another user: tofu-controller applies, and the Event names who approved.
    alice = stack.user_kubeconfig("alice", ("system:masters",))
    assert len(approve_commands(stack, "beta")) == 1  # the first approval: one annotate
    assert run_printed(stack, approve_commands(stack, "beta"), kubeconfig=alice) == 0
    wait_status(stack, "gadgets", "beta", "Ready")
    described = kubectl(stack, "describe", "gadget", "beta", "-n", NS).stdout
    assert "PlanApproved" in described and "alice" in described, described
    assert json.loads(outputs(stack, "beta")["received"])["size"] == 2

    # A variables-only change: tofu-controller's new plan has the same id (it derives ids from the source
    # revision), and the command the status prints approves it.
    kubectl(stack, "patch", "gadget", "beta", "-n", NS, "--type=merge", "-p", '{"spec":{"size":5}}')
    shown = wait_status(stack, "gadgets", "beta", "AwaitingApproval")
    assert shown["PLAN"] == pending, "tofu-controller gave the new plan a new id: the same-id case is not exercised"
    # Ready may still say True from the last apply; kstatus must read the wait for approval as in progress
    status, said = verdict(app_of(stack, "gadgets", "beta"))
    assert status == "InProgress" and "approve it with: kubectl annotate gadgets beta" in said, said
    # Re-applying a manifest that still carries the approval approves nothing (a GitOps tool does that).
    kubectl(stack, "annotate", "gadget", "beta", "-n", NS, "--overwrite", f"{APPROVE}={pending}")
    time.sleep(5)
    assert json.loads(outputs(stack, "beta")["received"])["size"] == 2, "the new plan applied without approval"
    assert row(stack, "gadgets", "beta")["STATUS"] == "AwaitingApproval"
    commands = approve_commands(stack, "beta")
    assert commands[0][-1] == f"{APPROVE}-", commands  # the annotation holds the id: remove it, then set it
    assert run_printed(stack, commands) == 0
    wait_status(stack, "gadgets", "beta", "Ready")
    assert json.loads(outputs(stack, "beta")["received"])["size"] == 5


def test_instances_have_their_own_state_and_delete_destroys_only_their_own(stack: Cluster) -> None:
    for name in ("one", "two"):
        create(stack, "Widget", name, {"size": 1})
    for name in ("one", "two"):
        wait_status(stack, "widgets", name, "Ready")
        assert resources_in_state(stack, f"widget-{name}") == ["terraform_data.instance"]
    delete(stack, "widgets", "one")
    assert resources_in_state(stack, "widget-one") == []
    assert resources_in_state(stack, "widget-two") == ["terraform_data.instance"]


def test_failed_plan_shows_opentofu_message_and_is_retried(stack: Cluster) -> None:
    create(stack, "Widget", "broken", {"size": 99})
    shown = wait_status(stack, "widgets", "broken", "Failed")
    assert shown["READY"] == "False"
    record_or_check_terraform("failed", get_json(stack, TF, "widget-broken", "-n", NS))
    first = condition(app_of(stack, "widgets", "broken"), "Ready")
    assert "size must be between 1 and 10." in first["message"], first
    # only a changed spec helps: Failed for kstatus, though tofu-controller keeps retrying
    status, said = verdict(app_of(stack, "widgets", "broken"))
    assert status == "Failed" and "size must be between 1 and 10." in said, said

    def retried() -> bool:
        events = get_json(stack, "events", "-n", NS, "--field-selector",
                          "involvedObject.kind=Terraform,involvedObject.name=widget-broken")["items"]
        return sum(e.get("count", 1) for e in events if "size must be between" in e.get("message", "")) >= 2

    wait_for(retried, "tofu-controller to retry the failed plan after retryInterval", timeout=120, interval=2)
    # A tenant who reads only the Widget sees tofu-controller's own Event, relayed with its count.
    shown = wait_for(lambda: "size must be between 1 and 10." in (d := events.described_events(
        stack, "widgets", "broken", NS)) and d, "the failed plan in kubectl describe", timeout=60, interval=1)
    assert "TFExecPlanFailed" in shown and "tf-controller" in shown, shown  # tofu-controller reports as that
    assert "size must be between 1 and 10." in events.events_for(stack, "widget", "broken", NS)
    original = next(e for e in events.about(stack, NS, "Terraform", "widget-broken")
                    if "size must be between" in e.get("message", "") and e["reason"] == "TFExecPlanFailed")
    record_or_check_event("terraform-plan-failed", original)
    relayed = wait_for(lambda: [e for e in events.relayed(stack, NS, "Widget", "broken")
                                if events.origin(e) == f"{NS}/{original['metadata']['name']}"
                                and e["count"] == original["count"]], "the relayed Event with the count", timeout=60)
    assert len(relayed) == 1
    assert (relayed[0]["type"], relayed[0]["reason"], relayed[0]["message"]) == \
        (original["type"], original["reason"], original["message"])
    assert relayed[0]["source"]["component"] == "tf-controller"
    kubectl(stack, "patch", "widget", "broken", "-n", NS, "--type=merge", "-p", '{"spec":{"size":4}}')
    wait_status(stack, "widgets", "broken", "Ready")
    assert verdict(app_of(stack, "widgets", "broken"))[0] == "Current"  # Failed was not for ever


REDACTION = ROOT / "tests" / "data" / "modules" / "redaction"
#: Values that OpenTofu prints in clear in its diagnostic (the module does not mark them sensitive).
IN_THE_SPEC = "leak-in-the-spec-7f3a9c"
IN_A_SECRET = "leak-from-a-secret-5d1e08"
REDACTED = "(sensitive value)"


def test_relayed_events_carry_no_secret_values(stack: Cluster) -> None:
    """tofu-controller's Event holds OpenTofu's diagnostic with a sensitive spec value and a value from a Secret
    in clear; the Event relayed onto the Application holds neither."""
    tofu.serve_module(stack, "redaction", REDACTION)
    schema = {"type": "object", "properties": {"token": {"type": "string", "x-cozystack-sensitive": True}}}
    defn = tofu.definition(stack, "Keeper", "keepers", schema, "redaction", approvePlan="auto",
                           varsFrom=[{"kind": "Secret", "name": "keeper-secret"}], variableNaming="snake_case")
    kubectl(stack, "create", "secret", "generic", "keeper-secret", "-n", NS,
            f"--from-literal=from_secret={IN_A_SECRET}")
    kubectl(stack, "apply", "-f", "-", input=json.dumps(defn))
    try:
        tofu.served(stack, "keepers")
        create(stack, "Keeper", "vault", {"token": IN_THE_SPEC})

        def leaking() -> list[dict[str, Any]]:
            found = [e for e in events.about(stack, NS, "Terraform", "keeper-vault")
                     if IN_THE_SPEC in e.get("message", "") or IN_A_SECRET in e.get("message", "")]
            said = " ".join(e["message"] for e in found)
            return found if IN_THE_SPEC in said and IN_A_SECRET in said else []

        originals = wait_for(leaking, "tofu-controller's Events printing both values", timeout=SLOW, interval=2)
        origins = {f"{NS}/{e['metadata']['name']}" for e in originals}
        relayed = wait_for(lambda: (r := [e for e in events.relayed(stack, NS, "Keeper", "vault")
                                          if events.origin(e) in origins]) and len(r) == len(origins) and r,
                           "the relayed Events", timeout=60, interval=1)
        by_origin = {f"{NS}/{e['metadata']['name']}": e for e in originals}
        for event in relayed:
            original = by_origin[events.origin(event)]
            assert IN_THE_SPEC not in event["message"] and IN_A_SECRET not in event["message"], event["message"]
            expected = original["message"]
            for secret in (IN_THE_SPEC, IN_A_SECRET):  # masked as OpenTofu quotes it, then bare
                expected = expected.replace(json.dumps(secret), REDACTED).replace(secret, REDACTED)
            assert event["message"] == expected and "must not start with leak-" in expected
            assert (event["type"], event["reason"]) == (original["type"], original["reason"])
        assert "TFExecPlanFailed" in {e["reason"] for e in relayed}
        shown = events.described_events(stack, "keepers", "vault", NS)
        assert "must not start with leak-" in shown and IN_THE_SPEC not in shown and IN_A_SECRET not in shown
        # The same diagnostic is tofu-controller's Ready message; the Application repeats it masked.
        said = condition(get_json(stack, TF, "keeper-vault", "-n", NS), "Ready")["message"]
        assert IN_THE_SPEC in said or IN_A_SECRET in said, said

        def status_masked() -> bool:
            app = app_of(stack, "keepers", "vault")
            shown = json.dumps(app["status"])  # the spec is the user's own, token included
            assert IN_THE_SPEC not in shown and IN_A_SECRET not in shown, shown
            return "must not start with leak-" in condition(app, "Ready")["message"]

        wait_for(status_masked, "the Application's Ready message masked", timeout=30, interval=0.5)
    finally:
        kubectl(stack, "delete", "keeper", "vault", "-n", NS, "--wait=true", "--timeout=120s", check=False)
        kubectl(stack, "delete", "tofuapplicationdefinition", "keepers", check=False)
        kubectl(stack, "delete", "secret", "keeper-secret", "-n", NS, check=False)


def test_delete_shows_deleting_while_the_destroy_runs(stack: Cluster) -> None:
    create(stack, "Widget", "gone", {"size": 1})
    wait_status(stack, "widgets", "gone", "Ready")
    assert resources_in_state(stack, "widget-gone") == ["terraform_data.instance"]
    kubectl(stack, "delete", "widget", "gone", "-n", NS, "--wait=false")
    seen = wait_for(lambda: (a := app_of(stack, "widgets", "gone"))["metadata"].get("deletionTimestamp") and a,
                    "the Application to show its deletionTimestamp", timeout=30, interval=0.2)
    assert seen["metadata"]["deletionTimestamp"]
    assert row(stack, "widgets", "gone")["STATUS"] == "Deleting"
    # The deletionTimestamp raised the generation; tofu-controller's status is the deletion's once its
    # Reconciling condition observed that generation (it may be busy with another Terraform until then).
    def taken_up() -> dict[str, Any] | None:
        terraform = get_json(stack, TF, "widget-gone", "-n", NS)
        generation = terraform["metadata"]["generation"]
        return terraform if condition(terraform, "Reconciling").get("observedGeneration") == generation else None

    record_or_check_terraform("deleting", wait_for(taken_up, "tofu-controller to take up the deletion",
                                                   timeout=SLOW, interval=0.2))
    kubectl(stack, "wait", "--for=delete", "widget/gone", "-n", NS, f"--timeout={SLOW}s")
    assert resources_in_state(stack, "widget-gone") == []


def test_delete_without_destroy_keeps_the_resources_in_state(stack: Cluster) -> None:
    kubectl(stack, "patch", "tofuapplicationdefinition", "widgets", "--type=merge",
            "-p", '{"spec":{"terraform":{"destroyResourcesOnDeletion":false}}}')
    try:
        wait_for(lambda: get_json(stack, "tofuapplicationdefinition", "widgets")["status"]["observedGeneration"] ==
                 get_json(stack, "tofuapplicationdefinition", "widgets")["metadata"]["generation"],
                 "the definition change to be observed", timeout=60)
        create(stack, "Widget", "kept", {"size": 1})
        wait_status(stack, "widgets", "kept", "Ready")
        wait_for(lambda: get_json(stack, TF, "widget-kept", "-n", NS)["spec"].get("destroyResourcesOnDeletion")
                 is False, "the Terraform to carry destroyResourcesOnDeletion false")
        delete(stack, "widgets", "kept")
        assert resources_in_state(stack, "widget-kept") == ["terraform_data.instance"]
    finally:
        kubectl(stack, "patch", "tofuapplicationdefinition", "widgets", "--type=merge",
                "-p", '{"spec":{"terraform":{"destroyResourcesOnDeletion":true}}}')


def test_drift_shows_as_drifted(stack: Cluster) -> None:
    """Real drift: the recorded infrastructure (the state) changes behind tofu-controller's back; its next
    reconcile finds it. A manual kind waits for a human instead of repairing it."""
    create(stack, "Gadget", "drifty", {"size": 2})
    wait_status(stack, "gadgets", "drifty", "AwaitingApproval")
    assert run_printed(stack, approve_commands(stack, "drifty")) == 0
    wait_status(stack, "gadgets", "drifty", "Ready")
    secret = get_json(stack, "secret", "tfstate-default-gadget-drifty", "-n", NS)
    recorded = json.loads(gzip.decompress(base64.b64decode(secret["data"]["tfstate"])))
    recorded["serial"] += 1
    for resource in recorded["resources"]:
        resource["instances"][0]["attributes"]["input"]["value"]["size"] = 7
    changed = base64.b64encode(gzip.compress(json.dumps(recorded).encode())).decode()
    kubectl(stack, "patch", "secret", "tfstate-default-gadget-drifty", "-n", NS, "--type=merge",
            "-p", json.dumps({"data": {"tfstate": changed}}))
    kubectl(stack, "annotate", TF, "gadget-drifty", "-n", NS, "--overwrite",
            f"reconcile.fluxcd.io/requestedAt={time.time()}")
    shown = wait_status(stack, "gadgets", "drifty", "Drifted")
    assert shown["READY"] == "False"
    ready = condition(app_of(stack, "gadgets", "drifty"), "Ready")
    assert ready["reason"] == "DriftDetected" and "size" in ready["message"], ready
    assert verdict(app_of(stack, "gadgets", "drifty"))[0] == "Failed"  # a manual kind waits for a human
    record_or_check_terraform("drifted", get_json(stack, TF, "gadget-drifty", "-n", NS))


def test_read_fences_are_left_alone_by_tofu_controller(stack: Cluster) -> None:
    """The kinds' read fences are suspended Terraforms: tofu-controller adds its finalizer and records that
    it saw them, and never plans, applies or writes state for them."""
    for plural in ("widgets", "gadgets"):
        get_json(stack, plural, "-A")  # a consistent list: the kind's fence is written if it was not yet

    def fences() -> list[dict[str, Any]]:
        return [t for t in get_json(stack, TF, "-A")["items"] if t["metadata"]["name"].startswith("read-fence.")]

    wait_for(lambda: {"read-fence.widget", "read-fence.gadget"} <= {t["metadata"]["name"] for t in fences()},
             "both kinds' read fences")
    wait_for(lambda: all((f.get("status") or {}).get("observedGeneration") == -1 for f in fences()),
             "tofu-controller to have seen every fence", timeout=60)
    for fence in fences():
        assert fence["metadata"].get("finalizers") == ["finalizers.tf.contrib.fluxcd.io"], fence["metadata"]
        assert fence["spec"]["suspend"] is True
        assert not (fence.get("status") or {}).get("conditions"), fence.get("status")
        namespace = fence["metadata"]["namespace"]
        secrets = [s["metadata"]["name"] for s in get_json(stack, "secrets", "-n", namespace)["items"]]
        assert not [s for s in secrets if fence["metadata"]["name"] in s], secrets


def test_vars_from_and_runner_service_account_reach_the_run(stack: Cluster) -> None:
    kubectl(stack, "create", "configmap", "lifecycle-config", "-n", NS, "--from-literal=from_config=from-a-map")
    kubectl(stack, "create", "secret", "generic", "lifecycle-secret", "-n", NS, "--from-literal=from_secret=12345")
    try:
        kubectl(stack, "apply", "-f", "-", input=json.dumps(application(
            "Widget", "ident", {"size": 1}, {f"{GROUP}/runner-service-account": "tenant-runner"})))
        wait_status(stack, "widgets", "ident", "Ready")
        written = outputs(stack, "ident")
        assert written["from_config"] == "from-a-map"
        assert written["from_secret_length"] == "5"
        assert "12345" not in json.dumps(app_of(stack, "widgets", "ident"))
        # The local runner is tofu-controller's in-process one: the service account is what a runner pod
        # would run as (the kind tier's business); here it must reach the Terraform tofu-controller ran.
        assert get_json(stack, TF, "widget-ident", "-n", NS)["spec"]["serviceAccountName"] == "tenant-runner"
    finally:
        kubectl(stack, "delete", "configmap", "lifecycle-config", "-n", NS, check=False)
        kubectl(stack, "delete", "secret", "lifecycle-secret", "-n", NS, check=False)


def test_definition_rollout_reaches_the_controller_and_keeps_state(stack: Cluster) -> None:
    create(stack, "Gadget", "rolled", {"size": 3})
    wait_status(stack, "gadgets", "rolled", "AwaitingApproval")
    before = get_json(stack, TF, "gadget-rolled", "-n", NS)["spec"]
    kubectl(stack, "patch", "tofuapplicationdefinition", "gadgets", "--type=merge", "-p", json.dumps(
        {"spec": {"terraform": {"approvePlan": "auto", "interval": "7m",
                                "writeOutputsToSecret": {"name": "{{ .name }}-outputs",
                                                         "outputs": ["instance_id", "received"]},
                                "workspace": "elsewhere"}}}))
    try:
        # auto: the plan that waited is applied by tofu-controller without anyone approving it.
        wait_status(stack, "gadgets", "rolled", "Ready")
        after = get_json(stack, TF, "gadget-rolled", "-n", NS)["spec"]
        assert after["interval"] == "7m" and after["approvePlan"] == "auto"
        assert after["writeOutputsToSecret"]["outputs"] == ["instance_id", "received"]
        # tofu-controller writes a non-string output as JSON, with its OpenTofu type under "<name>__type".
        assert sorted(outputs(stack, "rolled")) == ["instance_id", "received", "received__type"]
        assert after.get("workspace") == before.get("workspace") and after["backendConfig"] == before["backendConfig"]
        assert resources_in_state(stack, "gadget-rolled") == ["terraform_data.instance"]
    finally:
        kubectl(stack, "patch", "tofuapplicationdefinition", "gadgets", "--type=json", "-p", json.dumps(
            [{"op": "replace", "path": "/spec/terraform/approvePlan", "value": "manual"},
             {"op": "replace", "path": "/spec/terraform/interval", "value": "10m"},
             {"op": "remove", "path": "/spec/terraform/workspace"}]))


def test_a_new_source_revision_supersedes_the_pending_plan(stack: Cluster, tmp_path: Path) -> None:
    """Runs last: a new commit of the module replans every instance of both kinds."""
    create(stack, "Gadget", "next", {"size": 1})
    first = wait_status(stack, "gadgets", "next", "AwaitingApproval")["PLAN"]
    changed = tmp_path / "module"
    shutil.copytree(MODULE, changed)
    (changed / "NOTES.md").write_text("A second revision of the module: same code, a new commit.\n")
    revision = gitserver.commit(gitserver.repositories_root(stack), REPOSITORY, changed)
    kubectl(stack, "annotate", "gitrepositories.source.toolkit.fluxcd.io", REPOSITORY, "-n",
            flux.SOURCES_NAMESPACE, "--overwrite", f"reconcile.fluxcd.io/requestedAt={time.time()}")
    second = wait_for(lambda: (plan := row(stack, "gadgets", "next")["PLAN"]) not in (first, "-") and plan,
                      "tofu-controller's plan for the new revision", timeout=SLOW, interval=1)
    assert second == f"plan-main-{revision[:10]}"
    refused = kubectl(stack, "annotate", "gadget", "next", "-n", NS, "--overwrite", f"{APPROVE}={first}",
                      check=False)
    assert refused.returncode != 0 and f'the pending plan is "{second}"' in refused.stderr, refused.stderr
    assert get_json(stack, TF, "gadget-next", "-n", NS)["spec"]["approvePlan"] == ""
    assert run_printed(stack, approve_commands(stack, "next")) == 0
    wait_status(stack, "gadgets", "next", "Ready")
