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
