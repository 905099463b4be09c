"""Bad input against helm_agl through the real kube-apiserver (SPEC §5).

Every bad request must get a clear 4xx ``Status`` *and change nothing*: each check below takes a
snapshot of every HelmRelease (namespace, name, resourceVersion) before and after the request.
Where Kubernetes itself defines the answer (patch documents, patch options), the expected
answer is taken from kube-apiserver's own handling of the same request on a ConfigMap.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from localcluster import services
from localcluster.cluster import Cluster

from tests.kube import Api, load_fixture, wait_for

GROUP = "apps.cozystack.io"
VERSION = "v1alpha1"
NS = "bad-a"
OTHER_NS = "bad-b"
PREFIX = "redis-"
BASE = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/redises"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"

Releases = dict[tuple[str, str], str]


def kubectl(cluster: Cluster, *args: str, input: str | None = None, check: bool = True) -> Any:
    return cluster.kubectl(*args, input=input, check=check)


def releases(cluster: Cluster) -> Releases:
    """Every HelmRelease in the cluster by (namespace, name), with its resourceVersion."""
    out = json.loads(kubectl(cluster, "get", "helmreleases.helm.toolkit.fluxcd.io", "-A", "-o", "json").stdout)
    return {(i["metadata"]["namespace"], i["metadata"]["name"]): i["metadata"]["resourceVersion"]
            for i in out["items"]}


def redis(name: str = "fresh", spec: Any = None, **overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Redis",
                           "metadata": {"name": name, "namespace": NS},
                           "spec": {} if spec is None else spec}
    obj.update(overrides)
    return obj


class Checker:
    """Sends one request and checks the Status it gets and that no HelmRelease changed."""

    def __init__(self, cluster: Cluster, api: Api) -> None:
        self.cluster = cluster
        self.api = api

    def expect(self, method: str, path: str, body: Any, code: int, reason: str | None = None, *,
               content_type: str = "application/json") -> dict[str, Any]:
        before = releases(self.cluster)
        got, status = self.api.request(method, path, body, content_type=content_type)
        after = releases(self.cluster)
        assert got == code, (got, status)
        assert isinstance(status, dict) and status.get("kind") == "Status", status
        assert status["code"] == code and status["status"] == "Failure", status
        if reason is not None:
            assert status["reason"] == reason, status
        assert status.get("message"), status
        assert after == before, "a rejected request changed HelmReleases"
        return status


@pytest.fixture(scope="module")
def helm(control_plane: Cluster, helm_service: services.Running) -> Iterator[Cluster]:
    for ns in (NS, OTHER_NS):
        kubectl(control_plane, "create", "namespace", ns, check=False)
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture("redis.yaml")))
    wait_for(lambda: "redises" in kubectl(control_plane, "api-resources", f"--api-group={GROUP}",
                                          "--cached=false", check=False).stdout, "redis kind served")
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(redis("existing", {"replicas": 2})))
    kubectl(control_plane, "create", "configmap", "probe", "-n", NS, "--from-literal=a=b", check=False)
    yield control_plane


@pytest.fixture
def check(helm: Cluster, api: Api) -> Checker:
    return Checker(helm, api)


def causes(status: dict[str, Any]) -> list[dict[str, str]]:
    found: list[dict[str, str]] = status.get("details", {}).get("causes", [])
    return found


# --------------------------------------------------------------------------------- bodies: 400


def test_malformed_json(check: Checker) -> None:
    status = check.expect("POST", BASE, '{"apiVersion": "apps.cozystack.io/v1alpha1", "kind": ', 400, "BadRequest")
    assert "JSON" in status["message"]


def test_malformed_yaml(check: Checker) -> None:
    body = "apiVersion: apps.cozystack.io/v1alpha1\nkind: Redis\nmetadata: {name: [unclosed\n"
    status = check.expect("POST", BASE, body, 400, "BadRequest", content_type="application/yaml")
    assert "YAML" in status["message"]


def test_yaml_that_is_not_an_object(check: Checker) -> None:
    check.expect("POST", BASE, "- just\n- a list\n", 400, "BadRequest", content_type="application/yaml")


def test_wrong_api_version(check: Checker) -> None:
    status = check.expect("POST", BASE, redis(apiVersion=f"{GROUP}/v1"), 400, "BadRequest")
    assert "API version" in status["message"]


def test_missing_api_version_and_kind(check: Checker) -> None:
    check.expect("POST", BASE, {"metadata": {"name": "bare"}, "spec": {}}, 400, "BadRequest")


def test_wrong_kind(check: Checker) -> None:
    # As for a custom resource: the body decodes, then validation refuses the kind, naming it.
    status = check.expect("POST", BASE, redis(kind="Postgres"), 422, "Invalid")
    assert status["details"]["kind"] == "Postgres" and "must be Redis" in status["message"]


@pytest.mark.parametrize(("url_ns", "body_ns"), [(NS, OTHER_NS), (OTHER_NS, NS)])
def test_namespace_mismatch(check: Checker, api: Api, url_ns: str, body_ns: str) -> None:
    body = redis("mismatched")
    body["metadata"]["namespace"] = body_ns
    status = check.expect("POST", BASE.replace(f"/namespaces/{NS}/", f"/namespaces/{url_ns}/"), body, 400,
                          "BadRequest")
    assert "namespace" in status["message"]
    # Neither the namespace of the URL nor the one of the body got the object.
    for ns in (NS, OTHER_NS):
        code, _ = api.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/redises/mismatched")
        assert code == 404, ns


def test_name_mismatch_on_update(check: Checker) -> None:
    check.expect("PUT", f"{BASE}/existing", redis("other"), 400, "BadRequest")


@pytest.mark.parametrize("spec", [[1, 2], "a string", 7, True])
def test_spec_not_an_object(check: Checker, spec: Any) -> None:
    status = check.expect("POST", BASE, redis(spec=spec), 422, "Invalid")
    assert "spec in body must be of type object" in status["message"]


def test_reserved_underscore_keys(check: Checker, helm: Cluster) -> None:
    """A reserved ``_`` key the schema does not declare is an unknown field, as on a CRD: refused under
    Strict (kubectl's default), pruned with a warning otherwise -- never written into the values."""
    status = check.expect("POST", f"{BASE}?fieldValidation=Strict",
                          redis(spec={"_cluster": {"x": 1}, "replicas": 2}), 400, "BadRequest")
    assert 'unknown field "spec._cluster"' in status["message"]
    code, created = check.api.request("POST", BASE, redis("pruned", spec={"_cluster": {"x": 1}, "replicas": 2}))
    assert code == 201 and "_cluster" not in created["spec"], created
    values = json.loads(kubectl(helm, "get", "helmreleases", f"{PREFIX}pruned", "-n", NS, "-o", "json").stdout)
    assert "_cluster" not in values["spec"]["values"]


def test_reserved_underscore_keys_on_update(check: Checker, helm: Cluster) -> None:
    current = json.loads(kubectl(helm, "get", "redis", "existing", "-n", NS, "-o", "json").stdout)
    current["spec"]["_namespace"] = {"host": "evil"}
    check.expect("PUT", f"{BASE}/existing?fieldValidation=Strict", current, 400, "BadRequest")
    check.expect("PATCH", f"{BASE}/existing?fieldValidation=Strict", {"spec": {"_x": 1}}, 422, "Invalid",
                 content_type="application/merge-patch+json")


# -------------------------------------------------------------------------------- names: 422


@pytest.mark.parametrize("name", ["UpperCase", "a" * (53 - len(PREFIX) + 1), "1starts-with-digit", "has.dot"])
def test_bad_names(check: Checker, name: str) -> None:
    status = check.expect("POST", BASE, redis(name), 422, "Invalid")
    assert [c["field"] for c in causes(status)] == ["metadata.name"], status


def test_longest_name_is_accepted_dry_run(check: Checker, api: Api, helm: Cluster) -> None:
    name = "a" * (53 - len(PREFIX))
    before = releases(helm)
    code, body = api.request("POST", f"{BASE}?dryRun=All", redis(name))
    assert code in (200, 201), body
    assert body["metadata"]["name"] == name
    assert releases(helm) == before


def test_missing_name(check: Checker) -> None:
    body = redis()
    del body["metadata"]["name"]
    status = check.expect("POST", BASE, body, 422, "Invalid")
    assert "metadata.name" in [c["field"] for c in causes(status)]


# ------------------------------------------------------------------------------- schema: 422


def test_schema_violations_one_cause_per_field(check: Checker) -> None:
    status = check.expect("POST", BASE, redis(spec={"replicas": "x", "resourcesPreset": "huge"}), 422, "Invalid")
    fields = sorted(c["field"] for c in causes(status))
    assert fields == ["spec.replicas", "spec.resourcesPreset"], status
    assert status["details"]["kind"] == "Redis" and status["details"]["group"] == GROUP


def test_schema_violation_on_update_and_patch(check: Checker, helm: Cluster) -> None:
    current = json.loads(kubectl(helm, "get", "redis", "existing", "-n", NS, "-o", "json").stdout)
    current["spec"]["replicas"] = 0  # minimum 1
    status = check.expect("PUT", f"{BASE}/existing", current, 422, "Invalid")
    assert [c["field"] for c in causes(status)] == ["spec.replicas"]
    status = check.expect("PATCH", f"{BASE}/existing", {"spec": {"external": "yes"}}, 422, "Invalid",
                          content_type="application/merge-patch+json")
    assert [c["field"] for c in causes(status)] == ["spec.external"]


def test_dry_run_create_of_invalid_object(check: Checker, helm: Cluster) -> None:
    status = check.expect("POST", f"{BASE}?dryRun=All", redis("drybad", {"replicas": "many"}), 422, "Invalid")
    assert [c["field"] for c in causes(status)] == ["spec.replicas"]
    assert (NS, PREFIX + "drybad") not in releases(helm)


# ------------------------------------------------------------------------- size and media types


def test_body_over_3_mib(check: Checker) -> None:
    body = json.dumps(redis("huge", {"storageClass": "x" * (3 * 1024 * 1024 + 10)}))
    check.expect("POST", BASE, body, 413, "RequestEntityTooLarge")


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "application/vnd.kubernetes.protobuf"])
def test_unsupported_content_type_on_post(check: Checker, content_type: str) -> None:
    check.expect("POST", BASE, json.dumps(redis("typed")), 415, "UnsupportedMediaType", content_type=content_type)


def test_strategic_merge_patch(check: Checker, api: Api) -> None:
    """Refused with 415 as kube-apiserver refuses it for a custom resource (here the definition)."""
    smp = "application/strategic-merge-patch+json"
    code, crd_answer = api.request("PATCH", "/apis/cozystack.io/v1alpha1/applicationdefinitions/redis",
                                   {"metadata": {"labels": {"x": "y"}}}, content_type=smp)
    assert (code, crd_answer["reason"]) == (415, "UnsupportedMediaType"), crd_answer
    _, before = api.request("GET", f"{BASE}/existing")
    status = check.expect("PATCH", f"{BASE}/existing", {"spec": {"replicas": before["spec"]["replicas"] + 1}}, 415,
                          "UnsupportedMediaType", content_type=smp)
    assert status["message"] == crd_answer["message"], (status, crd_answer)
    _, after = api.request("GET", f"{BASE}/existing")
    assert after == before


# --------------------------------------------------------------------------- state: 409 / 404


def test_stale_resource_version_on_put(check: Checker, helm: Cluster) -> None:
    current = json.loads(kubectl(helm, "get", "redis", "existing", "-n", NS, "-o", "json").stdout)
    rv = int(current["metadata"]["resourceVersion"])
    current["metadata"]["resourceVersion"] = str(rv - 1)
    current["spec"]["replicas"] = 5
    status = check.expect("PUT", f"{BASE}/existing", current, 409, "Conflict")
    assert "has been modified" in status["message"]


def test_create_existing(check: Checker) -> None:
    status = check.expect("POST", BASE, redis("existing", {"replicas": 9}), 409, "AlreadyExists")
    assert status["details"]["name"] == "existing"


def test_update_missing(check: Checker) -> None:
    status = check.expect("PUT", f"{BASE}/missing", redis("missing"), 404, "NotFound")
    assert status["details"]["name"] == "missing"


def test_patch_and_delete_missing(check: Checker) -> None:
    check.expect("PATCH", f"{BASE}/missing", {"spec": {}}, 404, "NotFound",
                 content_type="application/merge-patch+json")
    check.expect("DELETE", f"{BASE}/missing", None, 404, "NotFound")


def test_wrong_kind_of_release_is_not_found(check: Checker, helm: Cluster, api: Api) -> None:
    """A HelmRelease with the right name but without the kind labels is not this Application."""
    foreign = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": PREFIX + "foreign", "namespace": NS},
               "spec": {"chartRef": {"kind": "HelmChart", "name": "x", "namespace": NS}, "interval": "5m"}}
    code, body = api.request("POST", f"/apis/helm.toolkit.fluxcd.io/v2/namespaces/{NS}/helmreleases", foreign)
    assert code == 201, body
    check.expect("GET", f"{BASE}/foreign", None, 404, "NotFound")
    check.expect("PUT", f"{BASE}/foreign", redis("foreign"), 404, "NotFound")
    check.expect("DELETE", f"{BASE}/foreign", None, 404, "NotFound")
    check.expect("POST", BASE, redis("foreign"), 409, "AlreadyExists")


# --------------------------------------------------------------- patch documents, as kube does


def kube_answer(api: Api, path: str, body: Any, content_type: str) -> tuple[int, dict[str, Any]]:
    """What kube-apiserver itself answers to the same patch on a built-in object."""
    code, status = api.request("PATCH", path, body, content_type=content_type)
    assert isinstance(status, dict) and status.get("kind") == "Status", (code, status)
    return code, status


@pytest.mark.parametrize("ops", [
    [{"op": "frobnicate", "path": "/spec/replicas", "value": 1}],
    [{"op": "replace", "path": "/spec/nothing/here", "value": 1}],
    [{"op": "test", "path": "/metadata/name", "value": "somebody-else"}],
    [{"path": "/spec/replicas", "value": 1}],
])
def test_json_patch_that_cannot_apply(check: Checker, api: Api, ops: list[dict[str, Any]]) -> None:
    kube_ops = [{**op, "path": op["path"].replace("/spec/", "/data/")} for op in ops]
    code, kube = kube_answer(api, f"{CONFIGMAPS}/probe", json.dumps(kube_ops), "application/json-patch+json")
    assert code in (400, 422), kube
    check.expect("PATCH", f"{BASE}/existing", json.dumps(ops), code, kube["reason"],
                 content_type="application/json-patch+json")


def test_json_patch_not_a_list(check: Checker, api: Api) -> None:
    body = '{"op": "add"}'
    code, kube = kube_answer(api, f"{CONFIGMAPS}/probe", body, "application/json-patch+json")
    check.expect("PATCH", f"{BASE}/existing", body, code, kube["reason"], content_type="application/json-patch+json")


def test_malformed_merge_patch(check: Checker) -> None:
    check.expect("PATCH", f"{BASE}/existing", '{"spec": ', 400, "BadRequest",
                 content_type="application/merge-patch+json")


def test_apply_patch_without_field_manager(check: Checker, api: Api) -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}, "data": {"a": "c"}})
    code, kube = kube_answer(api, f"{CONFIGMAPS}/probe", body, "application/apply-patch+yaml")
    assert code in (400, 422), kube
    status = check.expect("PATCH", f"{BASE}/existing", json.dumps(redis("existing", {"replicas": 3})), code,
                          kube["reason"], content_type="application/apply-patch+yaml")
    assert "fieldManager" in status["message"]


def test_apply_patch_creating_an_invalid_object(check: Checker, helm: Cluster) -> None:
    status = check.expect("PATCH", f"{BASE}/applied?fieldManager=test",
                          json.dumps(redis("applied", {"replicas": "x"})), 422, "Invalid",
                          content_type="application/apply-patch+yaml")
    assert [c["field"] for c in causes(status)] == ["spec.replicas"]
    status = check.expect("PATCH", f"{BASE}/Bad_Name?fieldManager=test", json.dumps(redis("Bad_Name")), 422,
                          "Invalid", content_type="application/apply-patch+yaml")
    assert [c["field"] for c in causes(status)] == ["metadata.name"]


@pytest.mark.parametrize("meta", [{"name": "renamed"}, {"namespace": OTHER_NS}])
def test_merge_patch_cannot_move_the_object(check: Checker, meta: dict[str, str]) -> None:
    check.expect("PATCH", f"{BASE}/existing", {"metadata": meta}, 400, "BadRequest",
                 content_type="application/merge-patch+json")


def test_apply_patch_of_wrong_kind(check: Checker) -> None:
    check.expect("PATCH", f"{BASE}/existing?fieldManager=test", json.dumps(redis("existing", kind="Postgres")),
                 400, "BadRequest", content_type="application/apply-patch+yaml")


# -------------------------------------------------------------------------------- query: 400


def test_unknown_field_selector(check: Checker) -> None:
    status = check.expect("GET", f"{BASE}?fieldSelector={quote('spec.replicas=2')}", None, 400, "BadRequest")
    assert "spec.replicas" in status["message"]


@pytest.mark.parametrize("selector", ["a in (b", "!!x", "a=b=c", "-bad-=x", "a,,b"])
def test_bad_label_selector(check: Checker, selector: str) -> None:
    check.expect("GET", f"{BASE}?labelSelector={quote(selector)}", None, 400, "BadRequest")


def test_bad_write_options(check: Checker) -> None:
    check.expect("POST", f"{BASE}?dryRun=Some", redis("opts"), 422, "Invalid")


def test_good_request_still_works(check: Checker, api: Api, helm: Cluster) -> None:
    """The control: after all of the above, a correct request succeeds and writes one release."""
    before = releases(helm)
    code, body = api.request("POST", BASE, redis("control", {"replicas": 3}))
    assert code == 201, body
    after = releases(helm)
    assert set(after) - set(before) == {(NS, PREFIX + "control")}
