"""The flux tier's fixtures: the real source-controller, helm-controller and tofu-controller next to the services.

The tier runs after the integration tier in a session that shares one control plane with it: a running
controller reconciles every HelmRelease or Terraform it sees (finalizers, status), which the integration
tier's recorded HelmRelease statuses and resourceVersion checks must not meet; the controllers also only
run for the module that needs them. tofu-controller's in-process runner binds 127.0.0.1:30000, so only
one test session (or ``nox -s up`` cluster) at a time can run this tier on a machine.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from localcluster import flux
from localcluster.cluster import Cluster

from tests.kube import Api, wait_for

TERRAFORMS_GVR = ("infra.contrib.fluxcd.io", "v1alpha2", "terraforms")
HELMRELEASES_GVR = ("helm.toolkit.fluxcd.io", "v2", "helmreleases")
SUSPEND = {"spec": {"suspend": True}}
MERGE_PATCH = "application/merge-patch+json"


def suspend_earlier(cluster: Cluster) -> None:
    """Suspend the Terraforms and HelmReleases the earlier tiers (and modules) left behind.

    Hundreds of them remain from the integration and contract tiers, written by the services for kinds whose
    sources may or may not exist. A controller started now would reconcile every one (four at a time):
    tofu-controller retries the ones whose sources or state backend are missing, and helm-controller installs
    every Redis of the earlier tiers once source-controller serves its chart; either keeps this module's own
    objects waiting in its queue for minutes. Suspended, each only gets its finalizer. Patched from one client,
    several at a time (a kubectl process per object took seconds per module).
    """
    api = Api(cluster)
    paths: list[str] = []
    for group, version, plural in (TERRAFORMS_GVR, HELMRELEASES_GVR):
        # A CRD installed moments ago answers 429 while its storage initializes (a module run on a new cluster).
        listing = wait_for(lambda path=f"/apis/{group}/{version}/{plural}": (answer := api.request("GET", path))[0]
                           == 200 and answer[1], f"the list of {plural}", timeout=60)
        paths.extend(f"/apis/{group}/{version}/namespaces/{item['metadata']['namespace']}/{plural}/"
                     f"{item['metadata']['name']}" for item in listing["items"]
                     if not (item.get("spec") or {}).get("suspend"))
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda path: api.request("PATCH", path, SUSPEND, MERGE_PATCH)[0], paths))
    assert all(status in (200, 404) for status in answers), answers  # 404: deleted meanwhile


@pytest.fixture(scope="module")
def flux_controllers(control_plane: Cluster) -> Iterator[flux.Controllers]:
    """The controllers, the chart repository and the git server, running for one test module (logs kept in /tmp)."""
    suspend_earlier(control_plane)
    controllers = flux.start(control_plane)
    try:
        yield controllers
    finally:
        flux.stop(control_plane)
        for name in flux.CONTROLLERS:
            log = control_plane.logs_dir / f"{name}.log"
            if log.exists():
                kept = Path(tempfile.gettempdir()) / f"agl-{control_plane.name}-{name}.log"
                kept.write_text(log.read_text(errors="replace"))
