"""A real node on the local control plane: containerd, kubelet, kube-proxy, kube-controller-manager, kube-scheduler
and cluster DNS (:mod:`clusterdns`).

All of them run in the node's network namespace (:mod:`netns`) next to the control plane, each recorded as a helper
process of the cluster (:mod:`processes`) so ``down`` stops them; :mod:`nodehost` removes what they leave on the
machine. Each start waits for what the component really does, not for a port: containerd answers on its socket,
the node turns Ready, kube-proxy's rules for the ``kubernetes`` Service exist, kube-controller-manager publishes the
cluster's CA into ``default``, the scheduler's own health answers. Images cannot be pulled here, so the ones the
node runs are imported into containerd before kubelet starts (:mod:`images`).
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import time
import urllib.error
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tenacity

from . import build, clusterdns, images, netns, nodeconfig, pki, processes
from .build import log
from .cluster import Cluster, ClusterError
from .controlplane import NODE_API_PORT
from .nodeconfig import NODE_NAME, Layout


def layout(cluster: Cluster) -> Layout:
    return Layout(cluster.dir / "node")


def _kubeconfig(cluster: Cluster, name: str, cn: str, orgs: tuple[str, ...] = ()) -> Path:
    """A kubeconfig for a node component: kube-apiserver on the namespace's own loopback."""
    ca = pki.ensure_ca(cluster.pki_dir, "ca", "agl-local-ca")
    pair = pki.issue(ca, cluster.pki_dir, name, cn, orgs=orgs)
    server = f"https://127.0.0.1:{NODE_API_PORT}"  # inside the namespace; the machine's port is forwarded to it
    return cluster.write_kubeconfig(layout(cluster).base / f"{name}.kubeconfig", cn, pair, server)


def _inside(argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(netns.inside(argv), capture_output=True, text=True, timeout=timeout)


def _get(cluster: Cluster, path: str) -> dict[str, Any] | None:
    """A JSON object from kube-apiserver, or None where there is none (yet)."""
    try:
        found = cluster.get_json(path)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def node_ready(cluster: Cluster, since: float = 0.0) -> bool:
    """The Node is Ready by a heartbeat of kubelet's at ``since`` (epoch seconds) or later: a Node kept in etcd from
    an earlier run says Ready until its lease runs out, whatever runs now."""
    found = _get(cluster, f"/api/v1/nodes/{NODE_NAME}")
    conditions = found.get("status", {}).get("conditions", []) if found else []
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               and _epoch(c.get("lastHeartbeatTime", "")) >= since - 1 for c in conditions)


def _epoch(text: str) -> float:
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _proxy_rules_present() -> bool:
    result = _inside(["iptables", "-t", "nat", "-S", "KUBE-SERVICES"])
    return result.returncode == 0 and "default/kubernetes:https" in result.stdout


def _root_ca_published(cluster: Cluster) -> Callable[[], bool]:
    """kube-controller-manager serves its health and has published the cluster's CA into ``default`` (kept from
    an earlier run, the ConfigMap alone would say nothing of the process that runs now)."""
    healthy = _https_ok(10257)

    def check() -> bool:
        return healthy() and _get(cluster, "/api/v1/namespaces/default/configmaps/kube-root-ca.crt") is not None
    return check


def _containerd_answers(socket: Path) -> Callable[[], bool]:
    def check() -> bool:
        return socket.exists() and subprocess.run(
            ["ctr", "--address", str(socket), "version"], capture_output=True, timeout=10).returncode == 0
    return check


def _https_ok(port: int) -> Callable[[], bool]:
    """A component's own /healthz inside the namespace (kube-scheduler serves it on its secure port)."""
    def check() -> bool:
        probe = ("import ssl,urllib.request;c=ssl._create_unverified_context();"
                 f"print(urllib.request.urlopen('https://127.0.0.1:{port}/healthz',context=c,timeout=2).status)")
        import sys

        return _inside([sys.executable, "-c", probe]).stdout.strip() == "200"
    return check


def _start(cluster: Cluster, name: str, argv: list[str], ready: Callable[[], bool], timeout: float) -> None:
    proc = processes.Process(cluster, name)
    if proc.running() is not None and ready():
        return
    proc.stop()
    started = time.monotonic()
    proc.spawn(netns.inside(argv), port=0, ready=ready, timeout=timeout)
    log(f"node: {name} ready after {time.monotonic() - started:.1f}s")


def _import_failed(state: tenacity.RetryCallState) -> None:
    log(f"node: image import failed, again: {state.outcome.exception() if state.outcome else '?'}")


@tenacity.retry(stop=tenacity.stop_after_attempt(3), wait=tenacity.wait_fixed(2), reraise=True,
                retry=tenacity.retry_if_exception_type(build.BuildError), before_sleep=_import_failed)
def _import(lay: Layout, archives: list[images.ImageArchive]) -> None:
    """Import the images, again after a failure: a containerd that has just started has been seen to drop ctr's
    connection once ("transport is closing"); importing an image that is there already costs little."""
    images.import_images(archives, str(lay.containerd_socket))


def start(cluster: Cluster, archives: Sequence[images.ImageArchive], sandbox: images.ImageArchive) -> None:
    """Start the node's components against ``cluster`` (already up with ``node=True``) and wait until the node is
    Ready, with ``archives`` and the ``sandbox`` image imported into its containerd."""
    if not cluster.is_running():
        raise ClusterError(f"cluster {cluster.name!r} is not running")
    binaries = build.ensure_node_binaries()
    lay = layout(cluster)
    for directory in (lay.containerd_dir, lay.cni_conf_dir, lay.cni_ipam_dir, lay.kubelet_dir, lay.pod_logs_dir):
        directory.mkdir(parents=True, exist_ok=True)
    (lay.containerd_dir / "config.toml").write_text(nodeconfig.containerd_config(lay, sandbox.ref))
    (lay.cni_conf_dir / "10-agl.conflist").write_text(nodeconfig.cni_conflist(lay))
    lay.resolv_conf.write_text(nodeconfig.resolv_conf())

    dns = clusterdns.ensure_image()
    if processes.Process(cluster, "containerd").running() is None:
        # What containerd and the CNI plugins recorded of running sandboxes is stale once containerd is not running
        # (a crash, or a down): on a real machine it lives in /run or is released at boot. Images stay.
        for stale in (lay.containerd_dir / "state", lay.cni_ipam_dir):
            shutil.rmtree(stale, ignore_errors=True)
        lay.cni_ipam_dir.mkdir(parents=True, exist_ok=True)
    _start(cluster, "containerd", ["containerd", "--config", str(lay.containerd_dir / "config.toml")],
           _containerd_answers(lay.containerd_socket), timeout=60)
    imported = time.monotonic()
    _import(lay, [sandbox, dns, *archives])
    log(f"node: {2 + len(archives)} images imported in {time.monotonic() - imported:.1f}s")

    ca = pki.ensure_ca(cluster.pki_dir, "ca", "agl-local-ca")
    serving = pki.issue(ca, cluster.pki_dir, "kubelet-serving", NODE_NAME, dns=(NODE_NAME,), ips=(netns.NODE_IP,),
                        server=True)
    kubelet_config = lay.base / "kubelet-config.yaml"
    kubelet_config.write_text(nodeconfig.kubelet_config(lay, client_ca=ca.cert, serving=(serving.cert, serving.key),
                                                        healthz_port=10248))
    kubelet_kubeconfig = _kubeconfig(cluster, "kubelet", f"system:node:{NODE_NAME}", ("system:nodes",))
    since = time.time()
    _start(cluster, "kubelet", [
        str(binaries["kubelet"]), f"--config={kubelet_config}", f"--kubeconfig={kubelet_kubeconfig}",
        f"--root-dir={lay.kubelet_dir}", f"--hostname-override={NODE_NAME}", f"--node-ip={netns.NODE_IP}", "--v=1",
    ], lambda: node_ready(cluster, since), timeout=120)

    proxy_config = lay.base / "kube-proxy-config.yaml"
    proxy_config.write_text(nodeconfig.kube_proxy_config(_kubeconfig(cluster, "kube-proxy", "system:kube-proxy"),
                                                         healthz_port=10256, metrics_port=10249))
    _start(cluster, "kube-proxy", [str(binaries["kube-proxy"]), f"--config={proxy_config}", "--v=1"],
           _proxy_rules_present, timeout=60)

    sa_key, _ = pki.ensure_service_account_keys(cluster.pki_dir)
    _start(cluster, "kube-controller-manager", [
        str(binaries["kube-controller-manager"]),
        f"--kubeconfig={_kubeconfig(cluster, 'kube-controller-manager', 'system:kube-controller-manager')}",
        f"--service-account-private-key-file={sa_key}", f"--root-ca-file={ca.cert}",
        f"--cluster-signing-cert-file={ca.cert}", f"--cluster-signing-key-file={ca.key}",
        "--use-service-account-credentials=true", "--leader-elect=false", "--controllers=*",
        "--bind-address=127.0.0.1", "--secure-port=10257", "--v=1",
    ], _root_ca_published(cluster), timeout=90)
    _start(cluster, "kube-scheduler", [
        str(binaries["kube-scheduler"]),
        f"--kubeconfig={_kubeconfig(cluster, 'kube-scheduler', 'system:kube-scheduler')}",
        "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10259", "--v=1",
    ], _https_ok(10259), timeout=60)
    clusterdns.start(cluster, dns)


def describe(cluster: Cluster) -> str:
    """One line on the node for ``up``'s output."""
    found = _get(cluster, f"/api/v1/nodes/{NODE_NAME}") or {}
    info = found.get("status", {}).get("nodeInfo", {})
    return (f"node {NODE_NAME} at {netns.NODE_IP} (network namespace {netns.NAME}): kubelet "
            f"{info.get('kubeletVersion', '?')}, {info.get('containerRuntimeVersion', '?')}")


def dump(cluster: Cluster) -> str:
    """The node's state for a failure message: its conditions and the pods that are not running."""
    node = _get(cluster, f"/api/v1/nodes/{NODE_NAME}")
    pods = _get(cluster, "/api/v1/pods") or {}
    lines = [json.dumps(node.get("status", {}).get("conditions", []) if node else "no node")]
    for pod in pods.get("items", []):
        phase = pod.get("status", {}).get("phase")
        if phase != "Running":
            lines.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}: {phase}")
    return "\n".join(lines)
