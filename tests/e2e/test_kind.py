"""End to end in kind: the chart installed next to the real Flux and tofu-controller.

The integration tier plays the controllers' part; here they run for real.  A kind cluster gets
Flux (source-controller, helm-controller and the rest of its install manifest), tofu-controller
(its chart at the version whose CRD the integration tier pins), our image and our chart.  Then a
small definition of each backend is applied (the repository's samples point at cozystack's
chart artifacts and at AWS, which a bare kind cluster lacks) and a user object of each kind created: the
HelmRelease helm-agl writes must become Ready (helm-controller installs podinfo from its OCI
chart), and the Terraform tofu-agl writes must reach a plan (tofu-controller runs the helloworld
module and waits for approval).

Needs Docker (a reachable engine), kind, kubectl and helm, plus network access to pull images,
charts and the Git module; the whole module is skipped with one reason when a tool is missing.
Environment: ``AGL_E2E_IMAGE`` uses a prebuilt image instead of ``docker build``;
``AGL_E2E_KEEP=1`` keeps the cluster afterwards; ``AGL_E2E_KIND_IMAGE`` picks the node image.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from localcluster import build, versions

from shared.bodies import JSON
from tests.kube import ROOT

pytestmark = pytest.mark.e2e

#: Flux release whose install manifest bundles helm-controller v1.6 (the HelmRelease CRD we validate against).
FLUX_VERSION = "v2.9.5"
FLUX_INSTALL = f"https://github.com/fluxcd/flux2/releases/download/{FLUX_VERSION}/install.yaml"
#: tofu-controller's chart ships inside its Go module, at the version of the Terraform CRD we pin.
TOFU_CONTROLLER = versions.TERRAFORM_CRD
CLUSTER_NAME = "agl-e2e"
CHART = ROOT / "deploy" / "chart"
AGL_NS = "agl-system"
TENANT = "e2e-tenant"
TOFU_GROUP = "tofu.apps.cozystack.io"
READY_TIMEOUT = 600.0



# ------------------------------------------------------------------------------- environment


def _missing_engine() -> str | None:
    """Why this tier cannot run here (docker, kind or a reachable Docker engine missing), or None."""
    docker, kind = shutil.which("docker"), shutil.which("kind")
    if docker is None or kind is None:
        missing = " and ".join(name for name, path in (("docker", docker), ("kind", kind)) if path is None)
        return f"e2e-kind tier skipped: {missing} not found on PATH (it needs Docker and kind)"
    try:
        reachable = subprocess.run([docker, "info"], capture_output=True, timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        reachable = False
    if not reachable:
        return "e2e-kind tier skipped: the Docker engine is not reachable (`docker info` failed)"
    return None


# One line for the whole module when Docker or kind is missing (checked on import: two quick probes).
_REASON = _missing_engine()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)


def _helm() -> str | None:
    """helm on PATH, else the pinned one the integration tier builds (built now if Go is there)."""
    found = shutil.which("helm")
    if found:
        return found
    try:
        return str(build.ensure_helm())
    except build.BuildError:
        return None


def _kubectl() -> str | None:
    built = build.kubectl_dir() / "kubectl"
    return str(built) if built.exists() else shutil.which("kubectl")


@dataclass(frozen=True)
class Tools:
    docker: str
    kind: str
    kubectl: str
    helm: str


@pytest.fixture(scope="module")
def tools() -> Tools:
    """docker and kind (present, see above), plus Go, kubectl and helm."""
    docker, kind = shutil.which("docker"), shutil.which("kind")
    assert docker is not None and kind is not None
    if shutil.which("go") is None:
        pytest.skip("e2e-kind tier needs Go: tofu-controller's chart comes from its Go module")
    kubectl, helm = _kubectl(), _helm()
    if kubectl is None or helm is None:
        pytest.skip("e2e-kind tier needs kubectl and helm (on PATH, or built by `python -m localcluster build`)")
    return Tools(docker, kind, kubectl, helm)


# ---------------------------------------------------------------------------------- cluster


class Kind:
    """A kind cluster through pytest-kind, driven with our kubectl and helm."""

    def __init__(self, tools: Tools, workdir: Path) -> None:
        from pytest_kind import KindCluster

        self.tools = tools
        self.kubeconfig = workdir / "kubeconfig"
        # KindCluster keeps a scratch directory relative to the working directory: keep it out of the repo.
        with contextlib.chdir(workdir):
            self.cluster = KindCluster(CLUSTER_NAME, kubeconfig=self.kubeconfig,
                                       image=os.environ.get("AGL_E2E_KIND_IMAGE") or None,
                                       kind_path=Path(tools.kind), kubectl_path=Path(tools.kubectl))

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig))

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.tools.kubectl, *args], input=input, capture_output=True, text=True,
                                env=self.env, timeout=900)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    def apply(self, *docs: JSON) -> None:
        self.kubectl("apply", "--server-side", "--field-manager=agl-e2e", "-f", "-",
                     input="\n---\n".join(json.dumps(d) for d in docs))

    def get(self, resource: str, name: str, namespace: str | None = None) -> JSON | None:
        args = ["get", resource, name, "-o", "json", *(["-n", namespace] if namespace else [])]
        result = self.kubectl(*args, check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def helm(self, *args: str) -> None:
        result = subprocess.run([self.tools.helm, *args], capture_output=True, text=True, env=self.env, timeout=900)
        if result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed: {result.stderr}")


def condition(obj: JSON | None, kind: str) -> JSON | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def wait_until(check: Callable[[], Any], what: str, timeout: float = READY_TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _image(tools: Tools) -> str:
    prebuilt = os.environ.get("AGL_E2E_IMAGE")
    if prebuilt:
        return prebuilt
    tag = "agl-parallel:e2e"
    subprocess.run([tools.docker, "build", "-t", tag, str(ROOT)], check=True, timeout=1800)
    return tag


def _module_dir(module: str, version: str) -> Path:
    """Download a Go module through the proxy (cached by Go) and return its directory."""
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / "agl-e2e-modules"
    workdir.mkdir(exist_ok=True)
    (workdir / "go.mod").write_text("module agl.local/e2e\n\ngo 1.24\n")
    out = subprocess.run([build.go_binary(), "mod", "download", "-json", f"{module}@{version}"], cwd=workdir,
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return Path(json.loads(out)["Dir"])


@pytest.fixture(scope="module")
def kind(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kind]:
    """kind + Flux + tofu-controller + our image and chart, both services Available."""
    image = _image(tools)
    k = Kind(tools, tmp_path_factory.mktemp("kind"))
    try:
        k.cluster.create()
        k.cluster.load_docker_image(image)
        k.kubectl("apply", "-f", FLUX_INSTALL)
        k.kubectl("-n", "flux-system", "wait", "--for=condition=Available", "--timeout=300s",
                  "deployment/source-controller", "deployment/helm-controller")
        chart = _module_dir(TOFU_CONTROLLER.module, TOFU_CONTROLLER.version) / "charts" / "tofu-controller"
        k.helm("upgrade", "--install", "tofu-controller", str(chart), "-n", "flux-system", "--wait",
               "--timeout", "5m", "--set", "runner.serviceAccount.allowedNamespaces={flux-system," + TENANT + "}")
        repository, _, tag = image.rpartition(":")
        k.helm("upgrade", "--install", "agl", str(CHART), "-n", AGL_NS, "--create-namespace", "--wait",
               "--timeout", "5m", "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
               "--set", "image.pullPolicy=Never",
               # A bare kind cluster has no cert-manager (the chart's default certificate mode needs it).
               "--set", "tls.mode=generate")
        for group in ("apps.cozystack.io", TOFU_GROUP):
            k.kubectl("wait", "--for=condition=Available", "--timeout=180s", f"apiservice/v1alpha1.{group}")
        k.kubectl("create", "namespace", TENANT, check=False)
        yield k
    finally:
        if os.environ.get("AGL_E2E_KEEP") != "1":
            k.cluster.delete()


# ----------------------------------------------------------------------------------- tests


def _accepted(k: Kind, resource: str, name: str) -> bool:
    cond = condition(k.get(resource, name), "Accepted")
    return bool(cond and cond.get("status") == "True")


def test_helm_test_reaches_each_service_through_the_aggregation_layer(kind: Kind) -> None:
    """The chart's helm test Pods (one per service) get their group's discovery from kube-apiserver."""
    kind.helm("test", "agl", "-n", AGL_NS, "--timeout", "3m")


def test_helmrelease_becomes_ready(kind: Kind) -> None:
    kind.apply(
        # cozystack gives every tenant namespace this Secret; the HelmReleases read their base values from it.
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cozystack-values", "namespace": TENANT},
         "stringData": {"values.yaml": "{}\n"}},
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
         "metadata": {"name": "podinfo", "namespace": TENANT},
         "spec": {"interval": "10m", "url": "oci://ghcr.io/stefanprodan/charts/podinfo",
                  "ref": {"semver": ">=6.0.0 <7.0.0"},
                  "layerSelector": {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                                    "operation": "copy"}}},
        {"apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition", "metadata": {"name": "podinfo"},
         "spec": {"application": {"kind": "Podinfo", "singular": "podinfo", "plural": "podinfos",
                                  "openAPISchema": json.dumps({"type": "object", "properties": {
                                      "replicaCount": {"type": "integer", "default": 1, "minimum": 1}}})},
                  "release": {"prefix": "podinfo-", "chartRef": {"kind": "OCIRepository", "name": "podinfo"}}}},
    )
    wait_until(lambda: _accepted(kind, "applicationdefinitions", "podinfo"), "the podinfo definition Accepted", 120)
    wait_until(lambda: kind.kubectl("apply", "-f", "-", check=False, input=json.dumps(
        {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Podinfo",
         "metadata": {"name": "demo", "namespace": TENANT}, "spec": {"replicaCount": 1}})).returncode == 0,
        "the Podinfo kind to be served", 120)
    release = wait_until(
        lambda: (lambda hr: hr if (condition(hr, "Ready") or {}).get("status") == "True" else None)(
            kind.get("helmreleases.helm.toolkit.fluxcd.io", "podinfo-demo", TENANT)),
        "HelmRelease podinfo-demo Ready")
    assert release["spec"]["values"]["replicaCount"] == 1
    app = kind.get("podinfos.apps.cozystack.io", "demo", TENANT)
    assert app is not None and app["kind"] == "Podinfo"


def test_terraform_reaches_a_plan(kind: Kind) -> None:
    kind.apply(
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
         "metadata": {"name": "helloworld", "namespace": TENANT},
         "spec": {"interval": "10m", "url": "https://github.com/flux-iac/helloworld", "ref": {"branch": "main"}}},
        {"apiVersion": "cozystack.io/v1alpha1", "kind": "TofuApplicationDefinition", "metadata": {"name": "hello"},
         "spec": {"application": {"kind": "Hello", "singular": "hello", "plural": "hellos",
                                  "openAPISchema": json.dumps({"type": "object", "properties": {}})},
                  "release": {"prefix": "hello-"},
                  # Same-namespace source: tofu-controller refuses cross-namespace references by default.
                  # manual: tofu-controller stops at the plan and changes nothing.
                  "terraform": {"sourceRef": {"kind": "GitRepository", "name": "helloworld"}, "path": "./",
                                "interval": "10m", "approvePlan": "manual"}}},
    )
    wait_until(lambda: _accepted(kind, "tofuapplicationdefinitions", "hello"), "the hello definition Accepted", 120)
    wait_until(lambda: kind.kubectl("apply", "-f", "-", check=False, input=json.dumps(
        {"apiVersion": f"{TOFU_GROUP}/v1alpha1", "kind": "Hello",
         "metadata": {"name": "demo", "namespace": TENANT}, "spec": {}})).returncode == 0,
        "the Hello kind to be served", 120)
    terraform = wait_until(
        lambda: (lambda tf: tf if (condition(tf, "Plan") or {}).get("status") == "True" else None)(
            kind.get("terraforms.infra.contrib.fluxcd.io", "hello-demo", TENANT)),
        "Terraform hello-demo to reach a plan")
    assert (condition(terraform, "Plan") or {}).get("reason") in {"TerraformPlannedWithChanges",
                                                                  "TerraformPlannedNoChanges"}
