"""The Debian packages a local node needs, installed from Debian's archive when they are missing.

A new machine has none of them, and CI runs on a new machine as often as not, so ``build --node`` and ``up --node``
install them themselves (as root, which the node needs anyway). Debian bookworm's versions, measured 2026-12-08:
containerd 1.6.20, runc 1.1.5, containernetworking-plugins 1.1.1, buildah 1.28.2, mmdebstrap 1.3.5, iptables
1.8.9 (nf_tables), conntrack 1.4.7. What each is for:

- containerd and runc run the pods; the CNI plugins (bridge, host-local, portmap) give them their network;
- iptables and conntrack are what kube-proxy writes its rules with and clears stale flows with;
- buildah builds the project's image from its Dockerfile without Docker; mmdebstrap makes the Python base that
  stands in for ``python:3.11-slim``, which cannot be pulled here (:mod:`images`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .build import BuildError, log

#: A file or command each package provides -> the package.
NODE_PACKAGES = {
    "containerd": "containerd",
    "runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "buildah": "buildah",
    "mmdebstrap": "mmdebstrap",
    "nsenter": "util-linux",
    "ip": "iproute2",
}


def missing() -> list[str]:
    """The packages whose file or command is not on this machine."""
    absent = []
    for probe, package in NODE_PACKAGES.items():
        found = Path(probe).exists() if probe.startswith("/") else shutil.which(probe) is not None
        if not found and package not in absent:
            absent.append(package)
    return absent


def ensure() -> None:
    """Install what :func:`missing` names with apt-get, or say how to where this process is not root."""
    absent = missing()
    if not absent:
        return
    command = ["apt-get", "install", "-y", "-q", *absent]
    if os.geteuid() != 0:
        raise BuildError(f"the local node needs Debian packages that are missing: run as root "
                         f"`apt-get update && {' '.join(command)}`")
    log(f"installing Debian packages for the node: {', '.join(absent)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for step in (["apt-get", "update", "-q"], command):
        result = subprocess.run(step, capture_output=True, text=True, env=env, timeout=900)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
            raise BuildError(f"{' '.join(step)} failed ({result.returncode}):\n{tail}")
    still = missing()
    if still:
        raise BuildError(f"apt-get installed {', '.join(absent)} but these are still missing: {', '.join(still)}")
