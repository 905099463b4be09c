"""How each service process sets itself up at start, read from the running services' own logs.

The mmap threshold the process pins (``shared.service.memory``) has no getter in glibc, so what the
service reports at start is the evidence that the running process, not only the function, pins it; the
objects it freezes are also on its ``/metrics``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from localcluster import services
from localcluster.cluster import Cluster

from tests.kube import service_metrics, wait_for

pytestmark = pytest.mark.integration


def _records(running: services.Running) -> list[dict[str, Any]]:
    records = []
    for line in running.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def test_both_services_pin_the_mmap_threshold(helm_service: services.Running,
                                              tofu_service: services.Running) -> None:
    for running in (helm_service, tofu_service):
        pinned = [r for r in _records(running) if "mmap_threshold_bytes" in r]
        assert pinned and pinned[-1]["mmap_threshold_bytes"] == 128 * 1024, running.log


def _frozen_on_metrics(cluster: Cluster, running: services.Running) -> float:
    text = service_metrics(cluster, running.port)
    found = re.search(r"^python_gc_frozen_objects (\S+)$", text, re.M)
    assert found, text[:500]
    return float(found[1])


def test_both_services_freeze_their_startup_objects(control_plane: Cluster, helm_service: services.Running,
                                                    tofu_service: services.Running) -> None:
    """Once up, each service moves what its start built out of the collector's traversals: it says so, and its
    ``/metrics`` still counts them frozen while it serves."""
    for session_service in (helm_service, tofu_service):
        # The one serving now: an earlier module may have replaced the session's with a process on another port.
        running = services.start(control_plane, session_service.service)
        frozen = wait_for(lambda running=running: [r["frozen_objects"] for r in _records(running)
                                                   if "frozen_objects" in r],
                          f"{running.service.name} to report its frozen objects")
        assert frozen[-1] > 10_000, running.log
        assert _frozen_on_metrics(control_plane, running) > 10_000
