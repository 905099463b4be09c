"""Run the two AGL services out of cluster against the local control plane.

Each service is started the way the Helm chart runs it in a cluster, with its own serving
certificate, and is reached by kube-apiserver through a real APIService, so every request in the
demo and the integration tests takes the real aggregation path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import aggregation, processes
from .build import log
from .cluster import Cluster, ClusterError, _alive, free_port

NAMESPACE = "agl-system"


@dataclass(frozen=True)
class Service:
    name: str
    module: str
    group: str
    version: str = "v1alpha1"
    extra_args: tuple[str, ...] = ()


HELM_AGL = Service("helm-agl", "helm_agl", "apps.cozystack.io")
TOFU_AGL = Service("tofu-agl", "tofu_agl", "tofu.apps.cozystack.io")
ALL = (HELM_AGL, TOFU_AGL)


@dataclass
class Running:
    service: Service
    pid: int
    port: int
    log: Path


def _record(cluster: Cluster, service: Service) -> Path:
    directory = cluster.dir / "services"
    directory.mkdir(exist_ok=True)
    return directory / f"{service.name}.json"


def launch(cluster: Cluster, service: Service, *, port: int, log_file: Path, python: str = sys.executable,
           extra_args: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    """Start one process of ``service`` on 127.0.0.1:``port`` with its serving certificate, detached, and
    return at once: neither registered nor waited for. Another replica of a running service is one more
    ``launch`` with the same flags (the tests put replicas behind :mod:`localcluster.spreader`)."""
    _ca, cert = aggregation.serving_cert(cluster, service.name, NAMESPACE)
    argv = [python, "-m", service.module, "--kubeconfig", str(cluster.kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", str(port),
            "--tls-cert-file", str(cert.cert), "--tls-private-key-file", str(cert.key),
            *service.extra_args, *extra_args]
    with log_file.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def running(cluster: Cluster, service: Service) -> Running | None:
    """The process of ``service`` started by :func:`start` on ``cluster`` and still alive, if any."""
    record = _record(cluster, service)
    if not record.exists():
        return None
    data = json.loads(record.read_text())
    return Running(service, data["pid"], data["port"], Path(data["log"])) if _alive(data["pid"]) else None


def start(cluster: Cluster, service: Service, *, python: str = sys.executable,
          extra_args: tuple[str, ...] = (), timeout: float = 90) -> Running:
    """Start one service (unless it runs already), register its APIService, wait until Available."""
    if (already := running(cluster, service)) is not None:
        return already
    record = _record(cluster, service)
    ca, _cert = aggregation.serving_cert(cluster, service.name, NAMESPACE)
    port = free_port()
    log_file = cluster.logs_dir / f"{service.name}.log"
    proc = launch(cluster, service, port=port, log_file=log_file, python=python, extra_args=extra_args)
    record.write_text(json.dumps({"pid": proc.pid, "port": port, "log": str(log_file)}))
    log(f"started {service.name} (pid {proc.pid}) on 127.0.0.1:{port}, log {log_file}")
    aggregation.register(cluster, group=service.group, version=service.version, service=service.name,
                         namespace=NAMESPACE, port=port, ca_bundle=ca.cert)
    try:
        aggregation.wait_available(cluster, service.group, service.version, timeout=timeout)
    except ClusterError:
        if not _alive(proc.pid):
            tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-30:])
            raise ClusterError(f"{service.name} exited during start-up:\n{tail}") from None
        raise
    return Running(service, proc.pid, port, log_file)


def stop(cluster: Cluster, service: Service) -> None:
    record = _record(cluster, service)
    if not record.exists():
        return
    processes.terminate(json.loads(record.read_text())["pid"], grace=10)
    record.unlink(missing_ok=True)


def restart(cluster: Cluster, service: Service, *, python: str = sys.executable,
            extra_args: tuple[str, ...] = (), while_stopped: Callable[[], None] | None = None,
            ) -> tuple[Running, float]:
    """Stop the running ``service`` and start a new process on the same port, without waiting for it: the
    APIService stays as registered. Returns the new process and the ``time.monotonic()`` just before it
    started, from which a caller times the start-up (the benchmarks' ``startup_s``).

    ``while_stopped`` runs after the old process exited and before the new one starts: a test changes there what
    no process of the service may see happen."""
    record = _record(cluster, service)
    data = json.loads(record.read_text())
    processes.terminate(data["pid"], grace=10)
    if while_stopped is not None:
        while_stopped()
    log_file = Path(data["log"])
    started = time.monotonic()
    proc = launch(cluster, service, port=data["port"], log_file=log_file, python=python, extra_args=extra_args)
    record.write_text(json.dumps({"pid": proc.pid, "port": data["port"], "log": str(log_file)}))
    return Running(service, proc.pid, data["port"], log_file), started


def available() -> list[Service]:
    """The services whose package is importable (both, once the project is installed)."""
    return [s for s in ALL if importlib.util.find_spec(f"{s.module}.__main__") is not None]


def start_all(cluster: Cluster) -> list[Running]:
    return [start(cluster, s) for s in available()]


def stop_all(cluster: Cluster) -> None:
    for service in ALL:
        stop(cluster, service)
