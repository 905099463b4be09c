"""A Helm chart repository made from the sample charts and served over HTTP on 127.0.0.1.

source-controller fetches charts the way it does in a cluster: it reads ``index.yaml`` from a
HelmRepository URL and downloads the packaged chart it names. The charts are packaged at run time
by the pinned helm from the sources in ``deploy/samples/charts/`` (nothing built is committed), at
every version ``repository.yaml`` lists, so a test or the demo can roll a kind out to a newer
chart version.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from . import build
from .build import log
from .cluster import Cluster, ClusterError, free_port
from .processes import Process

CHARTS = Path(__file__).resolve().parents[2] / "samples" / "charts"
#: The repository URL written in ``deploy/samples/sources/charts.yaml``; replaced by the served URL.
PLACEHOLDER_URL = "http://127.0.0.1:8879/"


@dataclass(frozen=True)
class ChartRepository:
    url: str
    directory: Path


def package(directory: Path) -> Path:
    """Package every chart at every listed version into ``directory`` and index it; returns the index."""
    helm = build.ensure_helm()
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    listed: dict[str, list[str]] = yaml.safe_load((CHARTS / "repository.yaml").read_text())["charts"]
    for chart, chart_versions in sorted(listed.items()):
        for version in chart_versions:
            _helm(helm, "package", str(CHARTS / chart), "--version", version, "--app-version", version,
                  "--destination", str(directory))
    _helm(helm, "repo", "index", str(directory))
    return directory / "index.yaml"


def _helm(helm: Path, *args: str) -> None:
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise ClusterError(f"helm {' '.join(args)} failed: {result.stderr.strip()}")


def start(cluster: Cluster) -> ChartRepository:
    """Package the charts and serve them (unless already served); the URL ends with a slash."""
    process = Process(cluster, "chart-repository")
    directory = cluster.dir / "chart-repository"
    running = process.running()
    if running is not None:
        return ChartRepository(f"http://127.0.0.1:{running.port}/", directory)
    package(directory)
    port = free_port()
    process.spawn([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(directory),
                   str(port)], port=port, ready_url=f"http://127.0.0.1:{port}/index.yaml")
    log(f"chart repository serving {directory} on http://127.0.0.1:{port}/")
    return ChartRepository(f"http://127.0.0.1:{port}/", directory)


def stop(cluster: Cluster) -> None:
    Process(cluster, "chart-repository").stop()
