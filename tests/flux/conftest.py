"""The flux tier's fixtures: the real source-controller, helm-controller and tofu-controller next to the services.

The tier runs after the integration tier in a session that shares one control plane with it: a running
controller reconciles every HelmRelease or Terraform it sees (finalizers, status), which the integration
tier's recorded HelmRelease statuses and resourceVersion checks must not meet; the controllers also only
run for the module that needs them. tofu-controller's in-process runner binds 127.0.0.1:30000, so only
one test session (or ``nox -s up`` cluster) at a time can run this tier on a machine.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from localcluster import flux
from localcluster.cluster import Cluster

from tests.kube import kubectl

TERRAFORMS = "terraforms.infra.contrib.fluxcd.io"


def suspend_earlier_terraforms(cluster: Cluster) -> None:
    """Suspend the Terraforms the earlier tiers (and modules) left behind.

    A hundred of them remain from the integration and contract tiers, written by tofu_agl for kinds whose
    sources do not exist or whose state backend needs a pod; tofu-controller would reconcile and retry every one
    (four at a time) and keep this module's own instances waiting in its queue for minutes. Suspended, it only
    adds its finalizer.
    """
    items = json.loads(kubectl(cluster, "get", TERRAFORMS, "-A", "-o", "json").stdout)["items"]
    for item in items:
        if not (item.get("spec") or {}).get("suspend"):
            kubectl(cluster, "patch", TERRAFORMS, item["metadata"]["name"], "-n", item["metadata"]["namespace"],
                    "--type=merge", "-p", '{"spec":{"suspend":true}}', check=False)


@pytest.fixture(scope="module")
def flux_controllers(control_plane: Cluster) -> Iterator[flux.Controllers]:
    """The controllers, the chart repository and the git server, running for one test module (logs kept in /tmp)."""
    suspend_earlier_terraforms(control_plane)
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
