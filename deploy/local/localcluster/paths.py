"""Where the local control plane keeps its binaries (cache) and its running state."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Built binaries live outside the repo so every clone and CI run on a machine reuses them."""
    base = os.environ.get("AGL_LOCAL_CACHE") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(base) / "agl-local" if "AGL_LOCAL_CACHE" not in os.environ else Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def bin_dir() -> Path:
    path = cache_dir() / "bin"
    path.mkdir(parents=True, exist_ok=True)
    return path


def state_dir(name: str = "default") -> Path:
    """Runtime state of one named cluster: certificates, kubeconfigs, logs, data and PIDs."""
    base = os.environ.get("AGL_LOCAL_STATE") or str(cache_dir() / "clusters")
    path = Path(base) / name
    path.mkdir(parents=True, exist_ok=True)
    return path
