"""Plan preview before approval (SPEC §10, issue #13) with real OpenTofu through the real control plane.

The plans are real: ``tofu plan -out`` and ``tofu show`` on tests/fixtures/modules/preview, with
the variables the service wrote into the Terraform.  One step is PLAYED because tofu-controller
does not build here (its api module is not on the Go module proxy): storing the readable plan
where and as tofu-controller v0.16.5 stores it (runner/server_save_tfplan.go, ``SaveTFPlan``:
a ConfigMap for ``storeReadablePlan: human``, a gzip Secret for ``json``, named, labelled and
annotated by api/plan/plan.go) and setting the Terraform status it sets for a pending plan
(reference/status/tf-status-pending.yaml).  Everything after that is the service under test.

The second plan of each scenario updates, replaces and destroys resources that already hold the
sensitive password in state; OpenTofu itself then prints it in clear in ``terraform_data``'s
``output`` attribute, so the tests also prove the service's own masking, not only OpenTofu's.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import json_merge_patch
import pytest
import yaml
from localcluster import build, services
from localcluster.cluster import Cluster

from tests.kube import Api, get_json, kubectl, wait_for

GROUP = "tofu.apps.cozystack.io"
VERSION = "v1alpha1"
NS = "tenant-preview"
TF = "terraforms.infra.contrib.fluxcd.io"
TF_API = "/apis/infra.contrib.fluxcd.io/v1alpha2"
APPROVE = "tofu.apps.cozystack.io/approve-plan"
MODULE = Path(__file__).resolve().parents[1] / "fixtures" / "modules" / "preview"
PENDING = "plan-main-b8e362c206"
PASSWORD = "s3cret-pw-42"
#: What the second plan of the scenario does, as OpenTofu reports it.
SECOND_PLAN = {
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


@pytest.fixture(scope="module")
def tofu_binary() -> Path:
    """The pinned OpenTofu the local control plane builds."""
    return build.ensure_tofu()


def run_tofu(binary: Path, workdir: Path, *args: str) -> str:
    env = {**os.environ, "TF_IN_AUTOMATION": "1", "TF_CLI_CONFIG_FILE": os.devnull}
    done = subprocess.run([str(binary), f"-chdir={workdir}", *args], capture_output=True, text=True, env=env,
                          check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


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


def definition(kind: str) -> dict[str, Any]:
    plural, readable = KINDS[kind]
    return {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "TofuApplicationDefinition",
        "metadata": {"name": kind.lower()},
        "spec": {
            "application": {"kind": kind, "plural": plural, "singular": kind.lower(),
                            "openAPISchema": json.dumps(SCHEMA)},
            "release": {"prefix": f"{kind.lower()}-", "labels": {}},
            "terraform": {
                "sourceRef": {"kind": "GitRepository", "name": "sites", "namespace": "cozy-system"},
                "path": ".", "interval": "10m", "approvePlan": "manual", "variableNaming": "verbatim",
                "storeReadablePlan": readable,
            },
        },
    }


def apply_app(cluster: Cluster, kind: str, name: str, spec: dict[str, Any]) -> None:
    app = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name, "namespace": NS},
           "spec": spec}
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(app))


def terraform(cluster: Cluster, name: str) -> dict[str, Any]:
    result: dict[str, Any] = get_json(cluster, TF, name, "-n", NS)
    return result


def plan_with_vars(binary: Path, workdir: Path, tf: dict[str, Any]) -> None:
    """``tofu plan -out tfplan`` with the Terraform's vars, written as tofu-controller writes them."""
    tf_vars = {v["name"]: v["value"] for v in tf["spec"]["vars"]}
    (workdir / "generated.auto.tfvars.json").write_text(json.dumps(tf_vars))
    run_tofu(binary, workdir, "plan", "-input=false", "-no-color", "-out", "tfplan")


def store_plan_as_tofu_controller(api: Api, tf: dict[str, Any], text: str, fmt: str) -> None:
    """PLAYED: what tofu-controller v0.16.5's SaveTFPlan writes for ``storeReadablePlan: fmt``."""
    meta = tf["metadata"]
    workspace = tf["spec"].get("workspace") or "default"
    plan_name = meta["name"] + (".json" if fmt == "json" else "")
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "metadata": {
            "name": f"tfplan-{workspace}-{plan_name}",
            "namespace": NS,
            "labels": {"infra.contrib.fluxcd.io/plan-name": plan_name,
                       "infra.contrib.fluxcd.io/plan-workspace": workspace},
            "annotations": {"savedPlan": PENDING,
                            "infra.contrib.fluxcd.io/plan-full-name": plan_name,
                            "infra.contrib.fluxcd.io/plan-full-workspace": workspace,
                            "infra.contrib.fluxcd.io/plan-hash": hashlib.sha256(text.encode()).hexdigest()},
            "ownerReferences": [{"apiVersion": "infra.contrib.fluxcd.io/v1alpha2", "kind": "Terraform",
                                 "name": meta["name"], "uid": meta["uid"]}],
        },
    }
    if fmt == "json":
        obj.update(kind="Secret", type="Opaque",
                   data={"tfplan": base64.b64encode(gzip.compress(text.encode())).decode()})
        obj["metadata"]["annotations"]["encoding"] = "gzip"
        path = f"/api/v1/namespaces/{NS}/secrets"
    else:
        obj.update(kind="ConfigMap", data={"tfplan": text})
        path = f"/api/v1/namespaces/{NS}/configmaps"
    code, body = api.request("POST", path, obj)
    assert code == 201, body


def set_pending(api: Api, name: str, reference: Any) -> None:
    """PLAYED: the status tofu-controller sets once the plan is saved and waits for approval."""
    path = f"{TF_API}/namespaces/{NS}/terraforms/{name}"
    code, live = api.request("GET", path)
    assert code == 200, live
    status = reference("tf-status-pending")["status"]
    patch = {"status": json_merge_patch.create_patch(live.get("status") or {}, status)}
    code, body = api.request("PATCH", f"{path}/status", patch, content_type="application/merge-patch+json")
    assert code == 200, body


def plan_url(plural: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{plural}/{name}/plan"


def raw(cluster: Cluster, path: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    return kubectl(cluster, "get", "--raw", path, check=False, kubeconfig=kubeconfig)


# ------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def cluster(control_plane: Cluster, tofu_service: services.Running) -> Iterator[Cluster]:
    kubectl(control_plane, "create", "namespace", NS, check=False)
    for kind in KINDS:
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(definition(kind)))
    wait_for(lambda: all(plural in kubectl(control_plane, "api-resources", f"--api-group={GROUP}",
                                           "--cached=false", check=False).stdout
                         for plural, _ in KINDS.values()), "the preview kinds served", timeout=60)
    yield control_plane
    kubectl(control_plane, "delete", "namespace", NS, "--wait=false", check=False)
    kubectl(control_plane, "delete", "tofuapplicationdefinitions", *(k.lower() for k in KINDS), "--ignore-not-found",
            check=False)


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> Api:
    return Api(cluster)


@pytest.fixture(scope="module", params=list(KINDS))
def pending(request: pytest.FixtureRequest, cluster: Cluster, api: Api, reference: Any,
            tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """An Application of ``kind`` whose second plan (real OpenTofu) waits for approval; (kind, name, stored text)."""
    kind: str = request.param
    binary: Path = request.getfixturevalue("tofu_binary")
    _, fmt = KINDS[kind]
    name = "shop"
    workdir = tmp_path_factory.mktemp(f"preview-{fmt}")
    shutil.copytree(MODULE, workdir, dirs_exist_ok=True)
    run_tofu(binary, workdir, "init", "-input=false", "-no-color")

    apply_app(cluster, kind, name, {"db_password": PASSWORD})
    tf_name = f"{kind.lower()}-{name}"
    plan_with_vars(binary, workdir, terraform(cluster, tf_name))
    run_tofu(binary, workdir, "apply", "-input=false", "-no-color", "tfplan")  # the first plan, applied

    apply_app(cluster, kind, name, {"db_password": PASSWORD, "name": "api", "replicas": 1})
    tf = terraform(cluster, tf_name)
    plan_with_vars(binary, workdir, tf)
    # What tofu-controller's runner shows: tfexec's ShowPlanFileRaw / ShowPlanFile (both -no-color).
    shown = run_tofu(binary, workdir, "show", "-no-color", *(["-json"] if fmt == "json" else []), "tfplan")
    store_plan_as_tofu_controller(api, tf, shown, fmt)
    set_pending(api, tf_name, reference)
    return kind, name, shown


# ------------------------------------------------------------------------------------ tests


def test_plan_is_a_get_only_subresource_in_discovery(cluster: Cluster) -> None:
    resources = json.loads(raw(cluster, f"/apis/{GROUP}/{VERSION}").stdout)["resources"]
    by_name = {r["name"]: r for r in resources}
    for kind, (plural, _) in KINDS.items():
        assert by_name[f"{plural}/plan"]["verbs"] == ["get"], by_name.get(f"{plural}/plan")
        assert by_name[f"{plural}/plan"]["kind"] == kind


def test_summary_in_status_and_describe(cluster: Cluster, pending: tuple[str, str, str],
                                        tofu_service: services.Running) -> None:
    kind, name, shown = pending
    plural, _ = KINDS[kind]
    assert PASSWORD in shown  # OpenTofu itself leaks it here (terraform_data.output from state)
    app = wait_for(lambda: (a := get_json(cluster, plural, name, "-n", NS))["status"].get("plan", {}).get("summary")
                   and a, "the plan summary in the status")
    assert app["status"]["plan"] == {"pending": PENDING, "summary": SECOND_PLAN}
    awaiting = next(c for c in app["status"]["conditions"] if c["type"] == "AwaitingApproval")
    assert awaiting["status"] == "True"
    assert "status.plan.summary" in awaiting["message"]
    assert f"kubectl get --raw {plan_url(plural, name)}" in awaiting["message"]
    assert awaiting["message"].endswith(f"--overwrite {APPROVE}={PENDING}")
    described = kubectl(cluster, "describe", plural, name, "-n", NS).stdout
    assert "Summary:" in described and "terraform_data.replica[1]" in described, described
    # The spec holds what the user wrote; the status and everything under it in describe never do.
    assert PASSWORD not in json.dumps(app["status"]) and PASSWORD not in described.split("\nStatus:", 1)[1]
    events = kubectl(cluster, "get", "events", "-n", NS, "-o", "json").stdout
    assert PASSWORD not in events
    assert PASSWORD not in tofu_service.log.read_text(errors="replace")


def test_summary_appears_once_the_plan_is_stored(cluster: Cluster, api: Api, reference: Any,
                                                pending: tuple[str, str, str]) -> None:
    """Read before tofu-controller stored the plan, the status has no summary; it is not remembered as missing."""
    kind, _, shown = pending
    plural, fmt = KINDS[kind]
    apply_app(cluster, kind, "late", {"db_password": PASSWORD})
    tf_name = f"{kind.lower()}-late"
    set_pending(api, tf_name, reference)
    early = get_json(cluster, plural, "late", "-n", NS)
    assert early["status"]["plan"] == {"pending": PENDING}
    missing = raw(cluster, plan_url(plural, "late"))
    assert missing.returncode != 0 and "is not stored yet" in missing.stderr, missing.stderr
    store_plan_as_tofu_controller(api, terraform(cluster, tf_name), shown, fmt)
    assert get_json(cluster, plural, "late", "-n", NS)["status"]["plan"]["summary"] == SECOND_PLAN


def test_readable_plan_subresource_redacts_sensitive_values(cluster: Cluster, pending: tuple[str, str, str]) -> None:
    kind, name, _ = pending
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


def test_unknown_subresource_is_404(cluster: Cluster, pending: tuple[str, str, str]) -> None:
    kind, name, _ = pending
    plural, _ = KINDS[kind]
    got = raw(cluster, f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{plural}/{name}/logs")
    assert got.returncode != 0 and "NotFound" in got.stderr, got.stderr


def test_plan_of_an_application_without_pending_plan_is_404(cluster: Cluster) -> None:
    apply_app(cluster, "WebSite", "idle", {"db_password": PASSWORD})
    got = raw(cluster, plan_url("websites", "idle"))
    assert got.returncode != 0 and "has no pending plan" in got.stderr, got.stderr


def test_approval_by_exact_id_still_works(cluster: Cluster, pending: tuple[str, str, str]) -> None:
    kind, name, _ = pending
    plural, _ = KINDS[kind]
    refused = kubectl(cluster, "annotate", plural, name, "-n", NS, "--overwrite", f"{APPROVE}={PENDING[:-1]}",
                      check=False)
    assert refused.returncode != 0 and PENDING in refused.stderr, refused.stderr
    kubectl(cluster, "annotate", plural, name, "-n", NS, "--overwrite", f"{APPROVE}={PENDING}")
    assert terraform(cluster, f"{kind.lower()}-{name}")["spec"]["approvePlan"] == PENDING
    app = get_json(cluster, plural, name, "-n", NS)
    assert "summary" not in app["status"]["plan"]  # approved: nothing waits for a review any more


def test_plan_needs_get_on_the_plan_subresource(cluster: Cluster, pending: tuple[str, str, str],
                                                tofu_service: services.Running) -> None:
    """A tenant with get on <plural> but not on <plural>/plan reads the Application, not the plan."""
    kind, name, _ = pending
    plural, _ = KINDS[kind]
    rules: dict[str, list[dict[str, Any]]] = {
        "reader": [{"apiGroups": [GROUP], "resources": [plural], "verbs": ["get", "list"]}],
        "reviewer": [{"apiGroups": [GROUP], "resources": [plural, f"{plural}/plan"], "verbs": ["get", "list"]}],
        # The chart's aggregated tenant roles: every resource of the group, subresources included.
        "viewer": [{"apiGroups": [GROUP], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
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
    for allowed_user in (reviewer, cluster.user_kubeconfig(f"{plural}-viewer")):
        allowed = raw(cluster, plan_url(plural, name), kubeconfig=allowed_user)
        assert allowed.returncode == 0 and PASSWORD not in allowed.stdout, allowed.stderr

    # Straight to the service as kube-apiserver's front proxy: its own SubjectAccessReview names the subresource.
    code, body = as_front_proxy(cluster, tofu_service.port, plan_url(plural, name), f"{plural}-reader")
    assert code == 403 and body["reason"] == "Forbidden" and f'User "{plural}-reader"' in body["message"], body
    assert f'resource "{plural}/plan"' in body["message"], body
    code, body = as_front_proxy(cluster, tofu_service.port, plan_url(plural, name), f"{plural}-reviewer")
    assert code == 200 and "terraform_data.server" in body and PASSWORD not in body, body


def test_helm_kinds_offer_no_subresource(control_plane: Cluster, helm_service: services.Running) -> None:
    from tests.kube import load_fixture

    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture("redis.yaml")))
    wait_for(lambda: "redises" in kubectl(control_plane, "api-resources", "--api-group=apps.cozystack.io",
                                          "--cached=false", check=False).stdout, "redis kind served", timeout=60)
    got = raw(control_plane, f"/apis/apps.cozystack.io/{VERSION}/namespaces/{NS}/redises/any/plan")
    assert got.returncode != 0 and "NotFound" in got.stderr, got.stderr
    resources = json.loads(raw(control_plane, f"/apis/apps.cozystack.io/{VERSION}").stdout)["resources"]
    assert not [r for r in resources if "/" in r["name"]], resources
