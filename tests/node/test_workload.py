"""A Helm kind whose chart runs a real pod on the node, reconciled by the real source-controller and helm-controller.

The WebApp kind (``deploy/samples/node/webapp.yaml``, chart ``deploy/samples/charts/webapp``) renders one Deployment
with a readinessProbe. helm_agl (in its pods) writes the HelmRelease; source-controller (a local process) fetches the
chart from the sample chart repository on 127.0.0.1; helm-controller (a local process) installs it with Helm's wait
on, so its Ready, which helm_agl projects onto the Application, follows what kubelet reports about the pod. What
each test reads comes from those programs: the pod's conditions from kubelet, the release's conditions from
helm-controller, the Application's status and ``kubectl get`` row from helm_agl.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import chartinstall, flux
from localcluster.chartinstall import BOTH

from tests.kube import FIXTURES, get_json, kubectl, wait_for
from tests.node.conftest import Node

NS = "tenant-web"
HR = "helmreleases.helm.toolkit.fluxcd.io"
HELM_CHART = "helmcharts.source.toolkit.fluxcd.io"
DEFINITION = FIXTURES / "node" / "webapp.yaml"
CHART_SOURCE = FIXTURES / "node" / "webapp-source.yaml"
#: The definition's install timeout (its annotation), what a failed install waits out.
INSTALL_TIMEOUT = 40
#: The image nothing provides; with pull policy Never kubelet never starts it.
MISSING_IMAGE = "localhost/nope:1"


@pytest.fixture(scope="module")
def webapps(node_cluster: Node) -> Iterator[Node]:
    """Both services installed; chart repository, source-controller and helm-controller running (not tofu-controller:
    its runner's fixed port belongs to whichever cluster's Flux tier takes it first); the WebApp kind served in
    ``tenant-web`` with its cozystack-values Secret; the chart's HelmChart Ready."""
    cluster = node_cluster.cluster
    chartinstall.install(cluster, node_cluster.image, BOTH, wait="120s")
    try:
        flux.start_helm(cluster)
        for doc in yaml.safe_load_all((FIXTURES / "tenants" / "tenant-demo.yaml").read_text()):
            doc["metadata"]["name" if doc["kind"] == "Namespace" else "namespace"] = NS
            kubectl(cluster, "apply", "-f", "-", input=json.dumps(doc))
        kubectl(cluster, "apply", "-f", str(CHART_SOURCE), "-f", str(DEFINITION))
        kubectl(cluster, "wait", "applicationdefinitions/webapp", "--for=condition=Accepted", "--timeout=60s")
        kubectl(cluster, "wait", f"{HELM_CHART}/cozystack-webapp", "-n", flux.SOURCES_NAMESPACE,
                "--for=condition=Ready", "--timeout=120s")
        wait_for(lambda: "webapps" in kubectl(cluster, "api-resources", "--api-group=apps.cozystack.io",
                                               "--cached=false", check=False).stdout, "the webapps kind", timeout=60)
        yield node_cluster
        kubectl(cluster, "delete", "webapps", "--all", "-n", NS, "--wait=false")
        # helm-controller uninstalls before it lets the HelmReleases go: wait for that while it still runs.
        wait_for(lambda: not get_json(cluster, HR, "-n", NS)["items"], "the WebApps' releases uninstalled",
                 timeout=120, interval=1)
    finally:
        flux.stop(cluster)
        for name in (*flux.HELM_CONTROLLERS, "chart-repository"):
            log = cluster.logs_dir / f"{name}.log"
            if log.exists():
                shutil.copy(log, Path(tempfile.gettempdir()) / f"agl-{cluster.name}-{name}.log")


def apply_webapp(node: Node, name: str, image: str) -> None:
    manifest = {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "WebApp",
                "metadata": {"name": name, "namespace": NS}, "spec": {"image": image}}
    kubectl(node.cluster, "apply", "-f", "-", input=json.dumps(manifest))


def condition(obj: dict[str, Any] | None, kind: str = "Ready") -> dict[str, Any]:
    """The object's condition ``kind`` (an empty dict when it has none)."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}


def the_pod(node: Node, release: str) -> dict[str, Any] | None:
    pods: list[dict[str, Any]] = get_json(node.cluster, "pods", "-n", NS, "-l",
                                          f"app.kubernetes.io/instance={release}")["items"]
    assert len(pods) <= 1, [p["metadata"]["name"] for p in pods]
    return pods[0] if pods else None


def ready_column(node: Node, name: str) -> str:
    """The READY cell of ``kubectl get webapps NAME`` (helm_agl's Table)."""
    header, row = kubectl(node.cluster, "get", "webapps", name, "-n", NS).stdout.splitlines()
    return row.split()[header.split().index("READY")]


@dataclass(frozen=True)
class Sample:
    """One look, the Application first and then its pod, so a Ready Application seen before a Ready pod is proof
    the Application was Ready first."""

    at: float
    app_ready: str
    pod_running: bool
    pod_ready: bool


def watch_until_ready(node: Node, name: str, release: str, timeout: float = 120) -> list[Sample]:
    samples: list[Sample] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app = get_json(node.cluster, "webapps", name, "-n", NS)
        pod = the_pod(node, release)
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
        samples.append(Sample(time.monotonic(), condition(app).get("status", "None"),
                              "running" in statuses[0].get("state", {}), condition(pod).get("status") == "True"))
        if samples[-1].app_ready == "True":
            return samples
        time.sleep(0.25)
    raise AssertionError(f"WebApp {name} not Ready after {timeout:.0f}s; last looks: {samples[-5:]}")


def test_webapp_is_ready_only_after_its_pod_is(webapps: Node) -> None:
    """kubelet decides the pod's Ready (its readinessProbe answers 5 s after the container starts); helm-controller's
    wait decides the release's Ready from it; helm_agl projects that onto the Application. The Application is never
    seen Ready while the pod is not, was seen not Ready while the pod already ran unready, and its Ready changed
    after the pod's (the two lastTransitionTimes, written by helm-controller and kubelet on one clock)."""
    cluster = webapps.cluster
    apply_webapp(webapps, "hello", webapps.image)
    samples = watch_until_ready(webapps, "hello", "webapp-hello")
    early = [s for s in samples if s.app_ready == "True" and not s.pod_ready]
    assert not early, f"the Application was Ready before its pod: {early}"
    assert any(s.pod_running and not s.pod_ready and s.app_ready != "True" for s in samples), \
        f"never saw the pod running unready (the window the order is checked in): {samples}"
    app = get_json(cluster, "webapps", "hello", "-n", NS)
    pod = the_pod(webapps, "webapp-hello")
    assert pod is not None
    pod_ready_at, app_ready_at = condition(pod)["lastTransitionTime"], condition(app)["lastTransitionTime"]
    assert pod_ready_at <= app_ready_at, (pod_ready_at, app_ready_at)
    release = get_json(cluster, HR, "webapp-hello", "-n", NS)
    assert release["spec"]["install"] == {"timeout": f"{INSTALL_TIMEOUT}s", "strategy": {
        "name": "RetryOnFailure", "retryInterval": "30s"}}, "Helm's wait must be on (no disableWait)"
    assert condition(release)["reason"] == "InstallSucceeded", condition(release)
    assert condition(app)["message"] == condition(release)["message"]
    assert "Helm install succeeded for release tenant-web/webapp-hello" in condition(app)["message"]
    assert ready_column(webapps, "hello") == "True"
    spec, status = pod["spec"], pod["status"]
    assert spec["nodeName"] == "agl-node"
    assert spec["containers"][0]["image"] == webapps.image
    assert spec["securityContext"]["runAsUser"] == 65532
    assert status["containerStatuses"][0]["restartCount"] == 0


def test_missing_image_says_why_it_is_not_ready(webapps: Node) -> None:
    """kubelet refuses to pull ``localhost/nope:1`` (ErrImageNeverPull, shown by ``kubectl describe pod``);
    helm-controller's wait runs out after the definition's 40 s and fails the install; helm_agl shows that failure as
    the Application's Ready False, with helm-controller's words, in its conditions and in the READY column."""
    cluster = webapps.cluster
    apply_webapp(webapps, "broken", MISSING_IMAGE)
    started = time.monotonic()

    def failed() -> dict[str, Any] | None:
        app = get_json(cluster, "webapps", "broken", "-n", NS)
        assert condition(app).get("status") != "True", f"a WebApp whose image is missing turned Ready: {app}"
        return app if condition(app).get("status") == "False" else None

    app = wait_for(failed, "the WebApp's install to fail", timeout=INSTALL_TIMEOUT + 80, interval=1)
    assert time.monotonic() - started >= INSTALL_TIMEOUT - 5, "failed before Helm's wait could have run out"
    ready = condition(app)
    assert ready["reason"] == "InstallFailed", ready
    assert "Helm install failed for release tenant-web/webapp-broken with chart webapp@0.1.0" in ready["message"], ready
    # Helm's kstatus wait names what it waited for: the Deployment that never became Current (not the pod's reason).
    assert ready["message"].endswith(
        "timeout waiting for: [Deployment/tenant-web/webapp-broken status: 'InProgress']"), ready
    # helm-controller retries (RetryOnFailure): the Application says it is still being worked on, and on what failure.
    reconciling = condition(app, "Reconciling")
    assert reconciling["status"] == "True" and ready["message"] in reconciling["message"], reconciling
    assert ready_column(webapps, "broken") == "False"
    pod = the_pod(webapps, "webapp-broken")
    assert pod is not None
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ErrImageNeverPull", waiting
    described = kubectl(cluster, "describe", "pod", pod["metadata"]["name"], "-n", NS).stdout
    assert "ErrImageNeverPull" in described, described
    assert MISSING_IMAGE in described, described
