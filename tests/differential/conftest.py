"""Fixtures of the differential tier: every sample kind served by its service and mirrored by an oracle CRD,
both reached through the official ``kubernetes`` client's ``DynamicClient`` as the cluster admin.

Everything here is session-scoped: hypothesis runs many examples per test, and each example only
costs a namespace of its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from kubernetes import config
from kubernetes.dynamic import DynamicClient
from localcluster.cluster import Cluster

from tests.contract.stack import served
from tests.differential.kinds import KINDS, ORACLE_GROUP, VERSION, Kind
from tests.differential.runner import STATS, Served, World
from tests.kube import Api, kubectl, wait_for

#: The profile the differential tests run with: ``short`` in ``nox -s tests``, ``long`` in ``nox -s fuzz``.
PROFILE_ENV = "AGL_DIFFERENTIAL_PROFILE"
#: Sequences per kind in the long profile (``nox -s fuzz`` sets it from its arguments).
LONG_EXAMPLES_ENV = "AGL_DIFFERENTIAL_EXAMPLES"

_COMMON: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
}
# Short: the same sequences on every run (derandomized), a few minutes for all kinds.
settings.register_profile("differential-short", max_examples=40, derandomize=True, **_COMMON)
# Long: new sequences each run; hypothesis prints the seed of a failure (``--hypothesis-seed`` replays it).
settings.register_profile("differential-long", max_examples=int(os.environ.get(LONG_EXAMPLES_ENV, "750")),
                          derandomize=False, **_COMMON)


def profile() -> settings:
    return settings.get_profile(f"differential-{os.environ.get(PROFILE_ENV, 'short')}")


def _serve(cluster: Cluster, kind: Kind) -> None:
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(kind.definition))
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(kind.oracle_crd()))
    kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s",
            f"crd/{kind.plural}.{ORACLE_GROUP}")
    wait_for(lambda: f"{kind.plural}.{kind.group}" in served(cluster, kind.group), f"{kind.name} served",
             timeout=60)
    # Served in discovery is not yet serving: wait until the kind lists and watches (see the contract tier).
    admin = Api(cluster)
    # A namespace nothing lives in: other tiers' objects of the kind would make the watch a stream of events.
    collection = f"/apis/{kind.group}/{VERSION}/namespaces/differential-probe/{kind.plural}"
    wait_for(lambda: admin.request("GET", collection)[0] == 200, f"{kind.name} listable", timeout=60)
    wait_for(lambda: admin.request("GET", f"{collection}?watch=1&timeoutSeconds=1")[0] == 200,
             f"{kind.name} watchable", timeout=60)


@pytest.fixture(scope="session")
def world(request: pytest.FixtureRequest, control_plane: Cluster,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """Both services running, every sample kind served and mirrored, and one DynamicClient for all."""
    for kind in KINDS.values():
        request.getfixturevalue(kind.service_fixture)
        _serve(control_plane, kind)
    api_client = config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    cache: Path = tmp_path_factory.mktemp("discovery") / "cache.json"
    client = DynamicClient(api_client, cache_file=str(cache))
    kinds = {
        key: Served(kind,
                    client.resources.get(api_version=f"{kind.group}/{VERSION}", kind=kind.name),
                    client.resources.get(api_version=f"{ORACLE_GROUP}/{VERSION}", kind=kind.name))
        for key, kind in KINDS.items()
    }
    yield World(control_plane, client, kinds, client.resources.get(api_version="v1", kind="Namespace"))
    # Leave the cluster as the other tiers expect it: the oracle CRDs share the sample kinds' names, and the
    # sample definitions are the other tiers' to create.
    for kind in KINDS.values():
        kubectl(control_plane, "delete", "--ignore-not-found", f"crd/{kind.plural}.{ORACLE_GROUP}")
        kubectl(control_plane, "delete", "--ignore-not-found", kind.definition_resource,
                kind.definition["metadata"]["name"])


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if STATS["sequences"]:
        terminalreporter.write_line(f"differential ({os.environ.get(PROFILE_ENV, 'short')} profile): "
                                    f"{STATS['sequences']} sequences compared, {STATS['requests']} requests on "
                                    "each side")
