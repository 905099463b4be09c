"""The network namespace a local node lives in.

Everything of the node's networking is inside one namespace the project creates: the control plane's listeners,
the bridge the pods hang off, the node's address, kubelet's and kube-proxy's netfilter rules. The namespace has no
link to the machine's own interfaces, so nothing a test, a pod or a controller sends can leave it; the machine's
loopback reaches the control plane only through :mod:`localcluster.portforward`.

Addresses (private, and only ever inside the namespace):

- the node: :data:`NODE_IP` on the bridge :data:`BRIDGE`, which is also the pods' gateway;
- the pods: :data:`POD_SUBNET`, handed out by the CNI ``host-local`` plugin from :data:`POD_RANGE`;
- Services: the control plane's service range (``cluster.SERVICE_CIDR``), reached through kube-proxy's rules.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

NAME = "agl-node"
PATH = Path("/run/netns") / NAME
BRIDGE = "agl0"
NODE_IP = "10.204.0.1"
POD_SUBNET = "10.204.0.0/24"
POD_RANGE = ("10.204.0.16", "10.204.0.254")


class NetnsError(RuntimeError):
    """Creating or removing the node's network namespace failed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def exists() -> bool:
    return PATH.exists()


def inside(argv: Sequence[str]) -> list[str]:
    """``argv`` run in the node's network namespace only: ``nsenter --net`` keeps the machine's mount namespace,
    so kubelet's volume mounts and containerd's rootfs mounts stay visible to each other (``ip netns exec`` would
    give each process a private mount namespace of its own, and a pod would see empty Secret volumes)."""
    return ["nsenter", f"--net={PATH}", "--", *argv]


def ensure() -> None:
    """Create the namespace with its loopback, the bridge holding the node's address, and a default route over
    the bridge (ClusterIPs are only rewritten by kube-proxy after a route was found). Idempotent."""
    if not exists():
        _ip("netns", "add", NAME)
    _ip("-n", NAME, "link", "set", "lo", "up")
    if _ip("-n", NAME, "link", "show", BRIDGE, check=False).returncode != 0:
        _ip("-n", NAME, "link", "add", BRIDGE, "type", "bridge")
    if NODE_IP not in _ip("-n", NAME, "-br", "addr", "show", BRIDGE).stdout:
        _ip("-n", NAME, "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
    _ip("-n", NAME, "link", "set", BRIDGE, "up")
    _ip("-n", NAME, "route", "replace", "default", "dev", BRIDGE)
    # Forwarding between the pods' veths and to the node's own address; only this namespace's setting.
    subprocess.run(inside(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]), check=True, timeout=30)


def delete() -> None:
    """Remove the namespace: its interfaces, routes and netfilter tables go with it."""
    if exists():
        _ip("netns", "delete", NAME, check=False)
        PATH.unlink(missing_ok=True)
