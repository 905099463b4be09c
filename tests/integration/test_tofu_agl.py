"""tofu_agl end to end through kube-apiserver's real aggregation layer, driven by kubectl.

No tofu-controller runs in this tier: it checks what the service serves and writes, and the real
Terraform CRD (tofu-controller v0.16.5) validates every object the service emits. What tofu-controller
does with those objects (plans, approval, outputs, drift, destroy) is the flux tier's
(``tests/flux/test_tofu_controller.py``); how its statuses read through the Application is unit-tested
on statuses recorded from it (``tests/data/status/terraform-*.yaml``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import aggregation, build, services
from localcluster.cluster import Cluster

from tests.kube import Api, get_json, kubectl, load_fixture, wait_for

GROUP = "tofu.apps.cozystack.io"
V = f"{GROUP}/v1alpha1"
NS = "tenant-t"
TF = "terraforms.infra.contrib.fluxcd.io"
TF_API = "/apis/infra.contrib.fluxcd.io/v1alpha2"
APPROVE = "tofu.apps.cozystack.io/approve-plan"
RUNNER_SA = "tofu.apps.cozystack.io/runner-service-account"
USER = "apps.cozystack.io-"


# ------------------------------------------------------------------------------------ helpers




def tf(cluster: Cluster, name: str, ns: str = NS) -> dict[str, Any]:
    result: dict[str, Any] = get_json(cluster, TF, name, "-n", ns)
    return result


def tf_or_none(cluster: Cluster, name: str, ns: str = NS) -> dict[str, Any] | None:
    result = kubectl(cluster, "get", TF, name, "-n", ns, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def terraforms(cluster: Cluster, ns: str = NS) -> dict[str, str]:
    """Every Terraform of the namespace: name -> resourceVersion."""
    items = get_json(cluster, TF, "-n", ns)["items"]
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}


@contextlib.contextmanager
def nothing_changes(cluster: Cluster) -> Iterator[None]:
    """Assert that no Terraform of the namespace is created, changed or deleted inside the block."""
    before = terraforms(cluster)
    yield
    assert terraforms(cluster) == before


def manifest(kind: str, name: str, spec: Any, ns: str = NS, group: str = GROUP, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": f"{group}/v1alpha1", "kind": kind, "metadata": {"name": name, "namespace": ns, **meta},
            "spec": spec}


def apply(cluster: Cluster, kind: str, name: str, spec: Any, *flags: str, **meta: Any) -> None:
    kubectl(cluster, "apply", *flags, "-f", "-", input=json.dumps(manifest(kind, name, spec, **meta)))


def user_annotations(obj: dict[str, Any]) -> dict[str, str]:
    """Annotations minus the one kubectl apply keeps for itself."""
    return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items()
            if "kubectl.kubernetes.io/last-applied-configuration" not in k}


def row(cluster: Cluster, resource: str, name: str, ns: str = NS) -> list[str]:
    return kubectl(cluster, "get", resource, name, "-n", ns, "--no-headers").stdout.split()


def conditions(app: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in app.get("status", {}).get("conditions", [])}


def events_of(cluster: Cluster, name: str, ns: str | None = None) -> list[dict[str, Any]]:
    scope = ["-n", ns] if ns else ["-A"]
    out = kubectl(cluster, "get", "events", *scope, "--field-selector", f"involvedObject.name={name}",
                  "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def served(cluster: Cluster, group: str = GROUP) -> str:
    return kubectl(cluster, "api-resources", f"--api-group={group}", "--cached=false", check=False).stdout


def accepted(cluster: Cluster, name: str) -> dict[str, Any] | None:
    defn = get_json(cluster, "tofuapplicationdefinitions", name)
    for cond in defn.get("status", {}).get("conditions", []):
        if cond["type"] == "Accepted" and cond.get("observedGeneration") == defn["metadata"]["generation"]:
            return dict(cond)
    return None


def schema_of(definition: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(load_fixture(definition)["spec"]["application"]["openAPISchema"])
    return schema


def status_error(http_code: int, body: Any, code: int) -> dict[str, Any]:
    """``body`` is a Status with ``code``, answered with that HTTP code."""
    assert http_code == code, (http_code, body)
    assert isinstance(body, dict) and body.get("kind") == "Status" and body.get("code") == code, body
    return body


def cause_fields(body: dict[str, Any]) -> set[str]:
    return {c.get("field", "") for c in body.get("details", {}).get("causes", [])}


# ------------------------------------------------------------------------------------ fixture


@pytest.fixture(scope="module")
def tofu(control_plane: Cluster, tofu_service: services.Running) -> Iterator[Cluster]:
    """tofu_agl running, the vpc and bucket definitions applied and served, namespace tenant-t."""
    kubectl(control_plane, "create", "namespace", NS, check=False)
    for name in ("vpc.yaml", "bucket.yaml"):
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture(name)))
    wait_for(lambda: "vpcs" in (out := served(control_plane)) and "s3buckets" in out, "vpc and s3bucket kinds",
             timeout=60)
    try:
        yield control_plane
    finally:
        if tofu_service.log.exists():
            # The cluster state dir is destroyed at session end; keep the log for a failing run.
            kept = Path(tempfile.gettempdir()) / f"agl-{control_plane.name}-tofu-agl.log"
            kept.write_text(tofu_service.log.read_text(errors="replace"))


# ------------------------------------------------------------------------------------ definitions


def test_definitions_accepted(tofu: Cluster) -> None:
    for name in ("vpc", "s3bucket"):
        cond = wait_for(lambda n=name: accepted(tofu, n), f"{name} Accepted condition")
        assert cond["status"] == "True" and cond["reason"] == "Accepted", cond
        defn = get_json(tofu, "tofuapplicationdefinitions", name)
        # served, so Ready; as kstatus reads it: the generation acted on, nothing in progress, nothing stalled
        assert defn["status"]["observedGeneration"] == defn["metadata"]["generation"]
        conds = {c["type"]: (c["status"], c["reason"]) for c in defn["status"]["conditions"]}
        assert conds == {"Accepted": ("True", "Accepted"), "Ready": ("True", "Served"),
                         "Reconciling": ("False", "Served"), "Stalled": ("False", "Accepted")}
    out = kubectl(tofu, "get", "tofuapplicationdefinitions").stdout.splitlines()
    assert out[0].split()[:3] == ["NAME", "KIND", "ACCEPTED"]


# ------------------------------------------------------------------------------------ emission


def test_vpc_emits_terraform_field_by_field(tofu: Cluster) -> None:
    """snake_case naming, scalar/list/object/map variables, defaults, every definition field."""
    spec = {
        "region": "eu-west-1",
        "subnets": [{"cidrBlock": "10.0.1.0/24", "availabilityZone": "eu-west-1a"}],
        "natGateway": {"enabled": True},
        "tags": {"CostCenter": "42", "team-name": "net"},
    }
    apply(tofu, "VPC", "net", spec, labels={"team": "net"}, annotations={"note": "x"})
    obj = tf(tofu, "vpc-net")
    defn = load_fixture("vpc.yaml")["spec"]["terraform"]
    meta, tfs = obj["metadata"], obj["spec"]
    assert meta["labels"] == {
        "sharding.fluxcd.io/key": "tenants",
        f"{USER}team": "net",
        "apps.cozystack.io/application.kind": "VPC",
        "apps.cozystack.io/application.group": GROUP,
        "apps.cozystack.io/application.name": "net",
    }
    managed = json.loads(user_annotations(obj).pop("tofu.apps.cozystack.io/managed-fields"))
    assert [(e["manager"], e["operation"]) for e in managed] == [("kubectl-client-side-apply", "Update")]
    assert {k: v for k, v in user_annotations(obj).items() if k.startswith(USER)} == {f"{USER}note": "x"}
    assert tfs["sourceRef"] == defn["sourceRef"]
    assert tfs["path"] == "./modules/vpc"
    assert tfs["interval"] == "10m" and tfs["retryInterval"] == "1m"
    assert tfs["approvePlan"] == "auto"
    assert tfs["destroyResourcesOnDeletion"] is True
    assert tfs["writeOutputsToSecret"] == {"name": "net-outputs", "outputs": defn["writeOutputsToSecret"]["outputs"]}
    assert tfs["serviceAccountName"] == "tf-runner"
    assert tfs["runnerPodTemplate"] == defn["runnerPodTemplate"]
    # State per instance: the definition gives no secretSuffix, so the Terraform's name is used (SPEC §3).
    assert tfs["backendConfig"] == {**defn["backendConfig"], "secretSuffix": "vpc-net"}
    assert tfs["workspace"] == "default"
    assert tfs["storeReadablePlan"] == "human"
    assert tfs["varsFrom"] == defn["varsFrom"]
    # One variable per top-level key after defaulting, sorted, JSON types kept, nested values whole;
    # declared keys snake_cased at every depth, the keys of the free-form tags map left alone.
    assert tfs["vars"] == [
        {"name": "cidr_block", "value": "10.0.0.0/16"},
        {"name": "enable_dns_hostnames", "value": True},
        {"name": "flow_logs", "value": False},
        {"name": "nat_gateway", "value": {"enabled": True, "single_nat_gateway": True}},
        {"name": "region", "value": "eu-west-1"},
        {"name": "subnets", "value": [{"cidr_block": "10.0.1.0/24", "availability_zone": "eu-west-1a",
                                       "public": False}]},
        {"name": "tags", "value": {"CostCenter": "42", "team-name": "net"}},
    ]
    # Nothing the service wrote was pruned or defaulted away by the real CRD's schema.
    assert set(tfs) >= {"sourceRef", "path", "interval", "retryInterval", "approvePlan", "vars", "varsFrom",
                        "writeOutputsToSecret", "runnerPodTemplate", "backendConfig", "workspace"}


def test_vpc_round_trip_is_applied_plus_defaults(tofu: Cluster) -> None:
    app = get_json(tofu, "vpc", "net", "-n", NS)
    assert app["apiVersion"] == V and app["kind"] == "VPC"
    assert app["spec"] == {
        "region": "eu-west-1",
        "cidrBlock": "10.0.0.0/16",
        "enableDnsHostnames": True,
        "subnets": [{"cidrBlock": "10.0.1.0/24", "availabilityZone": "eu-west-1a", "public": False}],
        "natGateway": {"enabled": True, "singleNatGateway": True},
        "flowLogs": False,
        "tags": {"CostCenter": "42", "team-name": "net"},
    }
    assert app["metadata"]["labels"] == {"team": "net"}
    assert user_annotations(app) == {"note": "x"}
    assert app["metadata"]["uid"] == tf(tofu, "vpc-net")["metadata"]["uid"]
    as_yaml = yaml.safe_load(kubectl(tofu, "get", "vpc", "net", "-n", NS, "-o", "yaml").stdout)
    assert as_yaml["spec"] == app["spec"]


def test_generation_is_the_terraforms(tofu: Cluster) -> None:
    """metadata.generation reads through, so clients can tell a spec change from a status change."""
    apply(tofu, "VPC", "gen", {"region": "eu-west-1"})
    first = get_json(tofu, "vpc", "gen", "-n", NS)["metadata"]["generation"]
    assert first == tf(tofu, "vpc-gen")["metadata"]["generation"]
    apply(tofu, "VPC", "gen", {"region": "eu-west-2"})
    second = get_json(tofu, "vpc", "gen", "-n", NS)["metadata"]["generation"]
    assert second == tf(tofu, "vpc-gen")["metadata"]["generation"] and second > first


def test_status_projection_follows_the_terraform(tofu: Cluster, api: Api, reference: Any) -> None:
    """tofu-controller's recorded statuses written onto the Terraform's status subresource: the Application
    reads them with the stack's kstatus meaning (the verdicts of the real kstatus: tests/flux/test_kstatus.py)."""
    apply(tofu, "VPC", "kst", {"region": "eu-west-1"})
    created = get_json(tofu, "vpc", "kst", "-n", NS)
    assert created["status"]["observedGeneration"] == -1  # the CRD's default: tofu-controller has not seen it
    assert conditions(created)["Reconciling"]["reason"] == "LatestGenerationNotObserved"
    assert conditions(created)["Reconciling"]["status"] == "True"
    assert conditions(created)["Reconciling"]["message"] == "waiting for tofu-controller to observe generation 1"
    # (recording, Ready, Reconciling, Stalled) as (status, reason); every recording is of generation 1
    for phase, expected in (
            ("terraform-planning", {"Ready": ("Unknown", "Progressing"), "Reconciling": ("True", "Progressing"),
                                    "Stalled": ("False", "NotStalled")}),
            ("terraform-failed", {"Ready": ("False", "TFExecPlanFailed"), "Reconciling": ("False", "Stalled"),
                                  "Stalled": ("True", "TFExecPlanFailed")}),
            ("terraform-applied", {"Ready": ("True", "TerraformOutputsWritten"),
                                   "Reconciling": ("False", "Succeeded"), "Stalled": ("False", "NotStalled")})):
        status = reference(phase)["status"]
        code, body = api.request("PATCH", f"{TF_API}/namespaces/{NS}/terraforms/vpc-kst/status", {"status": status},
                                 content_type="application/merge-patch+json")
        assert code == 200, body
        app = get_json(tofu, "vpc", "kst", "-n", NS)
        assert app["metadata"]["generation"] == 1 and app["status"]["observedGeneration"] == status[
            "observedGeneration"], phase
        shown = conditions(app)
        assert {t: (shown[t]["status"], shown[t]["reason"]) for t in expected} == expected, phase
    kubectl(tofu, "delete", "vpc", "kst", "-n", NS, "--wait=false")


def test_bucket_emits_terraform_verbatim_and_manual(tofu: Cluster) -> None:
    spec = {"lifecycle_rules": [{"id": "expire", "expirationDays": 30}], "tags": {"Team": "data"}}
    apply(tofu, "S3Bucket", "logs", spec)
    tfs = tf(tofu, "s3bucket-logs")["spec"]
    assert tfs["approvePlan"] == ""  # manual: nothing approved until the user names a plan
    assert tfs["writeOutputsToSecret"] == {"name": "s3bucket-logs-outputs",
                                           "outputs": ["bucket_arn", "bucket_domain_name"]}
    assert tfs["sourceRef"] == {"kind": "OCIRepository", "name": "s3-bucket-module", "namespace": "cozy-system"}
    assert tfs["interval"] == "30m" and tfs["retryInterval"] == "2m" and tfs["path"] == "."
    assert tfs["destroyResourcesOnDeletion"] is False
    assert tfs["serviceAccountName"] == "tf-runner" and tfs["storeReadablePlan"] == "human"
    # Fields the definition leaves unset are omitted, never written as null.
    assert not {"runnerPodTemplate", "backendConfig", "varsFrom"} & set(tfs), tfs
    assert tfs["vars"] == [
        {"name": "force_destroy", "value": False},
        {"name": "lifecycle_rules", "value": [{"id": "expire", "expirationDays": 30, "prefix": ""}]},
        {"name": "region", "value": "eu-central-1"},
        {"name": "storage_class", "value": "STANDARD"},
        {"name": "tags", "value": {"Team": "data"}},
        {"name": "versioning", "value": True},
    ]
    app = get_json(tofu, "s3bucket", "logs", "-n", NS)
    assert app["spec"] == {"region": "eu-central-1", "versioning": True, "force_destroy": False,
                           "storage_class": "STANDARD",
                           "lifecycle_rules": [{"id": "expire", "expirationDays": 30, "prefix": ""}],
                           "tags": {"Team": "data"}}


def test_runner_service_account_override(tofu: Cluster, api: Api) -> None:
    apply(tofu, "S3Bucket", "own-sa", {}, annotations={RUNNER_SA: "tenant-runner"})
    assert tf(tofu, "s3bucket-own-sa")["spec"]["serviceAccountName"] == "tenant-runner"
    kubectl(tofu, "annotate", "s3bucket", "own-sa", "-n", NS, f"{RUNNER_SA}-")
    assert tf(tofu, "s3bucket-own-sa")["spec"]["serviceAccountName"] == "tf-runner"
    # The VPC kind does not allow it: 422 and no Terraform.
    with nothing_changes(tofu):
        code, body = api.request("POST", f"/apis/{V}/namespaces/{NS}/vpcs",
                                 manifest("VPC", "sa", {"region": "x"}, annotations={RUNNER_SA: "mine"}))
        status_error(code, body, 422)
        assert cause_fields(body) == {f"metadata.annotations[{RUNNER_SA}]"}
        result = kubectl(tofu, "annotate", "vpc", "net", "-n", NS, f"{RUNNER_SA}=mine", check=False)
        assert result.returncode != 0 and "does not allow" in result.stderr, result.stderr


# ------------------------------------------------------------------------------------ kubectl


def test_get_table_columns(tofu: Cluster) -> None:
    out = kubectl(tofu, "get", "vpcs", "-n", NS).stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "STATUS", "PLAN", "OUTPUTS", "AGE"]
    net = next(line.split() for line in out[1:] if line.split()[0] == "net")
    assert net[:5] == ["net", "Unknown", "Planning", "-", "net-outputs"]
    wide = kubectl(tofu, "get", "s3buckets", "-A").stdout.splitlines()
    assert wide[0].split()[:2] == ["NAMESPACE", "NAME"]


def test_server_side_apply_create_and_update(tofu: Cluster) -> None:
    apply(tofu, "VPC", "ssa", {"region": "eu-west-1"}, "--server-side")
    assert {"name": "region", "value": "eu-west-1"} in tf(tofu, "vpc-ssa")["spec"]["vars"]
    apply(tofu, "VPC", "ssa", {"region": "eu-west-2", "flowLogs": True}, "--server-side")
    tf_vars = tf(tofu, "vpc-ssa")["spec"]["vars"]
    assert {"name": "region", "value": "eu-west-2"} in tf_vars and {"name": "flow_logs", "value": True} in tf_vars


def test_patch_merge_json_annotate_and_label(tofu: Cluster) -> None:
    apply(tofu, "VPC", "patchme", {"region": "eu-west-1"})
    kubectl(tofu, "patch", "vpc", "patchme", "-n", NS, "--type=merge",
            "-p", '{"spec":{"natGateway":{"enabled":true}}}')
    tf_vars = {v["name"]: v["value"] for v in tf(tofu, "vpc-patchme")["spec"]["vars"]}
    assert tf_vars["nat_gateway"] == {"enabled": True, "single_nat_gateway": True}
    kubectl(tofu, "patch", "vpc", "patchme", "-n", NS, "--type=json",
            "-p", '[{"op":"replace","path":"/spec/region","value":"us-east-1"}]')
    tf_vars = {v["name"]: v["value"] for v in tf(tofu, "vpc-patchme")["spec"]["vars"]}
    assert tf_vars["region"] == "us-east-1"
    kubectl(tofu, "annotate", "vpc", "patchme", "-n", NS, "owner=ops")
    assert tf(tofu, "vpc-patchme")["metadata"]["annotations"][f"{USER}owner"] == "ops"
    kubectl(tofu, "label", "vpc", "patchme", "-n", NS, "tier=gold")
    assert tf(tofu, "vpc-patchme")["metadata"]["labels"][f"{USER}tier"] == "gold"
    out = kubectl(tofu, "get", "vpcs", "-n", NS, "-l", "tier=gold", "-o", "name").stdout.split()
    assert out == [f"vpc.{GROUP}/patchme"]
    result = kubectl(tofu, "patch", "vpc", "patchme", "-n", NS, "--type=strategic", "-p", '{"spec":{}}', check=False)
    assert result.returncode != 0


def test_stale_resource_version_conflicts(tofu: Cluster) -> None:
    apply(tofu, "VPC", "stale", {"region": "eu-west-1"})
    app = get_json(tofu, "vpc", "stale", "-n", NS)
    kubectl(tofu, "patch", "vpc", "stale", "-n", NS, "--type=merge", "-p", '{"spec":{"region":"eu-west-2"}}')
    before = tf(tofu, "vpc-stale")
    app["spec"]["region"] = "eu-west-3"
    result = kubectl(tofu, "replace", "-f", "-", input=json.dumps(app), check=False)
    assert result.returncode != 0 and "the object has been modified" in result.stderr, result.stderr
    assert tf(tofu, "vpc-stale")["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_describe_shows_events(tofu: Cluster) -> None:
    """An update is recorded as an Event on the VPC; a create is not (kube-apiserver records none for a custom
    resource): its answer came before the patch was sent, so its Event would be there by the update's."""
    apply(tofu, "VPC", "described", {"region": "eu-west-1"})
    kubectl(tofu, "patch", "vpc", "described", "-n", NS, "--type=merge", "-p", '{"spec":{"region":"eu-west-2"}}')
    out = wait_for(lambda: (o := kubectl(tofu, "describe", "vpc", "described", "-n", NS).stdout) and "Updated" in o
                   and o, "describe to show the Updated event")
    assert f"Terraform {NS}/vpc-described updated" in out and "Created" not in out, out


def test_explain(tofu: Cluster) -> None:
    out = wait_for(lambda: (r := kubectl(tofu, "explain", "vpc.spec", check=False)).returncode == 0 and r.stdout,
                   "kubectl explain vpc.spec", timeout=90, interval=2)
    assert "cidrBlock" in out and "natGateway" in out
    status = kubectl(tofu, "explain", "vpc.status.plan").stdout
    assert "pending" in status and "lastApplied" in status


def test_watch_sees_changes(tofu: Cluster) -> None:
    argv = [str(build.kubectl_dir() / "kubectl"), "--kubeconfig", str(tofu.kubeconfig), "get", "vpcs", "-n",
            NS, "-w", "--output-watch-events", "--request-timeout=0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        apply(tofu, "VPC", "watched", {"region": "eu-west-1"})
        kubectl(tofu, "patch", "vpc", "watched", "-n", NS, "--type=merge", "-p", '{"spec":{"flowLogs":true}}')
        kubectl(tofu, "delete", "vpc", "watched", "-n", NS)
        time.sleep(2)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert out.splitlines()[0].split()[:4] == ["EVENT", "NAME", "READY", "STATUS"], out
    events = [line.split()[0] for line in out.splitlines() if len(line.split()) > 1 and line.split()[1] == "watched"]
    assert events[0] == "ADDED" and events[-1] == "DELETED" and "MODIFIED" in events, (out, err)


def test_dry_run_changes_nothing(tofu: Cluster) -> None:
    apply(tofu, "VPC", "dry", {"region": "eu-west-1"}, "--dry-run=server")
    assert tf_or_none(tofu, "vpc-dry") is None
    apply(tofu, "VPC", "dry", {"region": "eu-west-1"})
    with nothing_changes(tofu):
        kubectl(tofu, "patch", "vpc", "dry", "-n", NS, "--dry-run=server", "--type=merge",
                "-p", '{"spec":{"region":"eu-west-9"}}')
        kubectl(tofu, "delete", "vpc", "dry", "-n", NS, "--dry-run=server")


def test_delete_keeps_application_visible_while_finalized(tofu: Cluster) -> None:
    """A finalizer on the Terraform (tofu-controller's name; any controller's would do) holds the delete."""
    apply(tofu, "VPC", "doomed", {"region": "eu-west-1"})
    kubectl(tofu, "patch", TF, "vpc-doomed", "-n", NS, "--type=merge",
            "-p", '{"metadata":{"finalizers":["finalizers.tf.contrib.fluxcd.io"]}}')
    kubectl(tofu, "delete", "vpc", "doomed", "-n", NS, "--wait=false")
    app = get_json(tofu, "vpc", "doomed", "-n", NS)
    assert app["metadata"].get("deletionTimestamp")
    assert app["status"]["phase"] == "Deleting"
    assert row(tofu, "vpc", "doomed")[2] == "Deleting"
    # An update while finalizing keeps tofu-controller's finalizer.
    kubectl(tofu, "annotate", "vpc", "doomed", "-n", NS, "why=cleanup")
    assert tf(tofu, "vpc-doomed")["metadata"]["finalizers"] == ["finalizers.tf.contrib.fluxcd.io"]
    kubectl(tofu, "patch", TF, "vpc-doomed", "-n", NS, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    wait_for(lambda: tf_or_none(tofu, "vpc-doomed") is None, "Terraform gone")
    result = kubectl(tofu, "get", "vpc", "doomed", "-n", NS, check=False)
    assert result.returncode != 0 and "NotFound" in result.stderr


def test_delete_without_finalizer_removes_terraform(tofu: Cluster) -> None:
    apply(tofu, "S3Bucket", "gone", {})
    kubectl(tofu, "delete", "s3bucket", "gone", "-n", NS)
    assert tf_or_none(tofu, "s3bucket-gone") is None


def test_list_selectors_and_pagination(tofu: Cluster, api: Api) -> None:
    for i in range(3):
        apply(tofu, "S3Bucket", f"page{i}", {}, labels={"batch": "p"})
    base = f"/apis/{V}/namespaces/{NS}/s3buckets"
    code, body = api.request("GET", f"{base}?labelSelector=batch%3Dp&limit=2")
    assert code == 200 and len(body["items"]) == 2 and body["metadata"]["continue"], body
    code, rest = api.request("GET", f"{base}?labelSelector=batch%3Dp&limit=2&continue={body['metadata']['continue']}")
    assert code == 200 and len(rest["items"]) == 1
    assert {i["metadata"]["name"] for i in body["items"] + rest["items"]} == {"page0", "page1", "page2"}
    code, one = api.request("GET", f"/apis/{V}/s3buckets?fieldSelector=metadata.name%3Dpage1")
    assert code == 200 and [i["metadata"]["name"] for i in one["items"]] == ["page1"]
    code, bad = api.request("GET", f"/apis/{V}/s3buckets?fieldSelector=spec.region%3Dx")
    status_error(code, bad, 400)


# ------------------------------------------------------------------------------------ bad input


def test_bad_inputs_change_nothing(tofu: Cluster, api: Api) -> None:
    """SPEC §5 on the Tofu group: each bad request gets its 4xx Status and no Terraform changes."""
    base = f"/apis/{V}/namespaces/{NS}/vpcs"
    apply(tofu, "VPC", "victim", {"region": "eu-west-1"})
    victim = f"{base}/victim"

    def refused(code: int, method: str, path: str, body: Any,
                content_type: str = "application/json") -> dict[str, Any]:
        with nothing_changes(tofu):
            http_code, answer = api.request(method, path, body, content_type=content_type)
        return status_error(http_code, answer, code)

    def post(code: int, body: Any, content_type: str = "application/json") -> dict[str, Any]:
        return refused(code, "POST", base, body, content_type)

    def merge(code: int, patch: Any) -> dict[str, Any]:
        return refused(code, "PATCH", victim, patch, "application/merge-patch+json")

    # Keys the schema does not declare never become variables: refused under Strict (kubectl's default);
    # under Warn (the API's default) they are pruned as a CRD prunes them.
    body = refused(400, "POST", f"{base}?fieldValidation=Strict",
                   manifest("VPC", "unknown", {"region": "x", "vpcName": "y", "extra": 1}), "application/json")
    assert 'unknown field "spec.extra"' in body["message"] and 'unknown field "spec.vpcName"' in body["message"]
    body = refused(422, "PATCH", f"{victim}?fieldValidation=Strict", {"spec": {"unknownKey": True}},
                   "application/merge-patch+json")
    assert 'unknown field "spec.unknownKey"' in body["message"]
    # Schema violations, one cause per field (checked after defaulting).
    body = post(422, manifest("VPC", "schema", {"region": "", "cidrBlock": "nope", "flowLogs": "yes",
                                                "subnets": [{"cidrBlock": "10.0.0.0/24"}]}))
    assert cause_fields(body) == {"spec.region", "spec.cidrBlock", "spec.flowLogs", "spec.subnets[0].availabilityZone"}
    assert cause_fields(post(422, manifest("VPC", "required", {}))) == {"spec.region"}
    assert cause_fields(merge(422, {"spec": {"tags": {"a": 1}}})) == {"spec.tags.a"}
    # Reserved "_" keys the schema does not declare are unknown fields (Strict: 400; a patch: 422), a spec
    # that is not an object: 400.
    assert "_internal" in refused(400, "POST", f"{base}?fieldValidation=Strict",
                                  manifest("VPC", "underscore", {"region": "x", "_internal": 1}))["message"]
    refused(422, "PATCH", f"{victim}?fieldValidation=Strict", {"spec": {"_internal": 1}},
            "application/merge-patch+json")
    assert cause_fields(post(422, manifest("VPC", "notobj", "a string"))) == {"spec"}
    # Bad names: not a DNS-1035 label, or too long for prefix + name + "-tf-runner".
    for bad_name in ("Bad_Name", "9starts-with-digit", "x" * 50):
        assert cause_fields(post(422, manifest("VPC", bad_name, {"region": "x"}))) == {"metadata.name"}, bad_name
    # User labels and annotations are checked as they are stored (behind "apps.cozystack.io-"), as helm_agl does.
    long_key = "k" * 50  # a valid label name alone, 68 characters once prefixed
    body = post(422, manifest("VPC", "labels", {"region": "x"}, labels={long_key: "v", "team": "not a value!"}))
    assert [(c["field"], c["message"].split(":")[0]) for c in body["details"]["causes"]] == [
        ("metadata.labels", "Invalid value"), ("metadata.labels", "Invalid value")]
    assert f'(stored as "{USER}{long_key}")' in body["details"]["causes"][0]["message"]
    assert cause_fields(post(422, manifest("VPC", "annotations", {"region": "x"},
                                           annotations={"bad key": "any value is fine"}))) == {"metadata.annotations"}
    assert cause_fields(merge(422, {"metadata": {"labels": {long_key: "v"}}})) == {"metadata.labels"}
    # The runner service account where the definition does not allow it; an approval with nothing pending.
    assert cause_fields(merge(422, {"metadata": {"annotations": {RUNNER_SA: "mine"}}})) == {
        f"metadata.annotations[{RUNNER_SA}]"}
    assert cause_fields(merge(422, {"metadata": {"annotations": {APPROVE: "plan-main-x"}}})) == {
        f"metadata.annotations[{APPROVE}]"}
    # The generic cases, on the Tofu group.
    post(400, "{not json")
    post(400, manifest("VPC", "wrongversion", {"region": "x"}) | {"apiVersion": f"{GROUP}/v2"})
    post(422, manifest("VPC", "wrongkind", {"region": "x"}) | {"kind": "Subnet"})  # as for a custom resource
    post(400, manifest("VPC", "otherns", {"region": "x"}, ns="elsewhere"))
    post(413, json.dumps(manifest("VPC", "big", {"region": "x" * (3 * 1024 * 1024 + 10)})))
    post(415, json.dumps(manifest("VPC", "plain", {"region": "x"})), content_type="text/plain")
    refused(415, "PATCH", victim, {"spec": {}}, "application/strategic-merge-patch+json")
    # 49 = 53 - len("vpc-"): the longest name whose runner pod name still fits.
    code, body = api.request("POST", base, manifest("VPC", "x" * 49, {"region": "x"}))
    assert code == 201, body


# ------------------------------------------------------------------------------------ bad definitions


def _variant(name: str, kind: str, plural: str, singular: str, schema: dict[str, Any] | str,
             **terraform: Any) -> dict[str, Any]:
    defn = copy.deepcopy(load_fixture("vpc.yaml"))
    defn["metadata"] = {"name": name}
    defn["spec"]["application"] = {"kind": kind, "plural": plural, "singular": singular,
                                   "openAPISchema": schema if isinstance(schema, str) else json.dumps(schema)}
    defn["spec"]["release"]["prefix"] = f"{singular}-"
    defn["spec"]["terraform"].update(terraform)
    return defn


def test_broken_definitions_are_rejected_and_isolated(tofu: Cluster, api: Api) -> None:
    obj = {"type": "object"}
    cases = {
        "bad-var-name": (_variant("bad-var-name", "BadVar", "badvars", "badvar",
                                  {**obj, "properties": {"9lives": {"type": "string"}}}, variableNaming="verbatim"),
                         "InvalidVariableName"),
        "reserved-var": (_variant("reserved-var", "Counted", "counteds", "counted",
                                  {**obj, "properties": {"count": {"type": "integer"}}}), "InvalidVariableName"),
        "clashing-vars": (_variant("clashing-vars", "Clash", "clashes", "clash",
                                   {**obj, "properties": {"cidrBlock": {"type": "string"},
                                                          "cidr_block": {"type": "string"}}}),
                          "InvalidVariableName"),
        "bad-placeholder": (_variant("bad-placeholder", "Placed", "placeds", "placed", schema_of("vpc.yaml"),
                                     writeOutputsToSecret={"name": "{{ .tenant }}-outputs"}),
                            "InvalidPlaceholder"),
        "bad-schema": (_variant("bad-schema", "Broken", "brokens", "broken", "{not json"), "InvalidSchema"),
        "dup-kind": (_variant("dup-kind", "VPC", "vpcs2", "vpc2", schema_of("vpc.yaml")), "KindConflict"),
    }
    try:
        for defn, _reason in cases.values():
            kubectl(tofu, "apply", "-f", "-", input=json.dumps(defn))
        for name, (defn, reason) in cases.items():
            cond = wait_for(lambda n=name: accepted(tofu, n), f"{name} Accepted condition")
            assert cond["status"] == "False" and cond["reason"] == reason, (name, cond)
            # only its author can fix it: Stalled (kstatus Failed), not Ready, nothing in progress
            conds = {c["type"]: c for c in get_json(tofu, "tofuapplicationdefinitions", name)["status"]["conditions"]}
            assert {t: (conds[t]["status"], conds[t]["reason"]) for t in ("Ready", "Reconciling", "Stalled")} == {
                "Ready": ("False", reason), "Reconciling": ("False", reason), "Stalled": ("True", reason)}, name
            assert conds["Stalled"]["message"] == cond["message"]
            event = wait_for(lambda n=name, r=reason: next(
                (e for e in events_of(tofu, n) if e["reason"] == r), None), f"{name} {reason} event")
            assert event["type"] == "Warning"
            plural = defn["spec"]["application"]["plural"]
            code, body = api.request("GET", f"/apis/{V}/namespaces/{NS}/{plural}")
            assert code == 404, (name, body)
        resources = served(tofu)
        for plural in ("badvars", "counteds", "clashes", "placeds", "brokens", "vpcs2"):
            assert plural not in resources.split()
        # Every other kind keeps working.
        assert "vpcs" in resources and "s3buckets" in resources
        assert (accepted(tofu, "vpc") or {}).get("status") == "True"
        assert row(tofu, "vpc", "net")[0] == "net"
        apply(tofu, "S3Bucket", "unaffected", {})
        assert tf_or_none(tofu, "s3bucket-unaffected") is not None
    finally:
        for name in cases:
            kubectl(tofu, "delete", "tofuapplicationdefinition", name, "--ignore-not-found")


# ------------------------------------------------------------------------------------ rollout


def test_definition_change_rolls_out_and_pins_state(tofu: Cluster, api: Api) -> None:
    defn = _variant("network", "Network", "networks", "network", schema_of("vpc.yaml"))
    kubectl(tofu, "apply", "-f", "-", input=json.dumps(defn))
    wait_for(lambda: "networks" in served(tofu), "network kind served", timeout=60)
    for name in ("one", "two"):
        apply(tofu, "Network", name, {"region": "eu-west-1"})
    before = {n: tf(tofu, f"network-{n}") for n in ("one", "two")}
    changed = copy.deepcopy(defn)
    changed["spec"]["terraform"].update(
        sourceRef={"kind": "OCIRepository", "name": "aws-vpc-v2", "namespace": "cozy-public"},
        path="./modules/vpc-v2", interval="20m", retryInterval="3m", approvePlan="manual",
        destroyResourcesOnDeletion=False, serviceAccountName="tf-runner-v2", storeReadablePlan="json",
        writeOutputsToSecret={"name": "{{ .namespace }}-{{ .name }}-net", "outputs": ["vpc_id"]},
        runnerPodTemplate={"metadata": {"labels": {"tier": "v2"}}},
        workspace="prod", backendConfig={"customConfiguration": "backend \"s3\" {}"},
    )
    changed["spec"]["release"]["labels"] = {"sharding.fluxcd.io/key": "tenants", "generation": "two"}
    kubectl(tofu, "apply", "-f", "-", input=json.dumps(changed))
    for name in ("one", "two"):
        wait_for(lambda n=name: tf(tofu, f"network-{n}")["spec"]["sourceRef"]["name"] == "aws-vpc-v2",
                 f"rollout to network-{name}")
        spec = tf(tofu, f"network-{name}")["spec"]
        assert spec["sourceRef"] == {"kind": "OCIRepository", "name": "aws-vpc-v2", "namespace": "cozy-public"}
        assert spec["path"] == "./modules/vpc-v2" and spec["interval"] == "20m" and spec["retryInterval"] == "3m"
        assert spec["approvePlan"] == "" and spec["destroyResourcesOnDeletion"] is False
        assert spec["serviceAccountName"] == "tf-runner-v2" and spec["storeReadablePlan"] == "json"
        assert spec["writeOutputsToSecret"] == {"name": f"{NS}-{name}-net", "outputs": ["vpc_id"]}
        assert spec["runnerPodTemplate"] == {"metadata": {"labels": {"tier": "v2"}}}
        # State location never moves for an existing instance.
        assert spec["workspace"] == before[name]["spec"]["workspace"] == "default"
        assert spec["backendConfig"] == before[name]["spec"]["backendConfig"]
        assert spec["vars"] == before[name]["spec"]["vars"]
        assert tf(tofu, f"network-{name}")["metadata"]["labels"]["generation"] == "two"
    status = wait_for(lambda: get_json(tofu, "tofuapplicationdefinition", "network").get("status", {})
                      .get("notRolledOut"), "status.notRolledOut")
    assert status == [{"name": "one", "namespace": NS, "fields": ["backendConfig", "workspace"]},
                      {"name": "two", "namespace": NS, "fields": ["backendConfig", "workspace"]}]
    event = wait_for(lambda: next((e for e in events_of(tofu, "network") if e["reason"] == "RolledOut"
                                   and "2 patched" in e["message"]), None), "RolledOut event")
    assert "notRolledOut" in event["message"]
    # A change no Terraform depends on: the next round finds every instance up to date as its page arrives, and
    # still reports the state locations they kept.
    again = copy.deepcopy(changed)
    schema = json.loads(again["spec"]["application"]["openAPISchema"])
    again["spec"]["application"]["openAPISchema"] = json.dumps({**schema, "description": "A network, v3."})
    kubectl(tofu, "apply", "-f", "-", input=json.dumps(again))
    generation = get_json(tofu, "tofuapplicationdefinition", "network")["metadata"]["generation"]
    after = wait_for(lambda: (s := get_json(tofu, "tofuapplicationdefinition", "network").get("status", {}))
                     .get("rollout", {}).get("observedGeneration") == generation and s, "the next rollout round")
    assert after["rollout"]["complete"] and after["rollout"]["rolledOut"] == 2, after["rollout"]
    assert after.get("notRolledOut") == status, after
    # A new instance gets the new workspace and backendConfig.
    apply(tofu, "Network", "three", {"region": "eu-west-1"})
    fresh = tf(tofu, "network-three")["spec"]
    assert fresh["workspace"] == "prod" and fresh["backendConfig"] == {"customConfiguration": "backend \"s3\" {}"}
    code, v3 = api.request("GET", f"/openapi/v3/apis/{GROUP}/v1alpha1")
    assert code == 200 and any("Network" in key for key in v3["components"]["schemas"])
    # Deleting the definition stops serving the kind and never touches a Terraform.
    kubectl(tofu, "delete", "tofuapplicationdefinition", "network")
    wait_for(lambda: "networks" not in served(tofu), "network kind gone")
    for name in ("one", "two", "three"):
        assert tf_or_none(tofu, f"network-{name}") is not None
    assert "vpcs" in served(tofu)


# ------------------------------------------------------------------------------------ secret values


#: The two ways a definition hands its Terraforms a Secret: as variables, and in the runner pod's environment.
SECRET_READERS = {
    "varsFrom": {"varsFrom": [{"kind": "Secret", "name": "guarded-creds"}]},
    "runner-env": {"runnerPodTemplate": {"spec": {"env": [
        {"name": "TF_VAR_token", "valueFrom": {"secretKeyRef": {"name": "guarded-creds", "key": "token"}}}]}}},
}


@pytest.mark.parametrize("reader", list(SECRET_READERS))
def test_a_secret_value_in_tofu_controllers_message_is_never_shown(tofu: Cluster, api: Api, reference: Any,
                                                                   reader: str) -> None:
    """A kind whose Terraforms read a Secret (varsFrom, or the runner pod's environment): OpenTofu prints its
    value in a diagnostic, which tofu-controller copies into Ready (written here onto the status subresource, as
    the controller would; the flux tier has it from the real one). No read of the Application shows the value:
    withheld until the service has read the Secret, then masked, in gets, lists and watches alike."""
    secret_value = "leak-from-guarded-creds-42"
    kubectl(tofu, "create", "secret", "generic", "guarded-creds", "-n", NS, f"--from-literal=token={secret_value}")
    defn = _variant("secretive", "Secretive", "secretives", "secretive", schema_of("vpc.yaml"),
                    **SECRET_READERS[reader])
    kubectl(tofu, "apply", "-f", "-", input=json.dumps(defn))
    try:
        wait_for(lambda: "secretives" in served(tofu), "secretives served", timeout=60)
        apply(tofu, "Secretive", "g1", {"region": "eu-west-1"})
        status = copy.deepcopy(reference("terraform-failed")["status"])
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        ready["message"] += f'\n\nvar.token is "{secret_value}"'
        code, body = api.request("PATCH", f"{TF_API}/namespaces/{NS}/terraforms/secretive-g1/status",
                                 {"status": status}, content_type="application/merge-patch+json")
        assert code == 200, body
        assert secret_value in json.dumps(tf(tofu, "secretive-g1")["status"])  # what the controller said
        path = f"/apis/{V}/namespaces/{NS}/secretives"
        seen: list[str] = []

        def masked() -> bool:
            code, app = api.request("GET", f"{path}/g1")
            assert code == 200, app
            shown = json.dumps(app)
            assert secret_value not in shown
            seen.append(conditions(app)["Ready"]["message"])
            return "(sensitive value)" in seen[-1]

        wait_for(masked, "the Ready message masked", timeout=30, interval=0.2)
        assert "size must be between 1 and 10." in seen[-1] and all(
            message.startswith("tofu-controller's message is withheld") for message in seen[:-1])
        listed = kubectl(tofu, "get", f"secretives.{GROUP}", "-n", NS, "-o", "json").stdout
        assert secret_value not in listed and "(sensitive value)" in listed
        request = urllib.request.Request(f"{tofu.server}{path}?watch=1&resourceVersion=0&timeoutSeconds=1",
                                         headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=30, context=api.ctx) as response:
            watched = response.read().decode()
        assert '"g1"' in watched and secret_value not in watched and "(sensitive value)" in watched
    finally:
        kubectl(tofu, "delete", f"secretives.{GROUP}", "g1", "-n", NS, "--wait=false", check=False)
        kubectl(tofu, "delete", "tofuapplicationdefinition", "secretive", check=False)
        kubectl(tofu, "delete", "secret", "guarded-creds", "-n", NS, check=False)
        wait_for(lambda: "secretives" not in served(tofu), "secretives no longer served", timeout=60)


# ------------------------------------------------------------------------------------ --group


def test_configurable_group(tofu: Cluster) -> None:
    group = "tofu.example.io"
    alt = services.Service("tofu-agl-alt", "tofu_agl", group, extra_args=("--group", group))
    services.start(tofu, alt)
    try:
        wait_for(lambda: "vpcs" in served(tofu, group), f"vpcs in {group}", timeout=60)
        apply(tofu, "VPC", "elsewhere", {"region": "eu-west-1"}, group=group)
        obj = tf(tofu, "vpc-elsewhere")
        assert obj["metadata"]["labels"]["apps.cozystack.io/application.group"] == group
        app = get_json(tofu, f"vpcs.{group}", "elsewhere", "-n", NS)
        assert app["apiVersion"] == f"{group}/v1alpha1"
        # Each group sees only its own Applications.
        result = kubectl(tofu, "get", f"vpcs.{GROUP}", "elsewhere", "-n", NS, check=False)
        assert result.returncode != 0 and "NotFound" in result.stderr
        names = kubectl(tofu, "get", f"vpcs.{group}", "-n", NS, "-o", "name").stdout.split()
        assert names == [f"vpc.{group}/elsewhere"]
    finally:
        services.stop(tofu, alt)
        aggregation.unregister(tofu, group, "v1alpha1")
