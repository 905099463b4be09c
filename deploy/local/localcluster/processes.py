"""Detached helper processes of a local cluster (Flux controllers, the chart repository).

Each runs in its own session so ``nox -s up`` can return and leave it running; a small JSON
record in the cluster's state directory (pid, port, log) is how a later ``up`` reuses it and how
``down`` finds what to stop.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .cluster import Cluster, ClusterError, _alive, _terminate


@dataclass(frozen=True)
class Record:
    pid: int
    port: int
    log: str


class Process:
    """One named helper process of ``cluster``."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.name = name
        directory = cluster.dir / "processes"
        directory.mkdir(exist_ok=True)
        self.record_file = directory / f"{name}.json"
        self.log_file = cluster.logs_dir / f"{name}.log"

    def running(self) -> Record | None:
        if not self.record_file.exists():
            return None
        record = Record(**json.loads(self.record_file.read_text()))
        return record if _alive(record.pid) else None

    def spawn(self, argv: list[str], *, port: int, ready_url: str = "", env: dict[str, str] | None = None,
              cwd: Path | None = None, timeout: float = 60, ready: Callable[[], bool] | None = None) -> Record:
        """Start ``argv`` detached and wait until ``ready_url`` answers 200, or ``ready()`` is true (or the process
        exits)."""
        check = ready if ready is not None else (lambda: _answers(ready_url))
        with self.log_file.open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=dict(os.environ, **(env or {})), cwd=cwd)
        record = Record(proc.pid, port, str(self.log_file))
        self.record_file.write_text(json.dumps(record.__dict__))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(proc.pid):
                tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-30:])
                self.record_file.unlink(missing_ok=True)
                raise ClusterError(f"{self.name} exited during start-up; last lines of {self.log_file}:\n{tail}")
            if check():
                return record
            time.sleep(0.25)
        self.stop()
        raise ClusterError(f"{self.name} did not become ready within {timeout:.0f}s (log {self.log_file})")

    def stop(self) -> None:
        """Terminate the process (if recorded) and forget the record."""
        if not self.record_file.exists():
            return
        terminate(int(json.loads(self.record_file.read_text())["pid"]), grace=15)
        self.record_file.unlink(missing_ok=True)


def terminate(pid: int, grace: float) -> None:
    """TERM the process group ``pid`` leads, KILL it if it is still alive after ``grace`` seconds."""
    _terminate([pid], grace)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
