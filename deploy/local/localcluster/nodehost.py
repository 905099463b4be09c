"""Leave the machine as a node found it, also after a crash.

kubelet and containerd touch state outside their own directories whatever their configuration says: cgroups
(``kubepods``), ``/var/lib/kubelet/device-plugins``, ``/var/log/containers``, mounts (each pod's volumes, each
container's root file system, each pod's network namespace), the shims containerd leaves running. CI runs on the
same machine right after a stop, so :func:`clear` finds all of that from the machine itself, not from a state file a
crashed run may not have written: the processes inside the node's network namespace, the shims serving the node's
containerd socket, the processes in the node's cgroups, the mounts under the node's directories. Every step is
idempotent and bounded in time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from . import netns
from .build import log

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: cgroups kubelet (``kubepods``, cgroupfs driver) and containerd (its namespace) create under every hierarchy.
CGROUP_NAMES = ("kubepods", "k8s.io")
#: Directories of the machine kubelet writes to whatever its root directory is.
HOST_DIRS = (Path("/var/lib/kubelet"), Path("/var/log/containers"))
#: The node's own daemons (``/proc/PID/comm``, at most 15 characters), stopped before their containers.
NODE_DAEMONS = ("kubelet", "containerd", "kube-proxy", "kube-controller", "kube-scheduler")


def _pids() -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def _netns_inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def processes_in_netns() -> list[int]:
    """Every process whose network namespace is the node's (kubelet, containerd, the control plane, ...)."""
    inode = _netns_inode(netns.PATH)
    if inode is None:
        return []
    found = []
    for pid in _pids():
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{pid}/ns/net").st_ino == inode and pid != os.getpid():
                found.append(pid)
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def shims_of(socket: Path) -> list[int]:
    """containerd's shims for ``socket``: they outlive containerd on purpose, so they are found by command line."""
    found = []
    for pid in _pids():
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
                found.append(pid)
    return found


def cgroup_dirs() -> list[Path]:
    """The node's cgroups in every hierarchy, deepest first (a cgroup can only be removed once it has no children)."""
    found: list[Path] = []
    for hierarchy in (CGROUP_ROOT.iterdir() if CGROUP_ROOT.is_dir() else []):
        for name in CGROUP_NAMES:
            top = hierarchy / name
            if top.is_dir():
                found.extend(p for p in top.rglob("*") if p.is_dir())
                found.append(top)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def processes_in_cgroups(dirs: Iterable[Path]) -> set[int]:
    pids: set[int] = set()
    for directory in dirs:
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(line) for line in (directory / "cgroup.procs").read_text().split())
    return pids


def _kill(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def _stop(pids: list[int], grace: float) -> None:
    """TERM, then KILL what is left after ``grace`` seconds."""
    _kill(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.1)
    _kill(pids, signal.SIGKILL)


def mounts_under(prefixes: Iterable[Path], mountinfo: Path = Path("/proc/self/mountinfo")) -> list[Path]:
    """Mount points under any of ``prefixes``, deepest first (from ``mountinfo``, with its octal escapes)."""
    roots = [str(p.resolve()) for p in prefixes]
    points: list[Path] = []
    for line in mountinfo.read_text().splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = fields[4].encode().decode("unicode_escape")
        if any(point == root or point.startswith(root + "/") for root in roots):
            points.append(Path(point))
    return sorted(set(points), key=lambda p: len(p.parts), reverse=True)


def unmount(points: Iterable[Path]) -> None:
    for point in points:
        # Lazily: a mount still held by a dying process goes as soon as it lets go.
        subprocess.run(["umount", "--lazy", str(point)], capture_output=True, timeout=30)


def clear(base: Path, containerd_socket: Path) -> None:
    """Stop everything of a node whose files live under ``base`` and remove what it left on the machine, except the
    network namespace itself (the control plane may still run in it; :func:`netns.delete` removes it)."""
    daemons = [pid for pid in processes_in_netns() if _comm(pid) in NODE_DAEMONS]
    cgroups = cgroup_dirs()
    containers = processes_in_cgroups(cgroups)
    if containers or daemons:
        log(f"node: stopping {len(daemons)} node processes and {len(containers)} container processes")
    # kubelet and containerd first, so that nothing starts a container again; then the containers at once (nothing
    # is left to stop them gracefully), then the shims, which exit when their containers are gone.
    _stop(daemons, grace=10)
    _kill(processes_in_cgroups(cgroups), signal.SIGKILL)
    _stop(shims_of(containerd_socket), grace=5)
    unmount(mounts_under([base, *HOST_DIRS]))
    deadline = time.monotonic() + 20
    for directory in cgroups:
        while directory.exists() and time.monotonic() < deadline:
            _kill(processes_in_cgroups([directory]), signal.SIGKILL)
            with contextlib.suppress(OSError):
                directory.rmdir()
                break
            time.sleep(0.1)
    left = [d for d in cgroups if d.exists()]
    if left:
        log(f"node: {len(left)} cgroups could not be removed, e.g. {left[0]}")
    for directory in HOST_DIRS:
        shutil.rmtree(directory, ignore_errors=True)


def stop_netns_processes(grace: float) -> None:
    """Stop whatever still runs in the node's network namespace (after a crash: a control plane nobody recorded)."""
    pids = processes_in_netns()
    if pids:
        _stop(pids, grace)
