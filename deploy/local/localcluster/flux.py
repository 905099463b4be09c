"""Run the real source-controller, helm-controller, kustomize-controller and tofu-controller as local processes.

All four are the pinned releases built by :func:`build.ensure_flux`. Each runs under its own
client-certificate identity bound to a ClusterRole that grants what it needs here (in a Flux install
helm-controller is cluster-admin; here it may only manage the kinds the sample charts create). Every
listener is on a free 127.0.0.1 port: source-controller serves its artifact storage there and
advertises that address in ``status.artifact.url``, which is where helm-controller downloads charts
and tofu-controller downloads modules. Leader election is off: one replica each.

tofu-controller runs its runner in-process (``INSECURE_LOCAL_RUNNER=1``, its own mode for running
outside a cluster): no runner pod, ``tofu`` from the local build first on its PATH. That runner
listens on the fixed address localhost:30000, and tofu-controller v0.16.5 ignores a failure to
listen there, so a second local cluster's tofu-controller would silently talk to the first one's
runner: :func:`start` refuses to start one while the port is taken. That one runner keeps one OpenTofu
session at a time, so tofu-controller reconciles one Terraform at a time here. OpenTofu keeps each instance's
state in a Secret through the kubernetes backend; outside a pod that backend cannot use
``inClusterConfig``, so the local copies of the Tofu definitions point ``backendConfig.configPath`` at
the kubeconfig of the ``agl:tf-runner`` identity that :func:`state_kubeconfig` writes
(:mod:`localcluster.samples`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import bucketserver, build, chartrepo, gitserver, ociregistry, pki
from .build import log
from .cluster import Cluster, ClusterError, free_port
from .processes import Process

#: The namespace of the HelmRepository that points at :mod:`chartrepo` (cozystack keeps its sources there).
SOURCES_NAMESPACE = "cozy-system"
HELM_REPOSITORY = "agl-charts"
CHART_SOURCES = Path(__file__).resolve().parents[2] / "samples" / "sources" / "charts.yaml"

_FLUX_SOURCES = "source.toolkit.fluxcd.io"
_SOURCE_KINDS = ["buckets", "gitrepositories", "helmcharts", "helmrepositories", "ocirepositories",
                 "externalartifacts"]
_KUSTOMIZE = "kustomize.toolkit.fluxcd.io"
#: The groups of the Applications the services serve (``helm_agl.names`` and ``tofu_agl.names``; not
#: imported, so that the local stack does not load the services).
APPLICATION_GROUPS = ("apps.cozystack.io", "tofu.apps.cozystack.io")
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
    "tofu-controller": [
        *_EVENTS,
        {"apiGroups": ["infra.contrib.fluxcd.io"], "resources": ["terraforms"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["infra.contrib.fluxcd.io"], "resources": ["terraforms/status", "terraforms/finalizers"],
         "verbs": ["get", "update", "patch"]},
        {"apiGroups": [_FLUX_SOURCES], "resources": ["buckets", "gitrepositories", "ocirepositories"],
         "verbs": ["get", "list", "watch"]},
        # The in-process runner acts with the controller's identity: it writes the outputs Secrets, the
        # stored plans, the runner TLS Secrets, and reads varsFrom.
        {"apiGroups": [""], "resources": ["secrets", "configmaps"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["serviceaccounts", "namespaces"], "verbs": ["get", "list", "watch"]},
    ],
    # OpenTofu's kubernetes state backend as the runner pod's service account would use it: state
    # Secrets and their lock Leases in the instance's namespace.
    "tf-runner": [
        {"apiGroups": [""], "resources": ["secrets"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
    ],
    # kustomize-controller applies whatever its Kustomizations hold, so its own identity may apply
    # nothing: it reconciles Kustomizations, reads their sources, and impersonates a service account
    # for everything it applies, dry-runs, health-checks and prunes. ``--default-service-account``
    # makes that impersonation mandatory (a Kustomization without ``spec.serviceAccountName`` acts as
    # :data:`GITOPS_APPLIER` of its own namespace), as in Flux's multi-tenancy lockdown; the rights to
    # apply Applications belong to that account (:func:`gitops_applier`), granted per namespace.
    # ``get serviceaccounts`` is how it checks, before pruning on deletion, that the account exists.
    # Its watch of labelled ConfigMaps and Secrets (postBuild substitutions) is switched off
    # (``DisableConfigWatchers``): it would need to list every Secret of the cluster.
    "kustomize-controller": [
        *_EVENTS,
        {"apiGroups": [_KUSTOMIZE], "resources": ["kustomizations"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [_KUSTOMIZE], "resources": ["kustomizations/status", "kustomizations/finalizers"],
         "verbs": ["get", "update", "patch"]},
        {"apiGroups": [_FLUX_SOURCES], "resources": ["buckets", "gitrepositories", "ocirepositories"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get", "impersonate"]},
    ],
    # What a Kustomization's service account may do (bound per namespace by :func:`gitops_applier`):
    # every Application kind of both services' groups, as kustomize-controller uses them (server-side
    # apply with a dry-run first, kstatus' reads, pruning from its inventory).
    "gitops-applier": [
        {"apiGroups": list(APPLICATION_GROUPS), "resources": ["*"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
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


#: On the one object whose status nothing real writes here (cozystack's artifact publisher does not run).
STAND_IN_ANNOTATION = "localcluster.agl.local/played-by"
STAND_IN_NOTE = "localcluster: status played in place of cozystack's artifact publisher, which does not run here"
#: The service account kustomize-controller impersonates for a Kustomization that names none.
GITOPS_APPLIER = "gitops-applier"
#: Where tofu-controller's in-process runner listens; fixed by tofu-controller v0.16.5.
LOCAL_RUNNER_PORT = 30000
#: The namespace tofu-controller keeps its runner TLS Secret in (``RUNTIME_NAMESPACE``).
TOFU_RUNTIME_NAMESPACE = "flux-system"


#: Every controller :func:`start` runs, in the order :func:`stop` stops them.
CONTROLLERS = ("kustomize-controller", "tofu-controller", "helm-controller", "source-controller")


@dataclass(frozen=True)
class Controllers:
    chart_repository: str
    storage: str


def state_kubeconfig(cluster: Cluster) -> Path:
    """The kubeconfig OpenTofu's kubernetes backend uses here (``backendConfig.configPath``)."""
    return identity(cluster, "tf-runner", prefix="tofu")


def identity(cluster: Cluster, name: str, prefix: str = "flux") -> Path:
    """A kubeconfig for ``agl:<name>`` bound to its ClusterRole (created or updated here)."""
    user = f"agl:{name}"
    _apply(cluster, *_granted(name, user, {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}))
    ca = pki.ensure_ca(cluster.pki_dir, "ca", "agl-local-ca")
    pair = pki.issue(ca, cluster.pki_dir, f"{prefix}-{name}", user)
    return cluster.write_kubeconfig(cluster.dir / f"{prefix}-{name}.kubeconfig", user, pair, cluster.server)


def gitops_applier(cluster: Cluster, namespace: str) -> str:
    """The service account :data:`GITOPS_APPLIER` in ``namespace``, allowed to manage Applications in every
    namespace (ClusterRole ``agl:gitops-applier``; a Kustomization may apply into other namespaces); its name."""
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": GITOPS_APPLIER, "namespace": namespace}}
    _apply(cluster, account, *_granted(GITOPS_APPLIER, f"agl:{GITOPS_APPLIER}:{namespace}",
                                       {"kind": "ServiceAccount", "name": GITOPS_APPLIER, "namespace": namespace}))
    return GITOPS_APPLIER


def _granted(rules: str, binding: str, subject: dict[str, str]) -> list[dict[str, Any]]:
    """ClusterRole ``agl:<rules>`` (:data:`RULES`) and the ClusterRoleBinding ``binding`` of it to ``subject``."""
    role = f"agl:{rules}"
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": role}, "rules": RULES[rules]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": binding},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
             "subjects": [subject]}]


def _apply(cluster: Cluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def _start_controller(cluster: Cluster, name: str, binary: Path, extra: list[str], port: int,
                      env: dict[str, str] | None = None) -> None:
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
                  env={"KUBECONFIG": str(kubeconfig), "HOME": str(workdir), "TMPDIR": str(workdir), **(env or {})},
                  timeout=120)
    log(f"started {name} ({binary.name}), log {process.log_file}")


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_tofu_controller(cluster: Cluster, binary: Path) -> None:
    """Start tofu-controller with its runner in-process and the pinned ``tofu`` first on its PATH."""
    if Process(cluster, "tofu-controller").running() is not None:
        return
    if _port_taken(LOCAL_RUNNER_PORT):
        raise ClusterError(
            f"127.0.0.1:{LOCAL_RUNNER_PORT} is taken, most likely by the tofu-controller of another local cluster "
            "(its in-process runner always listens there, and a second one would use the first one's runner): "
            "stop that cluster first (python -m localcluster --name NAME down)")
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TOFU_RUNTIME_NAMESPACE}}))
    tofu = build.ensure_tofu()
    state_kubeconfig(cluster)
    # tofu-controller looks up ``terraform`` first, then ``tofu``: only the directory with ``tofu`` leads.
    path = os.pathsep.join([str(tofu.parent / "current"), "/usr/bin", "/bin"])
    workdir = cluster.dir / "tofu-controller"
    workdir.mkdir(exist_ok=True)
    cli_config = workdir / "tofurc"
    cli_config.write_text(_OFFLINE_PROVIDERS)
    # One reconcile at a time: the in-process runner is one runner server holding one OpenTofu session, and
    # each reconcile's NewTerraform call replaces it, so a second concurrent reconcile fails the first with
    # "terraform session mismatch" and both wait out retryInterval (in a cluster each runner is its own pod).
    _start_controller(cluster, "tofu-controller", binary, ["--allow-cross-namespace-refs", "--concurrent=1"],
                      port=LOCAL_RUNNER_PORT,
                      env={"INSECURE_LOCAL_RUNNER": "1", "RUNTIME_NAMESPACE": TOFU_RUNTIME_NAMESPACE, "PATH": path,
                           "TF_CLI_CONFIG_FILE": str(cli_config)})


#: OpenTofu CLI configuration of the local runner: no provider may be downloaded (nothing but the
#: package registries is reachable from these machines), so the sample modules use only built-ins.
_OFFLINE_PROVIDERS = 'provider_installation {\n  direct {\n    exclude = ["*/*/*"]\n  }\n}\n'


def apply_sources(cluster: Cluster, url: str) -> None:
    """Apply the sample chart sources with the repository URL of this run, then publish their ExternalArtifacts.

    The module sources (``modules.yaml`` and the other source files) belong to the servers that serve
    them (:mod:`gitserver`, ...), which apply them with their own URLs.
    """
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SOURCES_NAMESPACE}}))
    text = CHART_SOURCES.read_text().replace(chartrepo.PLACEHOLDER_URL, url)
    cluster.kubectl("apply", "-f", "-", input=text)
    for doc in yaml.safe_load_all(text):
        if doc and doc["kind"] == "ExternalArtifact":
            publish_external_artifact(cluster, doc["metadata"]["name"], doc["metadata"]["namespace"],
                                      doc["spec"]["sourceRef"])


def publish_external_artifact(cluster: Cluster, name: str, namespace: str, source: dict[str, str],
                              timeout: float = 180) -> None:
    """Stand in for cozystack's artifact publisher: copy the Ready source's artifact into the ExternalArtifact's
    status, and annotate the object with :data:`STAND_IN_ANNOTATION` so whoever reads it knows."""
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
    # The one status still played in the local stack: say so on the object itself.
    cluster.kubectl("annotate", f"externalartifacts.{_FLUX_SOURCES}", name, "-n", namespace, "--overwrite",
                    f"{STAND_IN_ANNOTATION}={STAND_IN_NOTE}")
    cluster.kubectl("patch", f"externalartifacts.{_FLUX_SOURCES}", name, "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {"artifact": artifact, "conditions": [
                        {"type": "Ready", "status": "True", "reason": "Succeeded", "lastTransitionTime": now,
                         "observedGeneration": 1,
                         "message": f"played by localcluster (stand-in for cozystack's artifact publisher): "
                                    f"published {artifact['revision']} of {source['kind']}/{source['name']}"}]}}))


def _start_source_and_helm(cluster: Cluster, source_controller: Path, helm_controller: Path) -> str:
    """Start source-controller (its artifact storage on a free 127.0.0.1 port) and helm-controller; the storage
    address."""
    running = Process(cluster, "source-controller").running()
    storage = f"127.0.0.1:{running.port if running else free_port()}"
    artifacts = cluster.dir / "source-controller" / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    _start_controller(cluster, "source-controller", source_controller, [
        f"--storage-path={artifacts}", f"--storage-addr={storage}", f"--storage-adv-addr={storage}"],
        port=int(storage.rsplit(":", 1)[1]))
    # ExternalArtifact chart sources (what cozystack's definitions use) are behind a feature gate
    # that is off by default in helm-controller v1.6.2.
    _start_controller(cluster, "helm-controller", helm_controller, ["--feature-gates=ExternalArtifact=true"], port=0)
    return storage


#: What :func:`start_helm` runs, in the order :func:`stop_helm` stops them.
HELM_CONTROLLERS = ("helm-controller", "source-controller")


def start_helm(cluster: Cluster) -> Controllers:
    """Only what the Helm kinds need: serve the charts, start source-controller and helm-controller, apply the
    chart sources. No tofu-controller, so no in-process runner on the fixed 127.0.0.1:30000 (another cluster's
    Flux may hold it); :func:`stop` or :func:`stop_helm` stops it all."""
    targets = {t.name: t for t in build.flux_targets()}
    try:
        repository = chartrepo.start(cluster)
        storage = _start_source_and_helm(cluster, build.build(targets["source-controller"]),
                                         build.build(targets["helm-controller"]))
        apply_sources(cluster, repository.url)
    except BaseException:
        stop_helm(cluster)
        raise
    return Controllers(repository.url, storage)


def stop_helm(cluster: Cluster) -> None:
    """Stop what :func:`start_helm` started."""
    for name in HELM_CONTROLLERS:
        Process(cluster, name).stop()
    chartrepo.stop(cluster)


def start(cluster: Cluster) -> Controllers:
    """Build (or reuse) the controllers; serve the charts and the module sources (git, OCI, S3); start
    source-controller, helm-controller, tofu-controller and kustomize-controller; apply the sources."""
    binaries = build.ensure_flux()
    try:
        repository = chartrepo.start(cluster)
        modules = gitserver.start(cluster)
        registry = ociregistry.start(cluster)
        bucket = bucketserver.start(cluster)
        storage = _start_source_and_helm(cluster, binaries.source_controller, binaries.helm_controller)
        start_tofu_controller(cluster, binaries.tofu_controller)
        _start_controller(cluster, "kustomize-controller", binaries.kustomize_controller,
                          [f"--default-service-account={GITOPS_APPLIER}",
                           "--feature-gates=DisableConfigWatchers=true"], port=0)
        apply_sources(cluster, repository.url)
        gitops_applier(cluster, SOURCES_NAMESPACE)
        gitserver.apply_sources(cluster, modules)
        ociregistry.apply_sources(cluster, registry)
        bucketserver.apply_sources(cluster, bucket)
    except BaseException:
        stop(cluster)
        raise
    return Controllers(repository.url, storage)


def stop(cluster: Cluster) -> None:
    for name in CONTROLLERS:
        Process(cluster, name).stop()
    chartrepo.stop(cluster)
    gitserver.stop(cluster)
    ociregistry.stop(cluster)
    bucketserver.stop(cluster)
