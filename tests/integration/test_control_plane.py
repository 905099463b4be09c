"""The local control plane is a real kube-apiserver: CRDs, strict validation and API aggregation."""

from __future__ import annotations

import copy
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import aggregation
from localcluster.cluster import Cluster

from helm_agl import build as helm_build
from helm_agl import names as helm_names
from helm_agl.definition import ApplicationDefinition
from tests.kube import FIXTURES, wait_for
from tofu_agl import build as tofu_build
from tofu_agl import names as tofu_names
from tofu_agl.definition import TofuApplicationDefinition

HR_CRD = "helmreleases.helm.toolkit.fluxcd.io"
TF_CRD = "terraforms.infra.contrib.fluxcd.io"


def create(cluster: Cluster, obj: dict[str, Any], *, dry_run: bool = True) -> tuple[int, str]:
    """Create through kubectl with strict field validation; returns (exit code, stderr)."""
    namespace = obj.get("metadata", {}).get("namespace")
    if namespace:
        cluster.kubectl("create", "namespace", namespace, check=False)
    args = ["create", "--validate=strict", "-f", "-", "-o", "name"]
    if dry_run:
        args.append("--dry-run=server")
    result = cluster.kubectl(*args, input=json.dumps(obj), check=False)
    return result.returncode, result.stderr


def test_kubernetes_version(control_plane: Cluster) -> None:
    version = control_plane.get_json("/version")
    assert isinstance(version, dict)
    assert (int(version["major"]), int(version["minor"].rstrip("+"))) >= (1, 35)


@pytest.mark.parametrize("crd", [HR_CRD, TF_CRD, "applicationdefinitions.cozystack.io",
                                 "tofuapplicationdefinitions.cozystack.io"])
def test_crds_established(control_plane: Cluster, crd: str) -> None:
    out = control_plane.kubectl("get", "crd", crd, "-o", "json").stdout
    conditions = {c["type"]: c["status"] for c in json.loads(out)["status"]["conditions"]}
    assert conditions["Established"] == "True"


def _sample(path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((FIXTURES / path).read_text())
    return loaded


def emitted_helmrelease() -> dict[str, Any]:
    """The HelmRelease helm_agl writes for the sample Postgres Application (every release setting the sample
    definition has: ExternalArtifact chartRef, timeouts, poller wait strategy, health checks)."""
    defn = ApplicationDefinition.from_object(_sample("definitions/postgres.yaml"))
    return helm_build.build(defn, _sample("applications/postgres-orders.yaml"), group=helm_names.GROUP)


def emitted_terraform() -> dict[str, Any]:
    """The Terraform tofu_agl writes for the sample VPC Application (the sample definition sets every Terraform
    field a definition can: runner pod template, backend config, varsFrom, outputs Secret, ...)."""
    defn = TofuApplicationDefinition.from_object(_sample("definitions/vpc.yaml"))
    return tofu_build.build(defn, _sample("applications/vpc-network.yaml"), group=tofu_names.DEFAULT_GROUP)


def test_emitted_helmrelease_accepted_strictly(control_plane: Cluster) -> None:
    code, err = create(control_plane, emitted_helmrelease())
    assert code == 0, err


def test_emitted_terraform_accepted_strictly(control_plane: Cluster) -> None:
    tf = emitted_terraform()
    assert {"runnerPodTemplate", "backendConfig", "varsFrom", "writeOutputsToSecret"} <= set(tf["spec"])
    code, err = create(control_plane, tf)
    assert code == 0, err


def _broken_hrs(base: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    bad_interval = copy.deepcopy(base)
    bad_interval["spec"]["interval"] = "ten minutes"
    yield "bad interval", bad_interval, "spec.interval"
    wrong_kind = copy.deepcopy(base)
    wrong_kind["spec"]["chartRef"]["kind"] = "GitRepository"
    yield "wrong chartRef kind", wrong_kind, "spec.chartRef.kind"
    both = copy.deepcopy(base)
    both["spec"]["chart"] = {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "p"}}}
    yield "chart and chartRef", both, "chartRef"
    unknown = copy.deepcopy(base)
    unknown["spec"]["valuesFromm"] = []
    yield "unknown field", unknown, "valuesFromm"


@pytest.mark.parametrize("case", ["bad interval", "wrong chartRef kind", "chart and chartRef", "unknown field"])
def test_broken_helmreleases_rejected(control_plane: Cluster, case: str) -> None:
    cases = {name: (obj, needle) for name, obj, needle in _broken_hrs(emitted_helmrelease())}
    obj, needle = cases[case]
    code, err = create(control_plane, obj)
    assert code != 0
    assert needle in err, err


def test_broken_terraform_rejected(control_plane: Cluster) -> None:
    tf = emitted_terraform()
    tf["spec"]["writeOutputsToSecret"]["labels"] = {"managed": True}
    code, err = create(control_plane, tf)
    assert code != 0
    assert "writeOutputsToSecret.labels" in err, err
    tf = emitted_terraform()
    tf["spec"]["sourceRef"]["kind"] = "HelmRepository"
    code, err = create(control_plane, tf)
    assert code != 0 and "spec.sourceRef.kind" in err, err
    tf = emitted_terraform()
    tf["spec"]["storeReadablePlan"] = "yaml"
    code, err = create(control_plane, tf)
    assert code != 0 and "spec.storeReadablePlan" in err, err


@pytest.mark.parametrize("fixture", sorted(p.name for p in (FIXTURES / "definitions").glob("*.yaml")))
def test_sample_definitions_accepted(control_plane: Cluster, fixture: str) -> None:
    obj = yaml.safe_load((FIXTURES / "definitions" / fixture).read_text())
    code, err = create(control_plane, obj)
    assert code == 0, err


def _definition(kind: str) -> dict[str, Any]:
    name = "postgres.yaml" if kind == "ApplicationDefinition" else "vpc.yaml"
    loaded: dict[str, Any] = yaml.safe_load((FIXTURES / "definitions" / name).read_text())
    return loaded


@pytest.mark.parametrize(
    ("kind", "path", "value", "needle"),
    [
        ("ApplicationDefinition", ("spec", "release", "prefix"), "Bad_Prefix", "spec.release.prefix"),
        ("ApplicationDefinition", ("spec", "release", "chartRef", "kind"), "GitRepository",
         "spec.release.chartRef.kind"),
        ("ApplicationDefinition", ("spec", "release", "waitStrategy"), "sometimes", "spec.release.waitStrategy"),
        ("TofuApplicationDefinition", ("spec", "terraform", "approvePlan"), "yes", "spec.terraform.approvePlan"),
        ("TofuApplicationDefinition", ("spec", "terraform", "interval"), "10 minutes", "spec.terraform.interval"),
        ("TofuApplicationDefinition", ("spec", "terraform", "variableNaming"), "kebab",
         "spec.terraform.variableNaming"),
        ("TofuApplicationDefinition", ("spec", "terraform", "sourceRef", "kind"), "HelmRepository",
         "spec.terraform.sourceRef.kind"),
    ],
)
def test_invalid_definitions_rejected(control_plane: Cluster, kind: str, path: tuple[str, ...], value: str,
                                      needle: str) -> None:
    obj = _definition(kind)
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    code, err = create(control_plane, obj)
    assert code != 0
    assert needle in err, err


# --------------------------------------------------------------------------------------------
# API aggregation, proven with a throwaway test-only extension server answering discovery.

STUB_GROUP, STUB_VERSION = "stub.agl.test", "v1"


class _Discovery(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None, bool]] = []

    def do_GET(self) -> None:
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        self.seen.append((self.path, self.headers.get("X-Remote-User"), bool(peer)))
        if self.path.split("?")[0] == f"/apis/{STUB_GROUP}/{STUB_VERSION}":
            body = {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{STUB_GROUP}/{STUB_VERSION}",
                    "resources": [{"name": "widgets", "singularName": "widget", "namespaced": True,
                                   "kind": "Widget", "verbs": ["get", "list"]}]}
            code = 200
        else:
            body, code = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404}, 404
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def stub_server(control_plane: Cluster) -> Iterator[int]:
    ca, cert = aggregation.serving_cert(control_plane, "stub", "agl-test")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert.cert), str(cert.key))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata=_front_proxy_ca(control_plane))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Discovery)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    aggregation.register(control_plane, group=STUB_GROUP, version=STUB_VERSION, service="stub", namespace="agl-test",
                         port=port, ca_bundle=ca.cert)
    yield port
    aggregation.unregister(control_plane, STUB_GROUP, STUB_VERSION)
    server.shutdown()


def _front_proxy_ca(cluster: Cluster) -> str:
    cm = json.loads(cluster.kubectl("get", "configmap", "-n", "kube-system", "extension-apiserver-authentication",
                                    "-o", "json").stdout)
    return str(cm["data"]["requestheader-client-ca-file"])


def test_aggregated_server_reachable_through_kube_apiserver(control_plane: Cluster, stub_server: int) -> None:
    aggregation.wait_available(control_plane, STUB_GROUP, STUB_VERSION)
    out = control_plane.kubectl("get", "--raw", f"/apis/{STUB_GROUP}/{STUB_VERSION}").stdout
    assert json.loads(out)["resources"][0]["kind"] == "Widget"
    # kube-apiserver proxied as the front proxy: client cert verified by our CA and the user named.
    proxied = [s for s in _Discovery.seen if s[1] == "agl-admin"]
    assert proxied and all(verified for _, _, verified in proxied)
    # kube-apiserver's aggregated discovery takes a new APIService's resources in on its own schedule.
    wait_for(lambda: "widgets.stub.agl.test" in control_plane.kubectl(
        "api-resources", f"--api-group={STUB_GROUP}", "--cached=false", "-o", "name").stdout,
        "the stub's resources in kubectl api-resources", timeout=90, interval=1)


def test_minted_user_has_no_rights(control_plane: Cluster) -> None:
    kubeconfig: Path = control_plane.user_kubeconfig("tenant-alice", ("tenants",))
    result = control_plane.kubectl("get", "namespaces", kubeconfig=kubeconfig, check=False)
    assert result.returncode != 0
    assert 'User "tenant-alice" cannot list resource "namespaces"' in result.stderr
