"""Run the real source-controller and helm-controller as local processes against the local control plane.

Both are the pinned releases built by :func:`build.ensure_flux`. Each runs under its own
client-certificate identity bound to a ClusterRole that grants what it needs here (in a Flux install
helm-controller is cluster-admin; here it may only manage the kinds the sample charts create). Every
listener is on a free 127.0.0.1 port: source-controller serves its artifact storage there and
advertises that address in ``status.artifact.url``, which is where helm-controller downloads charts.
Leader election is off: one replica each.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import build, chartrepo, pki
from .build import log
from .cluster import Cluster, ClusterError, free_port
from .processes import Process

#: The namespace of the HelmRepository that points at :mod:`chartrepo` (cozystack keeps its sources there).
SOURCES_NAMESPACE = "cozy-system"
HELM_REPOSITORY = "agl-charts"
SAMPLE_SOURCES = Path(__file__).resolve().parents[2] / "samples" / "sources"

_FLUX_SOURCES = "source.toolkit.fluxcd.io"
_SOURCE_KINDS = ["buckets", "gitrepositories", "helmcharts", "helmrepositories", "ocirepositories",
                 "externalartifacts"]
_EVENTS = [{"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]

#: What each controller may do. source-controller reconciles the source kinds and reads the Secrets
#: they reference; helm-controller reconciles HelmReleases, reads their chart sources, and (acting as
#: Helm) manages release Secrets and what the sample charts render: ConfigMaps, Secrets, Services,
#: Deployments.
RULES: dict[str, list[dict[str, Any]]] = {
    "source-controller": [
        *_EVENTS,
        {"apiGroups": [""], "resources": ["secrets", "configmaps", "serviceaccounts"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [_FLUX_SOURCES], "resources": _SOURCE_KINDS,
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [_FLUX_SOURCES],
         "resources": [f"{kind}/{sub}" for kind in _SOURCE_KINDS for sub in ("status", "finalizers")],
         "verbs": ["get", "update", "patch"]},
    ],
    "helm-controller": [
        *_EVENTS,
        {"apiGroups": ["helm.toolkit.fluxcd.io"], "resources": ["helmreleases"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["helm.toolkit.fluxcd.io"], "resources": ["helmreleases/status", "helmreleases/finalizers"],
         "verbs": ["get", "update", "patch"]},
        {"apiGroups": [_FLUX_SOURCES], "resources": ["helmcharts", "ocirepositories", "externalartifacts"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps", "secrets", "services"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["apps"], "resources": ["deployments"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        # Helm's wait reads a Deployment's ReplicaSets and Pods to judge readiness.
        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    ],
}


@dataclass(frozen=True)
class Controllers:
    chart_repository: str
    storage: str


def identity(cluster: Cluster, name: str) -> Path:
    """A kubeconfig for ``agl:<name>`` bound to its ClusterRole (created or updated here)."""
    user = f"agl:{name}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": user}, "rules": RULES[name]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": user},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": [role, binding]}))
    ca = pki.ensure_ca(cluster.pki_dir, "ca", "agl-local-ca")
    pair = pki.issue(ca, cluster.pki_dir, f"flux-{name}", user)
    return cluster.write_kubeconfig(cluster.dir / f"flux-{name}.kubeconfig", user, pair, cluster.server)


def _start_controller(cluster: Cluster, name: str, binary: Path, extra: list[str], port: int) -> None:
    """Start one controller (unless it runs) with every listener on loopback; ``port`` is recorded."""
    process = Process(cluster, name)
    if process.running() is not None:
        return
    kubeconfig = identity(cluster, name)
    health = free_port()
    workdir = cluster.dir / name
    workdir.mkdir(exist_ok=True)
    process.spawn([str(binary), "--enable-leader-election=false", f"--metrics-addr=127.0.0.1:{free_port()}",
                   f"--health-addr=127.0.0.1:{health}", "--events-addr=", *extra],
                  port=port, ready_url=f"http://127.0.0.1:{health}/readyz", cwd=workdir,
                  env={"KUBECONFIG": str(kubeconfig), "HOME": str(workdir), "TMPDIR": str(workdir)},
                  timeout=120)
    log(f"started {name} ({binary.name}), log {process.log_file}")


def apply_sources(cluster: Cluster, url: str) -> None:
    """Apply the sample sources with the repository URL of this run, then publish their ExternalArtifacts."""
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SOURCES_NAMESPACE}}))
    for path in sorted(SAMPLE_SOURCES.glob("*.yaml")):
        text = path.read_text().replace("http://127.0.0.1:8879/", url)
        cluster.kubectl("apply", "-f", "-", input=text)
    for doc in (d for path in sorted(SAMPLE_SOURCES.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text())):
        if doc and doc["kind"] == "ExternalArtifact":
            publish_external_artifact(cluster, doc["metadata"]["name"], doc["metadata"]["namespace"],
                                      doc["spec"]["sourceRef"])


def publish_external_artifact(cluster: Cluster, name: str, namespace: str, source: dict[str, str],
                              timeout: float = 180) -> None:
    """Play cozystack's artifact publisher: copy the Ready source's artifact into the ExternalArtifact's status."""
    resource = f"{source['kind'].lower()}s.{_FLUX_SOURCES}"
    deadline = time.monotonic() + timeout
    while True:
        got = json.loads(cluster.kubectl("get", resource, source["name"], "-n", source.get("namespace", namespace),
                                         "-o", "json").stdout)
        status = got.get("status", {})
        if status.get("artifact") and any(c["type"] == "Ready" and c["status"] == "True"
                                          for c in status.get("conditions", [])):
            break
        if time.monotonic() > deadline:
            raise ClusterError(f"{resource}/{source['name']} has no Ready artifact after {timeout:.0f}s: {status}")
        time.sleep(1)
    artifact = status["artifact"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.kubectl("patch", f"externalartifacts.{_FLUX_SOURCES}", name, "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {"artifact": artifact, "conditions": [
                        {"type": "Ready", "status": "True", "reason": "Succeeded", "lastTransitionTime": now,
                         "observedGeneration": 1,
                         "message": f"published {artifact['revision']} of {source['kind']}/{source['name']}"}]}}))


def start(cluster: Cluster) -> Controllers:
    """Build (or reuse) the controllers, serve the charts, start both controllers, apply the sources."""
    binaries = build.ensure_flux()
    try:
        repository = chartrepo.start(cluster)
        running = Process(cluster, "source-controller").running()
        storage = f"127.0.0.1:{running.port if running else free_port()}"
        artifacts = cluster.dir / "source-controller" / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        _start_controller(cluster, "source-controller", binaries.source_controller, [
            f"--storage-path={artifacts}", f"--storage-addr={storage}", f"--storage-adv-addr={storage}"],
            port=int(storage.rsplit(":", 1)[1]))
        # ExternalArtifact chart sources (what cozystack's definitions use) are behind a feature gate
        # that is off by default in helm-controller v1.6.2.
        _start_controller(cluster, "helm-controller", binaries.helm_controller,
                          ["--feature-gates=ExternalArtifact=true"], port=0)
        apply_sources(cluster, repository.url)
    except BaseException:
        stop(cluster)
        raise
    return Controllers(repository.url, storage)


def stop(cluster: Cluster) -> None:
    for name in ("helm-controller", "source-controller"):
        Process(cluster, name).stop()
    chartrepo.stop(cluster)
