"""Shared test fixtures: the statuses recorded from the real controllers (tests/data/status), and the control
plane for the cluster-backed tiers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from localcluster import services
from localcluster.cluster import Cluster

from tests.kube import Api
from tests.recorded import load_recorded


@pytest.fixture(scope="session")
def reference() -> Any:
    """A recorded object by file stem (:func:`tests.recorded.load_recorded`): ``reference("terraform-pending")``."""
    return load_recorded


# ------------------------------------------------------------------ tiers that need the control plane

#: Test directories whose tests need the local control plane, and the marker each gets.
CLUSTER_TIERS = ("integration", "contract", "differential", "flux", "node")


#: Tiers that run after all others, in this order: the flux tier's helm-controller would reconcile the other
#: tiers' HelmReleases; the differential tier's oracle CRDs carry the sample kinds' names (VPC, Redis, ...),
#: which kubectl would resolve to instead of the served kinds while they exist.
LAST_TIERS = ("flux", "differential")
#: Modules that run before all others: they run services of their own (the chart's identity, its lease) against
#: the cluster's definitions, and the session's services, once a test has started them, would act on the same
#: definitions (write their status, their rollouts, the kind roles of the same group) in the same moments.
FIRST_MODULES = ("tests/integration/test_chart.py",)


def _run_rank(item: pytest.Item) -> int:
    path = str(item.fspath)
    # The node tier first: its cluster is its own and is stopped when the tier ends, before the others start theirs.
    if "tests/node/" in path:
        return -2
    if any(path.endswith(module) for module in FIRST_MODULES):
        return -1
    return next((rank for rank, tier in enumerate(LAST_TIERS, 1) if f"tests/{tier}/" in path), 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for tier in CLUSTER_TIERS:
            if f"tests/{tier}/" in str(item.fspath):
                item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=_run_rank)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Cluster]:
    """A fresh cluster (named ``pytest`` unless ``AGL_TEST_CLUSTER`` says otherwise) with our CRDs and the
    real Flux/tofu CRDs installed."""
    from localcluster import crds

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


@pytest.fixture(scope="session")
def api(control_plane: Cluster) -> Api:
    return Api(control_plane)


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
