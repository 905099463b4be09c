"""A cluster that goes down takes the processes started against it along.

Left running, a service or a Flux controller retries its kube-apiserver forever and takes CPU from
whatever runs next (a benchmark above all). Real child processes stand in for them here; no
kube-apiserver is needed: ``down`` stops what the records name even when the cluster itself is gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from localcluster.cluster import Cluster, _alive


def test_destroy_stops_recorded_services_and_processes() -> None:
    cluster = Cluster(f"unit-down-{uuid.uuid4().hex[:8]}")
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
                for _ in range(2)]
    try:
        for directory, child in zip(("services", "processes"), children, strict=True):
            (cluster.dir / directory).mkdir(exist_ok=True)
            (cluster.dir / directory / "x.json").write_text(json.dumps({"pid": child.pid, "port": 1}))
        cluster.destroy()
        for child in children:
            child.wait(timeout=20)  # reaped here: stopped by destroy, not by the cleanup below
            assert not _alive(child.pid)
        assert not cluster.dir.exists()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        cluster.destroy()
