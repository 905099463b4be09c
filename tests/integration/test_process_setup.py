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

from tests.kube import call_service

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


def test_both_services_freeze_their_startup_objects(control_plane: Cluster, helm_service: services.Running,
                                                    tofu_service: services.Running) -> None:
    """Once up, each service moves what its start built out of the collector's traversals: it says so, and its
    ``/metrics`` still counts them frozen while it serves."""
    front_proxy = (control_plane.pki_dir / "front-proxy-client.crt", control_plane.pki_dir / "front-proxy-client.key")
    for running in (helm_service, tofu_service):
        frozen = [r["frozen_objects"] for r in _records(running) if "frozen_objects" in r]
        assert frozen and frozen[-1] > 10_000, running.log
        code, text = call_service(running.port, "/metrics", cert=front_proxy,
                                  headers={"X-Remote-User": "root", "X-Remote-Group": "system:masters"})
        assert code == 200, text
        gauge = re.search(r"^python_gc_frozen_objects (\S+)$", text, re.M)
        # Fewer than at the freeze once some of those objects have died (their reference count still frees them).
        assert gauge and 10_000 < float(gauge[1]) <= frozen[-1], text[:500]
