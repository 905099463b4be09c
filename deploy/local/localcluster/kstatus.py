"""The kstatus verdict tool: our own Go main, built against the kstatus kustomize-controller requires.

It reads one object on stdin and prints kstatus' status and message as JSON (``tests/flux/test_kstatus.py``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from . import versions
from .build import GoTarget, build, link_current

#: The verdict tool's main (ours): one object on stdin, kstatus' status and message as JSON on stdout.
KSTATUS_MAIN = Path(__file__).with_name("kstatus_verdict.go")


def kstatus_target() -> GoTarget:
    """The kstatus verdict tool, against the kstatus that kustomize-controller requires (``versions.KSTATUS``).

    Its name carries the digest of its main, so a changed main is a new binary rather than a stale cached one.
    """
    source = KSTATUS_MAIN.read_text()
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    return GoTarget(f"kstatus-verdict-{digest}", versions.KSTATUS_MODULE, versions.KSTATUS,
                    f"{versions.KSTATUS_MODULE}/pkg/kstatus/status", main_source=source)


def ensure_kstatus() -> Path:
    """Build (or reuse) the kstatus verdict tool (a minute or two when cold), linked as ``kstatus-verdict``
    into :func:`kubectl_dir`."""
    binary = build(kstatus_target())
    link_current("kstatus-verdict", binary)
    return binary
