"""helm_agl end to end through kube-apiserver's real aggregation layer, driven by kubectl."""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from localcluster import build, services
from localcluster.cluster import Cluster

from tests.kube import Api, get_json, kubectl, load_fixture, wait_for

GROUP = "apps.cozystack.io"
NS = "tenant-a"
HR = "helmreleases.helm.toolkit.fluxcd.io"




def hr(cluster: Cluster, name: str, ns: str = NS) -> dict[str, Any]:
    result: dict[str, Any] = get_json(cluster, HR, name, "-n", ns)
    return result


def hr_or_none(cluster: Cluster, name: str, ns: str = NS) -> dict[str, Any] | None:
    result = kubectl(cluster, "get", HR, name, "-n", ns, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def app_manifest(kind: str, name: str, spec: dict[str, Any], ns: str = NS, **meta: Any) -> str:
    return json.dumps({"apiVersion": f"{GROUP}/v1alpha1", "kind": kind,
                       "metadata": {"name": name, "namespace": ns, **meta}, "spec": spec})


@pytest.fixture(scope="module")
def helm(control_plane: Cluster, helm_service: services.Running) -> Iterator[Cluster]:
    """helm_agl running, the postgres and redis definitions applied and served, namespace tenant-a."""
    kubectl(control_plane, "create", "namespace", NS, check=False)
    for name in ("postgres.yaml", "redis.yaml"):
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture(name)))
    wait_for(lambda: "postgreses" in kubectl(control_plane, "api-resources", f"--api-group={GROUP}",
                                             "--cached=false", check=False).stdout, "postgres kind served")
    yield control_plane


def _accepted(cluster: Cluster, name: str) -> dict[str, Any] | None:
    defn = get_json(cluster, "applicationdefinitions", name)
    for cond in defn.get("status", {}).get("conditions", []):
        if cond["type"] == "Accepted":
            return dict(cond)
    return None


def test_definitions_accepted(helm: Cluster) -> None:
    for name in ("postgres", "redis"):
        cond = wait_for(lambda n=name: _accepted(helm, n), f"{name} Accepted condition")
        assert cond["status"] == "True" and cond["reason"] == "Accepted"
        defn = get_json(helm, "applicationdefinitions", name)
        # served, so Ready; as kstatus reads it: the generation acted on, nothing in progress, nothing stalled
        assert defn["status"]["observedGeneration"] == defn["metadata"]["generation"]
        conds = {c["type"]: (c["status"], c["reason"]) for c in defn["status"]["conditions"]}
        assert conds == {"Accepted": ("True", "Accepted"), "Ready": ("True", "Served"),
                         "Reconciling": ("False", "Served"), "Stalled": ("False", "Accepted")}


def test_a_rejected_definition_is_stalled_and_not_ready(helm: Cluster) -> None:
    broken = load_fixture("redis.yaml")
    broken["metadata"]["name"] = "redis-twin"  # claims the kind redis already serves
    kubectl(helm, "apply", "-f", "-", input=json.dumps(broken))
    try:
        cond = wait_for(lambda: _accepted(helm, "redis-twin"), "redis-twin Accepted condition")
        assert (cond["status"], cond["reason"]) == ("False", "KindConflict")
        defn = get_json(helm, "applicationdefinitions", "redis-twin")
        assert defn["status"]["observedGeneration"] == defn["metadata"]["generation"]
        conds = {c["type"]: c for c in defn["status"]["conditions"]}
        assert (conds["Stalled"]["status"], conds["Stalled"]["reason"]) == ("True", "KindConflict")
        assert conds["Stalled"]["message"] == cond["message"]
        assert (conds["Ready"]["status"], conds["Reconciling"]["status"]) == ("False", "False")
    finally:
        kubectl(helm, "delete", "applicationdefinitions", "redis-twin", "--wait=false")


def test_create_emits_helmrelease_exactly(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=app_manifest(
        "Postgres", "orders", {"replicas": 3},
        labels={"team": "payments"}, annotations={"note": "x"}))
    release = hr(helm, "postgres-orders")
    meta, spec = release["metadata"], release["spec"]
    assert meta["labels"] == {
        "apps.cozystack.io-team": "payments",
        "apps.cozystack.io/application.kind": "Postgres",
        "apps.cozystack.io/application.group": GROUP,
        "apps.cozystack.io/application.name": "orders",
        **load_fixture("postgres.yaml")["spec"]["release"].get("labels", {}),
    }
    annotations = dict(meta.get("annotations", {}))
    # The Application's managedFields, in the service's own annotation (client-side apply is an Update).
    managed = json.loads(annotations.pop("apps.cozystack.io/managed-fields"))
    assert [(e["manager"], e["operation"]) for e in managed] == [("kubectl-client-side-apply", "Update")]
    user_annotations = {k: v for k, v in annotations.items()
                        if not k.startswith("apps.cozystack.io-kubectl.kubernetes.io")}
    assert user_annotations == {"apps.cozystack.io-note": "x"}
    chart_ref = load_fixture("postgres.yaml")["spec"]["release"]["chartRef"]
    assert spec["chartRef"] == {k: chart_ref[k] for k in ("kind", "name", "namespace")}
    assert spec["interval"] == "5m0s" and spec["maxHistory"] == 5
    # postgres.yaml carries install 15m / upgrade 20m / disable-wait false annotations.
    assert spec["install"] == {"timeout": "15m0s", "strategy": {"name": "RetryOnFailure", "retryInterval": "30s"}}
    assert spec["upgrade"] == {"timeout": "20m0s", "strategy": {"name": "RetryOnFailure", "retryInterval": "30s"}}
    assert spec["valuesFrom"] == [{"kind": "Secret", "name": "cozystack-values"}]
    assert spec["values"] == {"replicas": 3}  # as given: no defaults written
    postgres_release = load_fixture("postgres.yaml")["spec"]["release"]
    if postgres_release.get("healthCheckExprs"):
        assert spec["healthCheckExprs"] == postgres_release["healthCheckExprs"]
        assert spec["waitStrategy"] == {"name": postgres_release.get("waitStrategy", "poller")}


def test_defaults_timeouts_without_annotations(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "cache", {}))
    spec = hr(helm, "redis-cache")["spec"]
    assert spec["install"]["timeout"] == "10m0s" and spec["upgrade"]["timeout"] == "10m0s"
    assert "disableWait" not in spec["install"] and "waitStrategy" not in spec
    assert spec["values"] == {}


def test_get_table_and_yaml(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "table", {"replicas": 3}))
    out = kubectl(helm, "get", "redises", "-n", NS).stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "AGE", "VERSION"]
    assert any(line.split()[:2] == ["table", "Unknown"] for line in out[1:])
    app = yaml.safe_load(kubectl(helm, "get", "redis", "table", "-n", NS, "-o", "yaml").stdout)
    assert app["kind"] == "Redis" and app["apiVersion"] == f"{GROUP}/v1alpha1"
    # schema defaults applied on read, the given value kept
    assert app["spec"]["replicas"] == 3 and app["spec"]["resourcesPreset"] == "nano"
    assert app["spec"]["authEnabled"] is True
    assert app["metadata"]["uid"] == hr(helm, "redis-table")["metadata"]["uid"]


def test_status_projection_follows_helmrelease(helm: Cluster, reference: Any, api: Api) -> None:
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "status", {}))
    created = get_json(helm, "redis", "status", "-n", NS)
    # no controller has seen it: the CRD's -1 (nothing observed), and in progress for kstatus
    assert created["status"]["observedGeneration"] == -1
    reconciling = {c["type"]: c for c in created["status"]["conditions"]}["Reconciling"]
    assert (reconciling["status"], reconciling["reason"]) == ("True", "LatestGenerationNotObserved")
    assert reconciling["message"] == "waiting for helm-controller to observe generation 1"
    # (phase, the Application's Ready, its Reconciling): helm-controller's -1 and Progressing while installing,
    # Current once installed, its retry of a failed install still in progress
    for phase, ready, reconciling in (("helmrelease-installing", "Unknown", "Progressing"),
                                      ("helmrelease-installed", "True", "Succeeded"),
                                      ("helmrelease-failed", "False", "ProgressingWithRetry")):
        status = reference(phase)["status"]
        code, body = api.request("PATCH", f"/apis/helm.toolkit.fluxcd.io/v2/namespaces/{NS}/helmreleases/"
                                 "redis-status/status", {"status": status},
                                 content_type="application/merge-patch+json")
        assert code == 200, body
        app = get_json(helm, "redis", "status", "-n", NS)
        assert app["metadata"]["generation"] == 1
        assert app["status"]["observedGeneration"] == status["observedGeneration"]
        wanted = {c["type"]: c for c in status.get("conditions", []) if c["type"] in ("Ready", "Released")}
        shown = {c["type"]: c for c in app["status"].get("conditions", [])}
        assert {t: shown[t] for t in wanted} == wanted
        assert (shown["Reconciling"]["status"] == "True") == (reconciling != "Succeeded")
        assert shown["Reconciling"]["reason"] == reconciling and shown["Stalled"]["status"] == "False"
        if status.get("lastAttemptedRevision"):
            assert app["status"]["version"] == status["lastAttemptedRevision"]
        row = kubectl(helm, "get", "redis", "status", "-n", NS, "--no-headers").stdout.split()
        assert row[1] == ready
        if status.get("lastAttemptedRevision"):
            assert row[-1] == status["lastAttemptedRevision"]


def test_stale_resource_version_conflicts(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "stale", {"replicas": 2}))
    app = get_json(helm, "redis", "stale", "-n", NS)
    kubectl(helm, "patch", "redis", "stale", "-n", NS, "--type=merge", "-p", '{"spec":{"replicas":4}}')
    before = hr(helm, "redis-stale")
    app["spec"]["replicas"] = 5  # an edit made on the old copy
    result = kubectl(helm, "replace", "-f", "-", input=json.dumps(app), check=False)
    assert result.returncode != 0, result.stdout
    assert "the object has been modified" in result.stderr, result.stderr
    after = hr(helm, "redis-stale")
    assert after["spec"]["values"]["replicas"] == 4
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_patch_merge_json_and_annotate(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "patchme", {"replicas": 2}))
    kubectl(helm, "patch", "redis", "patchme", "-n", NS, "--type=merge", "-p", '{"spec":{"replicas":6}}')
    assert hr(helm, "redis-patchme")["spec"]["values"]["replicas"] == 6
    kubectl(helm, "patch", "redis", "patchme", "-n", NS, "--type=json",
            "-p", '[{"op":"replace","path":"/spec/replicas","value":7}]')
    assert hr(helm, "redis-patchme")["spec"]["values"]["replicas"] == 7
    kubectl(helm, "annotate", "redis", "patchme", "-n", NS, "owner=ops")
    assert hr(helm, "redis-patchme")["metadata"]["annotations"]["apps.cozystack.io-owner"] == "ops"
    kubectl(helm, "label", "redis", "patchme", "-n", NS, "tier=gold")
    assert hr(helm, "redis-patchme")["metadata"]["labels"]["apps.cozystack.io-tier"] == "gold"
    out = kubectl(helm, "get", "redises", "-n", NS, "-l", "tier=gold", "-o", "name").stdout.split()
    assert out == ["redis.apps.cozystack.io/patchme"]


def test_server_side_apply_create_and_update(helm: Cluster) -> None:
    manifest = app_manifest("Redis", "ssa", {"replicas": 2})
    kubectl(helm, "apply", "--server-side", "-f", "-", input=manifest)
    assert hr(helm, "redis-ssa")["spec"]["values"] == {"replicas": 2}
    kubectl(helm, "apply", "--server-side", "-f", "-", input=app_manifest("Redis", "ssa", {"replicas": 3}))
    assert hr(helm, "redis-ssa")["spec"]["values"] == {"replicas": 3}


def test_describe_shows_events(helm: Cluster) -> None:
    """An update is recorded as an Event on the Redis; a create is not (kube-apiserver records none for a custom
    resource): its answer came before the patch was sent, so its Event would be there by the update's."""
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "described", {}))
    kubectl(helm, "patch", "redis", "described", "-n", NS, "--type=merge", "-p", '{"spec":{"replicas":3}}')
    out = wait_for(lambda: (o := kubectl(helm, "describe", "redis", "described", "-n", NS).stdout)
                   and "Updated" in o and o, "describe to show the Updated event")
    assert "HelmRelease tenant-a/redis-described updated" in out and "Created" not in out, out


def test_explain(helm: Cluster) -> None:
    out = wait_for(lambda: (r := kubectl(helm, "explain", "redis.spec", check=False)).returncode == 0
                   and r.stdout, "kubectl explain redis.spec", timeout=90, interval=2)
    assert "replicas" in out and "resourcesPreset" in out


def test_watch_sees_changes(helm: Cluster) -> None:
    argv = [str(build.kubectl_dir() / "kubectl"), "--kubeconfig", str(helm.kubeconfig), "get", "redises", "-n",
            NS, "-w", "--output-watch-events", "--request-timeout=0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "watched", {}))
        kubectl(helm, "patch", "redis", "watched", "-n", NS, "--type=merge", "-p", '{"spec":{"replicas":5}}')
        kubectl(helm, "delete", "redis", "watched", "-n", NS)
        time.sleep(2)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    # Table output through the watch: EVENT NAME READY AGE VERSION
    assert out.splitlines()[0].split()[:3] == ["EVENT", "NAME", "READY"], out
    events = [line.split()[0] for line in out.splitlines() if len(line.split()) > 1 and line.split()[1] == "watched"]
    assert events[0] == "ADDED" and events[-1] == "DELETED" and "MODIFIED" in events, (out, err)


def test_delete_removes_helmrelease(helm: Cluster) -> None:
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "gone", {}))
    kubectl(helm, "delete", "redis", "gone", "-n", NS)
    assert hr_or_none(helm, "redis-gone") is None
    result = kubectl(helm, "get", "redis", "gone", "-n", NS, check=False)
    assert result.returncode != 0 and "NotFound" in result.stderr


def test_delete_with_finalizer_keeps_application_visible(helm: Cluster, api: Api) -> None:
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "finalized", {}))
    kubectl(helm, "patch", HR, "redis-finalized", "-n", NS, "--type=merge",
            "-p", '{"metadata":{"finalizers":["finalizers.fluxcd.io"]}}')
    kubectl(helm, "delete", "redis", "finalized", "-n", NS, "--wait=false")
    app = get_json(helm, "redis", "finalized", "-n", NS)
    assert app["metadata"].get("deletionTimestamp")
    kubectl(helm, "patch", HR, "redis-finalized", "-n", NS, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    wait_for(lambda: hr_or_none(helm, "redis-finalized") is None, "HelmRelease gone")


def test_dry_run_changes_nothing(helm: Cluster) -> None:
    kubectl(helm, "apply", "--dry-run=server", "-f", "-", input=app_manifest("Redis", "dry", {}))
    assert hr_or_none(helm, "redis-dry") is None
    kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", "dry", {"replicas": 2}))
    before = hr(helm, "redis-dry")
    kubectl(helm, "patch", "redis", "dry", "-n", NS, "--dry-run=server", "--type=merge",
            "-p", '{"spec":{"replicas":9}}')
    kubectl(helm, "delete", "redis", "dry", "-n", NS, "--dry-run=server")
    after = hr(helm, "redis-dry")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_list_selectors_and_pagination(helm: Cluster, api: Api) -> None:
    for i in range(3):
        kubectl(helm, "apply", "-f", "-", input=app_manifest("Redis", f"page{i}", {}, labels={"batch": "p"}))
    code, body = api.request("GET", f"/apis/{GROUP}/v1alpha1/namespaces/{NS}/redises?labelSelector=batch%3Dp&limit=2")
    assert code == 200 and len(body["items"]) == 2 and body["metadata"]["continue"]
    code, rest = api.request("GET", f"/apis/{GROUP}/v1alpha1/namespaces/{NS}/redises?labelSelector=batch%3Dp"
                             f"&limit=2&continue={body['metadata']['continue']}")
    assert code == 200 and len(rest["items"]) == 1
    names = {i["metadata"]["name"] for i in body["items"] + rest["items"]}
    assert names == {"page0", "page1", "page2"}
    code, one = api.request("GET", f"/apis/{GROUP}/v1alpha1/redises?fieldSelector=metadata.name%3Dpage1")
    assert code == 200 and [i["metadata"]["name"] for i in one["items"]] == ["page1"]
    code, bad = api.request("GET", f"/apis/{GROUP}/v1alpha1/redises?fieldSelector=spec.replicas%3D1")
    assert code == 400 and bad["kind"] == "Status"


def test_live_definition_change_rolls_out_and_delete_keeps_releases(helm: Cluster, api: Api) -> None:
    defn = load_fixture("redis.yaml")
    defn["metadata"]["name"] = "memcached"
    defn["spec"]["application"].update(kind="Memcached", plural="memcacheds", singular="memcached")
    defn["spec"]["release"]["prefix"] = "memcached-"
    kubectl(helm, "apply", "-f", "-", input=json.dumps(defn))
    wait_for(lambda: "memcacheds" in kubectl(helm, "api-resources", f"--api-group={GROUP}", "--cached=false").stdout,
             "memcached kind in discovery")
    for name in ("one", "two"):
        kubectl(helm, "apply", "-f", "-", input=app_manifest("Memcached", name, {}))
    changed = copy.deepcopy(defn)
    changed["spec"]["release"]["chartRef"] = {"kind": "HelmChart", "name": "memcached-v2", "namespace": "cozy-public"}
    changed["spec"]["release"]["labels"] = {"sharding.fluxcd.io/key": "tenants", "tier": "cache"}
    kubectl(helm, "apply", "-f", "-", input=json.dumps(changed))
    for name in ("one", "two"):
        wait_for(lambda n=name: hr(helm, f"memcached-{n}")["spec"]["chartRef"]["name"] == "memcached-v2",
                 f"rollout to memcached-{name}")
        release = hr(helm, f"memcached-{name}")
        assert release["spec"]["chartRef"] == {"kind": "HelmChart", "name": "memcached-v2",
                                               "namespace": "cozy-public"}
        assert release["metadata"]["labels"]["tier"] == "cache"
    events = kubectl(helm, "get", "events", "-A", "--field-selector", "involvedObject.name=memcached",
                     "-o", "json").stdout
    assert any(e["reason"] == "RolledOut" for e in json.loads(events)["items"])
    code, v3 = api.request("GET", f"/openapi/v3/apis/{GROUP}/v1alpha1")
    assert code == 200 and any("Memcached" in key for key in v3["components"]["schemas"])
    kubectl(helm, "delete", "applicationdefinition", "memcached")
    wait_for(lambda: "memcacheds" not in kubectl(helm, "api-resources", f"--api-group={GROUP}",
                                                 "--cached=false").stdout, "memcached kind gone")
    for name in ("one", "two"):
        assert hr_or_none(helm, f"memcached-{name}") is not None  # never deleted with the definition
    assert "postgreses" in kubectl(helm, "api-resources", f"--api-group={GROUP}", "--cached=false").stdout
