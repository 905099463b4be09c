"""Start, inspect and stop one local control plane (etcd + kube-apiserver) on 127.0.0.1.

The processes run detached from the caller (their own session), so ``nox -s up`` can return and
leave them running; everything about a cluster lives in its state directory, which is how a
second ``up`` finds the first one and ``down`` finds what to stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path

import yaml

from . import build, netns, nodehost, paths, pki
from .build import log
from .controlplane import (
    AUTHZ_WEBHOOK_GROUP,
    NODE_API_PORT,
    SERVICE_CIDR,
    State,
    apiserver_argv,
    certificates,
)
from .nodeconfig import Layout

__all__ = ["AUTHZ_WEBHOOK_GROUP", "SERVICE_CIDR", "Cluster", "ClusterError", "State", "free_port"]

#: Seconds :meth:`Cluster.restart_apiserver` lets kube-apiserver shut down before killing it.
RESTART_GRACE = 10


class ClusterError(RuntimeError):
    """Starting or using the local control plane failed; the message says which step."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _terminate(pids: list[int], grace: float) -> None:
    """TERM the process groups ``pids`` lead, KILL those still alive after ``grace`` seconds."""
    for pid in pids:
        if pid and _alive(pid):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for pid in pids:
        while pid and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid and _alive(pid):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        # A zombie child of ours still answers kill(0): look at its state.
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


class Cluster:
    """A named local control plane; its files live in :func:`paths.state_dir`."""

    def __init__(self, name: str = "default") -> None:
        self.name = name
        self.dir = paths.state_dir(name)
        self.pki_dir = self.dir / "pki"
        self.pki_dir.mkdir(exist_ok=True)
        self.logs_dir = self.dir / "logs"
        self.logs_dir.mkdir(exist_ok=True)
        self.state_file = self.dir / "state.json"
        self.kubeconfig = self.dir / "admin.kubeconfig"

    # ----------------------------------------------------------------- state
    def _state(self) -> State | None:
        if not self.state_file.exists():
            return None
        return State(**json.loads(self.state_file.read_text()))

    def _save(self, state: State) -> None:
        self.state_file.write_text(json.dumps(asdict(state)))

    @property
    def server(self) -> str:
        state = self._state()
        if state is None:
            raise ClusterError(f"cluster {self.name!r} is not running")
        return f"https://127.0.0.1:{state.api_port}"

    @property
    def pids(self) -> dict[str, int]:
        """The process ids of kube-apiserver and etcd (for benchmarks that count their CPU time)."""
        state = self._state()
        if state is None:
            raise ClusterError(f"cluster {self.name!r} is not running")
        return {"kube-apiserver": state.api_pid, "etcd": state.etcd_pid}

    def is_running(self) -> bool:
        state = self._state()
        return bool(state and _alive(state.etcd_pid) and _alive(state.api_pid) and self._ready(state, timeout=2))

    # ------------------------------------------------------------------ PKI
    def authz_webhook(self) -> tuple[int, pki.KeyPair]:
        """Where kube-apiserver sends the authorization webhook's reviews, and a serving certificate
        it trusts for that address; see :data:`AUTHZ_WEBHOOK_GROUP`."""
        state = self._state()
        if state is None or not state.authz_webhook_port:
            raise ClusterError(f"cluster {self.name!r} is not running with an authorization webhook")
        ca = certificates(self.pki_dir)["authz-webhook-ca"]
        return state.authz_webhook_port, pki.issue(ca, self.pki_dir, "authz-webhook", "127.0.0.1", ips=("127.0.0.1",),
                                                   server=True)

    def write_kubeconfig(self, path: Path, user: str, pair: pki.KeyPair, server: str) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {
                "server": server, "certificate-authority": str(self.pki_dir / "ca.crt")}}],
            "users": [{"name": user, "user": {
                "client-certificate": str(pair.cert), "client-key": str(pair.key)}}],
            "contexts": [{"name": f"{user}@{self.name}", "context": {"cluster": self.name, "user": user}}],
            "current-context": f"{user}@{self.name}",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for a client-certificate user (CN=user, O=groups), e.g. an unprivileged tenant."""
        ca = pki.ensure_ca(self.pki_dir, "ca", "agl-local-ca")
        safe = user.replace(":", "_").replace("/", "_")
        suffix = "-".join(g.replace(":", "_") for g in groups)
        pair = pki.issue(ca, self.pki_dir, f"user-{safe}-{suffix}", user, orgs=groups)
        return self.write_kubeconfig(self.dir / f"user-{safe}-{suffix}.kubeconfig", user, pair, self.server)

    # ------------------------------------------------------------ lifecycle
    def up(self, *, fresh: bool = False, node: bool = False) -> None:
        """Start the cluster unless it already runs; ``fresh`` wipes etcd's data first. With ``node`` the control
        plane runs in the node's network namespace (:mod:`netns`), where kube-apiserver reaches pods, and is
        forwarded to the same ports on 127.0.0.1 (:mod:`portforward`); the node itself is :mod:`node`'s."""
        state_now = self._state()
        if not fresh and self.is_running() and state_now is not None and state_now.node == node:
            log(f"cluster {self.name!r} already running at {self.server}")
            return
        self.down(quiet=True)
        binaries = build.ensure_binaries()
        if fresh:
            shutil.rmtree(self.dir / "etcd", ignore_errors=True)
        certs = certificates(self.pki_dir)
        # The test authorization webhook listens on the machine's loopback, which a node's kube-apiserver cannot reach.
        state = State(etcd_port=free_port(), etcd_peer_port=free_port(), api_port=free_port(),
                      authz_webhook_port=0 if node else free_port(), node=node)
        if node:
            # One node per machine: whatever a crashed run (of any cluster) left in the namespace goes first.
            self._clear_node(grace=5)
            netns.ensure()
            self._forward(state)
        log(f"starting etcd on 127.0.0.1:{state.etcd_port}")
        state.etcd_pid = self._spawn("etcd", in_netns=state.node, argv=[
            str(binaries.etcd), "--name", "agl-local", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{state.etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{state.etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{state.etcd_peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{state.etcd_peer_port}",
            "--initial-cluster", f"agl-local=http://127.0.0.1:{state.etcd_peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn",
        ])
        self._save(state)
        self._wait(lambda: self._http_ok(f"http://127.0.0.1:{state.etcd_port}/health"), "etcd", state.etcd_pid)
        log(f"starting kube-apiserver on 127.0.0.1:{state.api_port}")
        self._start_apiserver(binaries.kube_apiserver, state)
        self._save(state)
        self.write_kubeconfig(self.kubeconfig, "admin", certs["admin"], f"https://127.0.0.1:{state.api_port}")
        self._wait(lambda: self._ready(state, timeout=3), "kube-apiserver", state.api_pid, limit=120)
        self._wait(self._bootstrapped, "kube-apiserver bootstrap (namespaces, authentication ConfigMap)",
                   state.api_pid, limit=60)
        log(f"cluster {self.name!r} ready at https://127.0.0.1:{state.api_port}")

    def _forward(self, state: State) -> None:
        """The machine's 127.0.0.1 ports of etcd and kube-apiserver, forwarded into the node's namespace."""
        rules = [f"host:127.0.0.1:{state.etcd_port}=node:127.0.0.1:{state.etcd_port}",
                 f"host:127.0.0.1:{state.api_port}=node:127.0.0.1:{NODE_API_PORT}"]
        state.forward_pid = self._spawn("portforward", [sys.executable, "-m", "localcluster.portforward",
                                                        "--netns", str(netns.PATH), *rules], in_netns=False)
        self._save(state)

    def _start_apiserver(self, binary: Path, state: State) -> None:
        state.api_pid = self._spawn("kube-apiserver", apiserver_argv(binary, self.dir, self.pki_dir, state),
                                    in_netns=state.node)

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port (etcd keeps running).

        For tests of what survives an API server restart: watches, informers, kopf.
        """
        state = self._state()
        if state is None:
            raise ClusterError(f"cluster {self.name!r} is not running")
        with contextlib.suppress(OSError):
            os.killpg(state.api_pid, signal.SIGTERM)
        deadline = time.monotonic() + RESTART_GRACE
        while _alive(state.api_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        # kube-apiserver stops listening at once but may go on serving the watches it has; like a
        # kubelet after the grace period, end it, so that a restart really cuts every connection.
        with contextlib.suppress(OSError):
            os.killpg(state.api_pid, signal.SIGKILL)
        while _alive(state.api_pid):
            time.sleep(0.1)
        binaries = build.ensure_binaries()
        self._start_apiserver(binaries.kube_apiserver, state)
        self._save(state)
        self._wait(lambda: self._ready(state, timeout=3), "kube-apiserver", state.api_pid, limit=120)

    def down(self, *, quiet: bool = False) -> None:
        """Stop the processes started against this cluster (the services, the Flux controllers), then
        kube-apiserver and etcd (TERM, then KILL); data stays for the next ``up``.

        Started processes go too: left running, they would retry a kube-apiserver that is gone forever,
        and take CPU from whatever runs next on the machine (a benchmark, above all)."""
        started = self._started_processes()
        state = self._state()
        if state is None and not started:
            if not quiet:
                log(f"cluster {self.name!r} is not running")
            return
        _terminate([pid for pid, _ in started], grace=15)
        for _, record in started:
            record.unlink(missing_ok=True)
        if state is not None and state.node:
            nodehost.clear(self.node_layout.base, self.node_layout.containerd_socket)
        if state is not None:
            # kube-apiserver before etcd: TERMed together, kube-apiserver spends its whole grace period retrying
            # the etcd that went first (11 s, against 1 s one after the other).
            _terminate([state.api_pid], grace=15)
            _terminate([state.etcd_pid], grace=15)
            _terminate([state.forward_pid], grace=5)
        if state is not None and state.node:
            self._clear_node(grace=5)
        self.state_file.unlink(missing_ok=True)
        if not quiet:
            log(f"cluster {self.name!r} stopped")

    @property
    def node_layout(self) -> Layout:
        """Where this cluster's node (if it has one) keeps its files."""
        return Layout(self.dir / "node")

    def _clear_node(self, grace: float) -> None:
        """Remove the node's network namespace and everything in it, and what a node left on the machine."""
        nodehost.clear(self.node_layout.base, self.node_layout.containerd_socket)
        nodehost.stop_netns_processes(grace)
        netns.delete()

    def _started_processes(self) -> list[tuple[int, Path]]:
        """(pid, record file) of what ``services`` and ``processes`` started against this cluster."""
        found: list[tuple[int, Path]] = []
        for record in [*self.dir.glob("services/*.json"), *self.dir.glob("processes/*.json")]:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                found.append((int(json.loads(record.read_text())["pid"]), record))
        return found

    def destroy(self) -> None:
        self.down(quiet=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -------------------------------------------------------------- helpers
    def _spawn(self, name: str, argv: list[str], *, in_netns: bool) -> int:
        """Start ``argv`` detached, in the node's network namespace or on the machine's loopback."""
        out = (self.logs_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(netns.inside(argv) if in_netns else argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.dir)
        return proc.pid

    def _wait(self, check: object, what: str, pid: int, limit: float = 60) -> None:
        assert callable(check)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if not _alive(pid):
                log_file = self.logs_dir / f"{what.split()[0]}.log"
                tail = log_file.read_text(errors="replace").splitlines()[-25:] if log_file.exists() else []
                raise ClusterError(f"{what} exited during start-up; last lines of {log_file}:\n" + "\n".join(tail))
            if check():
                return
            time.sleep(0.25)
        raise ClusterError(f"{what} did not become ready within {limit:.0f}s (logs in {self.logs_dir})")

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _admin_ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return ctx

    def get_json(self, path: str, timeout: float = 5) -> object:
        """GET a path of kube-apiserver as admin (for readiness checks; tests use real clients)."""
        with urllib.request.urlopen(self.server + path, timeout=timeout, context=self._admin_ssl()) as resp:
            return json.loads(resp.read())

    def _ready(self, state: State, timeout: float) -> bool:
        try:
            url = f"https://127.0.0.1:{state.api_port}/readyz"
            with urllib.request.urlopen(url, timeout=timeout, context=self._admin_ssl()) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    def _bootstrapped(self) -> bool:
        try:
            self.get_json("/api/v1/namespaces/default")
            self.get_json("/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication")
            return True
        except (urllib.error.URLError, OSError):
            return False

    def kubectl(self, *args: str, kubeconfig: Path | None = None, input: str | None = None,
                check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster."""
        argv = [str(build.kubectl_dir() / "kubectl"), "--kubeconfig", str(kubeconfig or self.kubeconfig), *args]
        result = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result
