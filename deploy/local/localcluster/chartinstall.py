"""Install the project's chart on the local node with the real helm, as a platform engineer installs it.

The chart's default values hold except what a local cluster must set, and only that:

- ``image``: the image built here from the repository's Dockerfile (:mod:`images`), never pulled
  (``pullPolicy: Never``: a missing image shows as ``ErrImageNeverPull`` instead of a pull that cannot succeed);
- ``tls.mode: generate``: the default mode needs cert-manager, which this node does not run.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import build
from .build import log
from .cluster import Cluster, ClusterError

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "deploy" / "chart"
RELEASE = "agl"
NAMESPACE = "cozy-agl"


@dataclass(frozen=True)
class Flags:
    """Which services the release installs (the chart's feature flags)."""

    helm_agl: bool = True
    tofu_agl: bool = True

    def values(self) -> list[str]:
        return [f"helmAgl.enabled={str(self.helm_agl).lower()}", f"tofuAgl.enabled={str(self.tofu_agl).lower()}"]


BOTH = Flags()
HELM_ONLY = Flags(tofu_agl=False)
TOFU_ONLY = Flags(helm_agl=False)


def local_values(image_ref: str) -> list[str]:
    """``--set`` values for this node: the local image by repository and tag, never pulled, generated TLS."""
    repository, tag = image_ref.rsplit(":", 1)
    return [f"image.repository={repository}", f"image.tag={tag}", "image.pullPolicy=Never", "tls.mode=generate"]


def helm(cluster: Cluster, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the pinned helm against ``cluster``."""
    argv = [str(build.ensure_helm()), "--kubeconfig", str(cluster.kubeconfig), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise ClusterError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stderr.strip()}")
    return result


def install_args(image_ref: str, flags: Flags = BOTH, *, upgrade: bool = False, extra: Sequence[str] = (),
                 wait: str = "5m") -> list[str]:
    verb = ["upgrade", "--install"] if upgrade else ["install"]
    sets = [arg for value in (*local_values(image_ref), *flags.values()) for arg in ("--set", value)]
    return [*verb, RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", "--wait",
            f"--timeout={wait}", *sets, *extra]


def pods_not_ready(cluster: Cluster, namespace: str = NAMESPACE) -> str:
    """Why the release's pods are not Ready, in kubelet's words: each container's waiting reason and message, its
    last exit and restarts, and the last lines of a restarted container's previous log. helm's ``--wait`` says only
    ``context deadline exceeded``."""
    found = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    lines = []
    for pod in found:
        name = pod["metadata"]["name"]
        for status in pod.get("status", {}).get("containerStatuses", []):
            if status.get("ready"):
                continue
            waiting = status.get("state", {}).get("waiting", {})
            last = status.get("lastState", {}).get("terminated", {})
            line = f"pod {name}: {waiting.get('reason', pod['status'].get('phase'))}"
            if waiting.get("message"):
                line += f" ({waiting['message'][:300]})"
            if last:
                line += f"; last exit {last.get('exitCode')} ({last.get('reason')}), {status['restartCount']} restarts"
                previous = cluster.kubectl("logs", "-n", namespace, name, "--previous", "--tail=3", check=False)
                line += "".join(f"\n    {text}" for text in previous.stdout.splitlines())
            lines.append(line)
    return "\n".join(lines) or "every pod is Ready"


def start_to_ready(cluster: Cluster, namespace: str = NAMESPACE) -> dict[str, float]:
    """Seconds from each running service pod's container start to its Ready condition, as kubelet recorded them
    (whole seconds: the API's timestamps have no finer grain)."""
    found = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    out: dict[str, float] = {}
    for pod in found:
        status = pod.get("status", {})
        started = [c["state"]["running"]["startedAt"] for c in status.get("containerStatuses", [])
                   if "running" in c.get("state", {})]
        ready = [c["lastTransitionTime"] for c in status.get("conditions", [])
                 if c["type"] == "Ready" and c["status"] == "True"]
        if started and ready:
            out[pod["metadata"]["name"]] = (_time(ready[0]) - _time(started[0])).total_seconds()
    return out


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def install(cluster: Cluster, image_ref: str, flags: Flags = BOTH, wait: str = "5m") -> float:
    """``helm upgrade --install --wait`` of the chart; returns the seconds it took. A failed wait says why the pods
    are not Ready."""
    started = time.monotonic()
    try:
        helm(cluster, *install_args(image_ref, flags, upgrade=True, wait=wait))
    except ClusterError as exc:
        raise ClusterError(f"{exc}\nwhy the pods are not Ready:\n{pods_not_ready(cluster)}") from exc
    took = time.monotonic() - started
    log(f"helm install --wait of {CHART.relative_to(REPO_ROOT)} ({', '.join(flags.values())}) took {took:.1f}s")
    ready = start_to_ready(cluster)
    if ready:
        log(f"the services' pods were Ready {min(ready.values()):.0f}-{max(ready.values()):.0f}s after their "
            "containers started")
    return took
