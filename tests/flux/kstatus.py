"""kstatus' verdict on an object, from the real kstatus (the tool ``python -m localcluster build`` compiles from
``deploy/local/localcluster/kstatus_verdict.go`` against the kstatus kustomize-controller v1.9.3 uses)."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

from localcluster import kstatus


@functools.cache
def tool() -> Path:
    """The verdict tool (already built by ``localcluster build``; built here, about 20 s, when it is not)."""
    return kstatus.ensure_kstatus()


def verdict(obj: dict[str, Any]) -> tuple[str, str]:
    """kstatus' (status, message) for ``obj``, as kustomize-controller's health check computes it."""
    done = subprocess.run([str(tool())], input=json.dumps(obj), capture_output=True, text=True, timeout=30,
                          check=True)
    answer = json.loads(done.stdout)
    return str(answer["status"]), str(answer["message"])
