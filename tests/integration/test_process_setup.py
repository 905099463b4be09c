"""How each service process sets itself up at start, read from the running services' own logs.

The mmap threshold the process pins (``shared.service.memory``) has no getter in glibc, so what the
service reports at start is the evidence that the running process, not only the function, pins it; the
objects it freezes are also on its ``/metrics``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from localcluster import processes, services
from localcluster.cluster import Cluster, free_port

from tests.kube import call_service, service_metrics, wait_for

pytestmark = pytest.mark.integration


def _records(log: Path) -> list[dict[str, Any]]:
    """The JSON log records a service process wrote to ``log``."""
    records = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def test_both_services_pin_the_mmap_threshold(helm_service: services.Running,
                                              tofu_service: services.Running) -> None:
    for running in (helm_service, tofu_service):
        pinned = [r for r in _records(running.log) if "mmap_threshold_bytes" in r]
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
        frozen = wait_for(lambda running=running: [r["frozen_objects"] for r in _records(running.log)
                                                   if "frozen_objects" in r],
                          f"{running.service.name} to report its frozen objects")
        assert frozen[-1] > 10_000, running.log
        assert _frozen_on_metrics(control_plane, running) > 10_000


def _request_lines(log: Path, marker: str) -> list[dict[str, Any]]:
    return [r for r in _records(log) if r.get("logger") == "shared.server.requests" and marker in r.get("path", "")]


def test_ordinary_requests_are_logged_only_with_log_requests(control_plane: Cluster, helm_service: services.Running,
                                                            tmp_path: Path) -> None:
    """The running service logs no line for a request that neither failed with a 5xx nor was slow; a second
    one started with ``--log-requests`` logs the same request at info, with its code and user."""
    front_proxy = (control_plane.pki_dir / "front-proxy-client.crt", control_plane.pki_dir / "front-proxy-client.key")
    admin = {"X-Remote-User": "root", "X-Remote-Group": "system:masters"}
    marker = f"log-probe-{uuid.uuid4().hex[:8]}"
    path = f"/apis/apps.cozystack.io/v1alpha1/namespaces/default/{marker}"
    quiet = services.start(control_plane, helm_service.service)  # the one serving now
    assert call_service(quiet.port, path, cert=front_proxy, headers=admin)[0] == 404
    port = free_port()
    log = tmp_path / "helm-agl.log"
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "helm_agl", "--kubeconfig", str(control_plane.kubeconfig),
                                 "--bind-address", "127.0.0.1", "--secure-port", str(port), "--log-requests"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        wait_for(lambda: call_service(port, path, cert=front_proxy, headers=admin)[0] == 404,
                 f"the second service to answer (log: {log})", timeout=60, interval=0.5)
        logged = wait_for(lambda: _request_lines(log, marker), "its request line", timeout=10, interval=0.2)
    finally:
        processes.terminate(proc.pid, grace=10)
    assert {(r["level"], r["code"], r["user"]) for r in logged} == {("info", 404, "root")}
    time.sleep(0.2)  # written as promptly as the second service's line was
    assert _request_lines(quiet.log, marker) == [], quiet.log
