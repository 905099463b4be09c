"""Install the CRDs the services need: ours from ``crds/`` and the real upstream Flux/tofu ones.

The upstream CRDs come from the controllers' Go modules through the module proxy and are checked
against pinned digests, so emitted HelmReleases and Terraforms are validated by the exact schemas
the real controllers ship.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import yaml

from . import build, paths, versions
from .cluster import Cluster, ClusterError

REPO_ROOT = Path(__file__).resolve().parents[3]
OUR_CRDS = REPO_ROOT / "crds"


def upstream_crd_file(crd: versions.UpstreamCRD) -> Path:
    """Download the module (cached by Go) and return the CRD file after checking its digest."""
    go = build.go_binary()
    workdir = paths.cache_dir() / "build" / "crd-download"
    workdir.mkdir(parents=True, exist_ok=True)
    if not (workdir / "go.mod").exists():
        (workdir / "go.mod").write_text("module agl.local/build/crds\n\ngo 1.24\n")
    result = subprocess.run([go, "mod", "download", "-json", f"{crd.module}@{crd.version}"], cwd=workdir,
                            capture_output=True, text=True, timeout=600)
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or info.get("Error") or "Dir" not in info:
        raise ClusterError(f"go mod download {crd.module}@{crd.version} failed: {info.get('Error') or result.stderr}")
    path = Path(info["Dir"]) / crd.path
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != crd.sha256:
        raise ClusterError(f"{crd.module}@{crd.version}/{crd.path} has sha256 {digest}, expected {crd.sha256}")
    return path


def crd_names(files: list[Path]) -> list[str]:
    names = []
    for file in files:
        # libyaml's loader: the pure-Python one took 2 s over the upstream CRDs, at every cluster's start.
        for doc in yaml.load_all(file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                names.append(doc["metadata"]["name"])
    return names


def install(cluster: Cluster, *, ours: bool = True, upstream: bool = True) -> list[str]:
    """Server-side apply the CRDs and wait until each is Established; returns their names."""
    files: list[Path] = []
    if ours:
        files += sorted(OUR_CRDS.glob("*.yaml"))
    if upstream:
        files += [upstream_crd_file(crd) for crd in versions.UPSTREAM_CRDS]
    # One kubectl for every file: a kubectl each spent most of a cluster's start (4 of 5 s) starting and
    # discovering the API again.
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=agl-localcluster",
                    *[arg for file in files for arg in ("-f", str(file))])
    names = crd_names(files)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    *[f"crd/{name}" for name in names])
    return names
