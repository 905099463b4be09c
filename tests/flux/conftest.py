"""The flux tier's fixtures: the real source-controller and helm-controller next to helm_agl.

The tier runs last in a session that shares one control plane with the integration tier: a running
helm-controller reconciles every HelmRelease it sees (finalizers, status), which the integration
tier's played statuses and resourceVersion checks must not meet; the controllers also only run for
the module that needs them.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from localcluster import flux
from localcluster.cluster import Cluster


@pytest.fixture(scope="module")
def flux_controllers(control_plane: Cluster) -> Iterator[flux.Controllers]:
    """Both controllers and the chart repository, running for one test module (logs kept in /tmp)."""
    controllers = flux.start(control_plane)
    try:
        yield controllers
    finally:
        flux.stop(control_plane)
        for name in ("helm-controller", "source-controller"):
            log = control_plane.logs_dir / f"{name}.log"
            if log.exists():
                kept = Path(tempfile.gettempdir()) / f"agl-{control_plane.name}-{name}.log"
                kept.write_text(log.read_text(errors="replace"))
