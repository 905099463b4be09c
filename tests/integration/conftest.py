"""One real control plane (etcd + kube-apiserver, aggregation enabled) per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from localcluster import crds
from localcluster.cluster import Cluster

REFERENCE = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "status"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Cluster]:
    """A fresh cluster named ``pytest`` with our CRDs and the real Flux/tofu CRDs installed."""
    cluster = Cluster(os.environ.get("AGL_TEST_CLUSTER", "pytest"))
    cluster.destroy()
    cluster = Cluster(cluster.name)
    cluster.up(fresh=True)
    crds.install(cluster)
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="session")
def kubeconfig(control_plane: Cluster) -> str:
    return str(control_plane.kubeconfig)


# ------------------------------------------------------------------------------------ services
import json  # noqa: E402
import ssl  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from typing import Any  # noqa: E402

import yaml  # noqa: E402
from localcluster import services  # noqa: E402

from tests.conftest import FIXTURES  # noqa: E402


class Api:
    """Raw HTTP to kube-apiserver as a given kubeconfig user: for requests kubectl cannot send
    (malformed bodies, exotic content types) and to read Status objects exactly."""

    def __init__(self, cluster: Cluster, user: str = "admin") -> None:
        self.cluster = cluster
        ctx = ssl.create_default_context(cafile=str(cluster.pki_dir / "ca.crt"))
        if user == "admin":
            ctx.load_cert_chain(str(cluster.pki_dir / "admin.crt"), str(cluster.pki_dir / "admin.key"))
        self.ctx = ctx

    def request(self, method: str, path: str, body: bytes | str | dict[str, Any] | None = None,
                content_type: str = "application/json", accept: str = "application/json",
                timeout: float = 30) -> tuple[int, Any]:
        data = json.dumps(body).encode() if isinstance(body, dict) else (
            body.encode() if isinstance(body, str) else body)
        req = urllib.request.Request(self.cluster.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": accept})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")


@pytest.fixture(scope="session")
def api(control_plane: Cluster) -> Api:
    return Api(control_plane)


def load_fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((FIXTURES / "definitions" / name).read_text())
    return loaded


def kubectl(cluster: Cluster, *args: str, input: str | None = None, check: bool = True,
            kubeconfig: Any = None) -> subprocess.CompletedProcess[str]:
    """The built kubectl against ``cluster`` (admin unless another kubeconfig is given)."""
    return cluster.kubectl(*args, input=input, check=check, kubeconfig=kubeconfig)


def get_json(cluster: Cluster, *args: str) -> Any:
    """``kubectl get ARGS -o json``, parsed."""
    return json.loads(kubectl(cluster, "get", *args, "-o", "json").stdout)


def wait_for(check: Any, what: str, timeout: float = 30, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@pytest.fixture(scope="session")
def helm_service(control_plane: Cluster) -> Iterator[services.Running]:
    running = services.start(control_plane, services.HELM_AGL)
    yield running
    services.stop(control_plane, services.HELM_AGL)


@pytest.fixture(scope="session")
def tofu_service(control_plane: Cluster) -> Iterator[services.Running]:
    running = services.start(control_plane, services.TOFU_AGL)
    yield running
    services.stop(control_plane, services.TOFU_AGL)
