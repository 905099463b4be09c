"""Plan preview before approval (SPEC §10, issue #13) with the real tofu-controller v0.16.5 and OpenTofu.

Nothing here plays tofu-controller: ``tests/data/modules/preview`` is published as the git repository
``sites`` on the local git server, source-controller fetches it, and tofu-controller (its runner
in-process, ``tofu`` on its PATH) plans, stores the readable plan (a ConfigMap for
``storeReadablePlan: human``, a gzip'd Secret for ``json``), sets the pending status and applies once
approved. The tests act as a user would, through kubectl and the Application kinds, and look at the
objects tofu-controller wrote to check what the service serves from them.

Each scenario applies a first plan (approved with the command the status prints), then changes the
spec: the second plan updates, replaces and destroys resources that already hold the sensitive
password in state, and OpenTofu itself prints it in clear in ``terraform_data``'s ``output``
attribute, so the tests also prove the service's own masking, not only OpenTofu's.
"""

from __future__ import annotations

import base64
import gzip
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import flux, services
from localcluster.cluster import Cluster

from tests.flux import tofu
from tests.kube import ROOT, get_json, kubectl, load_fixture, wait_for

GROUP = tofu.GROUP
VERSION = "v1alpha1"
NS = "tenant-preview"
TF = "terraforms.infra.contrib.fluxcd.io"
APPROVE = "tofu.apps.cozystack.io/approve-plan"
MODULE = ROOT / "tests" / "data" / "modules" / "preview"
REPOSITORY = "sites"
#: tofu-controller's workspace when the Terraform names none (the kinds here name none).
WORKSPACE = "default"
PASSWORD = "s3cret-pw-42"
SLOW = tofu.SLOW
#: What the first plan of an instance with the default variables does: everything is created.
FIRST_PLAN: dict[str, Any] = {
    "add": 4, "change": 0, "destroy": 0,
    "resources": [
        {"address": "terraform_data.dns", "action": "create"},
        {"address": "terraform_data.replica[0]", "action": "create"},
        {"address": "terraform_data.replica[1]", "action": "create"},
        {"address": "terraform_data.server", "action": "create"},
    ],
}
#: What the second plan of the scenario does, as OpenTofu reports it.
SECOND_PLAN: dict[str, Any] = {
    "add": 1, "change": 2, "destroy": 2,
    "resources": [
        {"address": "terraform_data.dns", "action": "update"},
        {"address": "terraform_data.replica[0]", "action": "replace"},
        {"address": "terraform_data.replica[1]", "action": "delete"},
        {"address": "terraform_data.server", "action": "update"},
    ],
}
SCHEMA = {
    "type": "object",
    "required": ["db_password"],
    "properties": {
        "name": {"type": "string", "default": "web"},
        "db_password": {"type": "string", "x-cozystack-sensitive": True},
        "replicas": {"type": "integer", "default": 2},
    },
}
#: kind -> (plural, storeReadablePlan)
KINDS = {"WebSite": ("websites", "human"), "JsonSite": ("jsonsites", "json")}


# ------------------------------------------------------------------------------------ helpers


def as_front_proxy(cluster: Cluster, port: int, path: str, user: str) -> tuple[int, Any]:
    """GET straight to the service with kube-apiserver's front-proxy certificate, asserting ``user``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # who the client is is under test, not the server
    ctx.load_cert_chain(cluster.pki_dir / "front-proxy-client.crt", cluster.pki_dir / "front-proxy-client.key")
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers={"X-Remote-User": user})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def definition(cluster: Cluster, kind: str) -> dict[str, Any]:
    plural, readable = KINDS[kind]
    return tofu.definition(cluster, kind, plural, SCHEMA, REPOSITORY, approvePlan="manual",
                           variableNaming="verbatim", storeReadablePlan=readable)


def apply_app(cluster: Cluster, kind: str, name: str, spec: dict[str, Any]) -> None:
    app = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name, "namespace": NS},
           "spec": spec}
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(app))


def terraform(cluster: Cluster, name: str) -> dict[str, Any]:
    result: dict[str, Any] = get_json(cluster, TF, name, "-n", NS)
    return result


def row(cluster: Cluster, plural: str, name: str) -> dict[str, str]:
    return tofu.row(cluster, plural, name, NS)


def wait_status(cluster: Cluster, plural: str, name: str, status: str) -> dict[str, str]:
    return tofu.wait_status(cluster, plural, name, NS, status)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {})


def printed_commands(cluster: Cluster, plural: str, name: str) -> list[list[str]]:
    """The commands the AwaitingApproval condition ends with, each split as a shell would (no quoting).

    One ``kubectl annotate``, or, when the annotation already holds the pending id (a replan at the same
    source revision gets the id of the plan approved before), one that removes it ``&&`` one that sets it.
    """
    message = str(condition(get_json(cluster, plural, name, "-n", NS), "AwaitingApproval")["message"])
    commands = [part.split() for part in message[message.index("kubectl annotate"):].split(" && ")]
    for command in commands:
        assert command[:6] == ["kubectl", "annotate", plural, name, "-n", NS], message
    assert commands[-1][-2] == "--overwrite" and commands[-1][-1].startswith(f"{APPROVE}=plan-"), message
    return commands


def run_printed(cluster: Cluster, plural: str, name: str) -> None:
    for command in printed_commands(cluster, plural, name):
        done = kubectl(cluster, *command[1:], check=False)
        assert done.returncode == 0, (command, done.stderr)


def stored_plan_object(cluster: Cluster, tf_name: str, fmt: str) -> tuple[str, str]:
    """(resource/name, plan id) of the readable plan tofu-controller stored for Terraform ``tf_name``."""
    resource, plan_name = ("configmaps", tf_name) if fmt == "human" else ("secrets", f"{tf_name}.json")
    found = get_json(cluster, resource, "-n", NS, "-l", f"infra.contrib.fluxcd.io/plan-name={plan_name}")["items"]
    assert [o["metadata"]["name"] for o in found] == [f"tfplan-{WORKSPACE}-{plan_name}"], found
    return f"{resource}/{found[0]['metadata']['name']}", found[0]["metadata"]["annotations"]["savedPlan"]


def stored_plan_text(cluster: Cluster, tf_name: str, fmt: str) -> str:
    """The readable plan as tofu-controller stored it: ``tofu show`` text, or the JSON plan gunzipped."""
    where, _ = stored_plan_object(cluster, tf_name, fmt)
    data = get_json(cluster, where, "-n", NS)["data"]["tfplan"]
    return str(data) if fmt == "human" else gzip.decompress(base64.b64decode(data)).decode()


def plan_url(plural: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{plural}/{name}/plan"


def raw(cluster: Cluster, path: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    return kubectl(cluster, "get", "--raw", path, check=False, kubeconfig=kubeconfig)


def resources_in_state(cluster: Cluster, tf_name: str) -> list[str]:
    """The managed resources in OpenTofu's state, read from the Secret its kubernetes backend keeps."""
    secret = get_json(cluster, "secret", f"tfstate-{WORKSPACE}-{tf_name}", "-n", NS)
    state = json.loads(gzip.decompress(base64.b64decode(secret["data"]["tfstate"])))
    return sorted(f"{r['type']}.{r['name']}" + (f"[{i['index_key']}]" if "index_key" in i else "")
                  for r in state.get("resources", []) if r.get("mode") == "managed" for i in r["instances"])


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def cluster(control_plane: Cluster, tofu_service: services.Running,
            flux_controllers: flux.Controllers) -> Iterator[Cluster]:
    """The module served as git repository ``sites``, its GitRepository Ready, both preview kinds served."""
    tofu.serve_module(control_plane, REPOSITORY, MODULE)
    kubectl(control_plane, "create", "namespace", NS, check=False)
    for kind in KINDS:
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(definition(control_plane, kind)))
    tofu.served(control_plane, *(plural for plural, _ in KINDS.values()))
    yield control_plane
    # While tofu-controller still runs, so that it lets go of the Terraforms (no destroy: not asked for).
    # The local control plane has no namespace controller: the namespace itself is only marked for deletion.
    kubectl(control_plane, "delete", ",".join(plural for plural, _ in KINDS.values()), "--all", "-n", NS,
            "--wait=true", "--timeout=100s", check=False)
    kubectl(control_plane, "delete", "namespace", NS, "--wait=false", check=False)
    kubectl(control_plane, "delete", "tofuapplicationdefinitions", *(k.lower() for k in KINDS), "--ignore-not-found",
            check=False)
    kubectl(control_plane, "delete", "gitrepositories.source.toolkit.fluxcd.io", REPOSITORY,
            "-n", flux.SOURCES_NAMESPACE, "--ignore-not-found", check=False)


@pytest.fixture(scope="module", params=list(KINDS))
def pending(request: pytest.FixtureRequest, cluster: Cluster) -> tuple[str, str, str, str]:
    """An Application of ``kind`` whose second plan waits for approval; (kind, name, plan id, stored text).

    The first plan is approved with the command the status prints and applied by tofu-controller; the
    second is tofu-controller's real pending plan, and the text is the readable plan it stored.
    """
    kind: str = request.param
    plural, fmt = KINDS[kind]
    name = "shop"
    tf_name = f"{kind.lower()}-{name}"

    apply_app(cluster, kind, name, {"db_password": PASSWORD})
    wait_status(cluster, plural, name, "AwaitingApproval")
    assert len(printed_commands(cluster, plural, name)) == 1
    run_printed(cluster, plural, name)
    wait_status(cluster, plural, name, "Ready")
    assert resources_in_state(cluster, tf_name) == [
        "terraform_data.dns", "terraform_data.replica[0]", "terraform_data.replica[1]", "terraform_data.server"]

    apply_app(cluster, kind, name, {"db_password": PASSWORD, "name": "api", "replicas": 1})
    shown = wait_status(cluster, plural, name, "AwaitingApproval")
    plan_id = terraform(cluster, tf_name)["status"]["plan"]["pending"]
    assert plan_id.startswith("plan-main-") and shown["PLAN"] == plan_id, (plan_id, shown)
    assert stored_plan_object(cluster, tf_name, fmt)[1] == plan_id
    return kind, name, plan_id, stored_plan_text(cluster, tf_name, fmt)


# ------------------------------------------------------------------------------------ tests


def test_plan_is_a_get_only_subresource_in_discovery(cluster: Cluster) -> None:
    resources = json.loads(raw(cluster, f"/apis/{GROUP}/{VERSION}").stdout)["resources"]
    by_name = {r["name"]: r for r in resources}
    for kind, (plural, _) in KINDS.items():
        assert by_name[f"{plural}/plan"]["verbs"] == ["get"], by_name.get(f"{plural}/plan")
        assert by_name[f"{plural}/plan"]["kind"] == kind


def test_summary_in_status_and_describe(cluster: Cluster, pending: tuple[str, str, str, str],
                                        tofu_service: services.Running) -> None:
    kind, name, plan_id, stored = pending
    plural, _ = KINDS[kind]
    # OpenTofu itself leaks it in the plan tofu-controller stored (terraform_data.output, read from state):
    # whatever the service serves from it must be masked by the service.
    assert PASSWORD in stored
    app = wait_for(lambda: (a := get_json(cluster, plural, name, "-n", NS))["status"].get("plan", {}).get("summary")
                   and a, "the plan summary in the status")
    # The first plan had the same id: tofu-controller derives ids from the source revision, which did not change.
    assert app["status"]["plan"] == {"lastApplied": plan_id, "pending": plan_id, "summary": SECOND_PLAN}
    awaiting = condition(app, "AwaitingApproval")
    assert awaiting["status"] == "True"
    assert "status.plan.summary" in awaiting["message"]
    assert f"kubectl get --raw {plan_url(plural, name)}" in awaiting["message"]
    assert awaiting["message"].endswith(f"--overwrite {APPROVE}={plan_id}")
    described = kubectl(cluster, "describe", plural, name, "-n", NS).stdout
    assert "Summary:" in described and "terraform_data.replica[1]" in described, described
    # The spec holds what the user wrote; the status and everything under it in describe never do.
    assert PASSWORD not in json.dumps(app["status"]) and PASSWORD not in described.split("\nStatus:", 1)[1]
    events = kubectl(cluster, "get", "events", "-n", NS, "-o", "json").stdout
    assert PASSWORD not in events
    assert PASSWORD not in tofu_service.log.read_text(errors="replace")


def test_a_plan_no_longer_stored_reads_as_not_stored_until_tofu_controller_plans_again(
        cluster: Cluster, pending: tuple[str, str, str, str]) -> None:
    """The readable plan of a pending plan is gone (deleted behind tofu-controller's back): the plan
    subresource says it is not stored; tofu-controller stores one again only when it plans again.

    This replaces a test that read the status before the plan was stored: tofu-controller stores the
    readable plan before it sets the pending status (SaveTFPlan, then the status patch), so with it a
    pending plan is never seen unstored; a plan object removed afterwards is the real case. The status
    keeps the summary the service already read for that plan (summaries are read once per plan), and a
    reconcile request does not re-plan: tofu-controller leaves a plan waiting for approval as it is.
    """
    kind, _, _, _ = pending
    plural, fmt = KINDS[kind]
    tf_name = f"{kind.lower()}-late"
    apply_app(cluster, kind, "late", {"db_password": PASSWORD})
    wait_status(cluster, plural, "late", "AwaitingApproval")
    planned = terraform(cluster, tf_name)["status"]
    plan_id = planned["plan"]["pending"]
    assert get_json(cluster, plural, "late", "-n", NS)["status"]["plan"] == {"pending": plan_id,
                                                                              "summary": FIRST_PLAN}

    where, _ = stored_plan_object(cluster, tf_name, fmt)
    kubectl(cluster, "delete", where, "-n", NS)
    missing = raw(cluster, plan_url(plural, "late"))
    assert missing.returncode != 0 and f'the readable plan of "{plan_id}" is not stored yet' in missing.stderr, \
        missing.stderr
    assert get_json(cluster, plural, "late", "-n", NS)["status"]["plan"] == {"pending": plan_id,
                                                                              "summary": FIRST_PLAN}

    requested = str(time.time())
    kubectl(cluster, "annotate", TF, tf_name, "-n", NS, "--overwrite", f"reconcile.fluxcd.io/requestedAt={requested}")
    handled = wait_for(lambda: (st := terraform(cluster, tf_name)["status"]).get("lastHandledReconcileAt") == requested
                       and st, "tofu-controller to handle the reconcile request", timeout=SLOW, interval=1)
    assert (handled["plan"]["pending"], handled["lastPlanAt"]) == (plan_id, planned["lastPlanAt"]), handled
    still = raw(cluster, plan_url(plural, "late"))
    assert still.returncode != 0 and "is not stored yet" in still.stderr, still.stderr

    # A spec change: tofu-controller drops the pending plan, plans again and stores the readable plan.
    apply_app(cluster, kind, "late", {"db_password": PASSWORD, "replicas": 1})
    replanned = {"add": 3, "change": 0, "destroy": 0,
                 "resources": [r for r in FIRST_PLAN["resources"] if r["address"] != "terraform_data.replica[1]"]}
    app = wait_for(lambda: (a := get_json(cluster, plural, "late", "-n", NS))["status"].get("plan", {})
                   .get("summary") == replanned and a, "the new plan's summary in the status", timeout=SLOW, interval=1)
    assert app["status"]["plan"]["pending"] == terraform(cluster, tf_name)["status"]["plan"]["pending"]
    back = raw(cluster, plan_url(plural, "late"))
    assert back.returncode == 0 and PASSWORD not in back.stdout, back.stderr
    assert "terraform_data.replica[1]" not in back.stdout and "terraform_data.replica[0]" in back.stdout


def test_readable_plan_subresource_redacts_sensitive_values(cluster: Cluster,
                                                            pending: tuple[str, str, str, str]) -> None:
    kind, name, _, _ = pending
    plural, fmt = KINDS[kind]
    got = raw(cluster, plan_url(plural, name))
    assert got.returncode == 0, got.stderr
    assert PASSWORD not in got.stdout
    if fmt == "human":
        assert "Plan: 1 to add, 2 to change, 2 to destroy." in got.stdout
        assert "# terraform_data.replica[0] must be replaced" in got.stdout
        assert "password = (sensitive value)" in got.stdout
    else:
        readable = json.loads(got.stdout)
        changes = {rc["address"]: rc["change"] for rc in readable["resource_changes"]}
        assert changes["terraform_data.server"]["after"]["input"]["password"] == "(sensitive value)"
        assert changes["terraform_data.server"]["before"]["output"]["password"] == "(sensitive value)"
        assert readable["variables"]["db_password"]["value"] == "(sensitive value)"
        assert readable["variables"]["name"]["value"] == "api"


def test_unknown_subresource_is_404(cluster: Cluster, pending: tuple[str, str, str, str]) -> None:
    kind, name, _, _ = pending
    plural, _ = KINDS[kind]
    got = raw(cluster, f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{plural}/{name}/logs")
    assert got.returncode != 0 and "NotFound" in got.stderr, got.stderr


def test_plan_needs_get_on_the_plan_subresource(cluster: Cluster, pending: tuple[str, str, str, str],
                                                tofu_service: services.Running) -> None:
    """A tenant with get on <plural> but not on <plural>/plan reads the Application, not the plan; one with get on
    <plural>/plan but not on the ConfigMap/Secret tofu-controller keeps the plan in does not read it either."""
    kind, name, _, _ = pending
    plural, _ = KINDS[kind]
    rules: dict[str, list[dict[str, Any]]] = {
        "reader": [{"apiGroups": [GROUP], "resources": [plural], "verbs": ["get", "list"]}],
        "reviewer": [{"apiGroups": [GROUP], "resources": [plural, f"{plural}/plan"], "verbs": ["get", "list"]},
                     {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"]}],
        # The per-kind view role alone: no access to the object the plan comes from.
        "viewer": [{"apiGroups": [GROUP], "resources": [plural, f"{plural}/plan"], "verbs": ["get", "list", "watch"]}],
    }
    documents: list[dict[str, Any]] = []
    for user, user_rules in rules.items():
        role = f"{plural}-{user}"
        documents += [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": role, "namespace": NS}, "rules": user_rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": role, "namespace": NS},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"{plural}-{user}"}]},
        ]
    kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump_all(documents))
    reader = cluster.user_kubeconfig(f"{plural}-reader")
    reviewer = cluster.user_kubeconfig(f"{plural}-reviewer")
    assert kubectl(cluster, "get", plural, name, "-n", NS, kubeconfig=reader, check=False).returncode == 0
    denied = raw(cluster, plan_url(plural, name), kubeconfig=reader)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr and f"{plural}/plan" in denied.stderr, denied
    allowed = raw(cluster, plan_url(plural, name), kubeconfig=reviewer)
    assert allowed.returncode == 0 and PASSWORD not in allowed.stdout, allowed.stderr
    denied = raw(cluster, plan_url(plural, name), kubeconfig=cluster.user_kubeconfig(f"{plural}-viewer"))
    assert denied.returncode != 0 and "Forbidden" in denied.stderr, denied
    assert 'cannot get resource "configmaps"' in denied.stderr or 'cannot get resource "secrets"' in denied.stderr, \
        denied.stderr

    # Straight to the service as kube-apiserver's front proxy: its own SubjectAccessReview names the subresource.
    code, body = as_front_proxy(cluster, tofu_service.port, plan_url(plural, name), f"{plural}-reader")
    assert code == 403 and body["reason"] == "Forbidden" and f'User "{plural}-reader"' in body["message"], body
    assert f'resource "{plural}/plan"' in body["message"], body
    code, body = as_front_proxy(cluster, tofu_service.port, plan_url(plural, name), f"{plural}-reviewer")
    assert code == 200 and "terraform_data.server" in body and PASSWORD not in body, body


def test_approval_by_exact_id_applies_and_leaves_no_plan(cluster: Cluster,
                                                         pending: tuple[str, str, str, str]) -> None:
    """Last of each kind's tests: tofu-controller applies the approved plan, and the pending plan is gone."""
    kind, name, plan_id, _ = pending
    plural, _ = KINDS[kind]
    tf_name = f"{kind.lower()}-{name}"
    # An abbreviated id: tofu-controller would take it as a prefix, the service asks for the exact one.
    refused = kubectl(cluster, "annotate", plural, name, "-n", NS, "--overwrite", f"{APPROVE}={plan_id[:-1]}",
                      check=False)
    assert refused.returncode != 0 and plan_id in refused.stderr, refused.stderr
    assert terraform(cluster, tf_name)["spec"]["approvePlan"] == ""
    # The first plan, approved in the fixture, had the same id, and the annotation still holds it: setting
    # it again is no new command (a re-applied manifest), so the status prints a removal, then the setting.
    unchanged = kubectl(cluster, "annotate", plural, name, "-n", NS, "--overwrite", f"{APPROVE}={plan_id}")
    assert unchanged.returncode == 0 and terraform(cluster, tf_name)["spec"]["approvePlan"] == ""
    assert printed_commands(cluster, plural, name) == [
        ["kubectl", "annotate", plural, name, "-n", NS, "--overwrite", f"{APPROVE}-"],
        ["kubectl", "annotate", plural, name, "-n", NS, "--overwrite", f"{APPROVE}={plan_id}"]]
    run_printed(cluster, plural, name)
    assert terraform(cluster, tf_name)["spec"]["approvePlan"] == plan_id
    app = get_json(cluster, plural, name, "-n", NS)
    assert "summary" not in (app["status"].get("plan") or {})  # approved: nothing waits for a review any more

    wait_status(cluster, plural, name, "Ready")
    assert resources_in_state(cluster, tf_name) == [
        "terraform_data.dns", "terraform_data.replica[0]", "terraform_data.server"]
    got = raw(cluster, plan_url(plural, name))
    assert got.returncode != 0 and "has no pending plan" in got.stderr, got.stderr


def test_helm_kinds_offer_no_subresource(control_plane: Cluster, helm_service: services.Running) -> None:
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture("redis.yaml")))
    wait_for(lambda: "redises" in kubectl(control_plane, "api-resources", "--api-group=apps.cozystack.io",
                                          "--cached=false", check=False).stdout, "redis kind served", timeout=60)
    got = raw(control_plane, f"/apis/apps.cozystack.io/{VERSION}/namespaces/{NS}/redises/any/plan")
    assert got.returncode != 0 and "NotFound" in got.stderr, got.stderr
    resources = json.loads(raw(control_plane, f"/apis/apps.cozystack.io/{VERSION}").stdout)["resources"]
    assert not [r for r in resources if "/" in r["name"]], resources
