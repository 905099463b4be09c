"""How each service process sets itself up at start, read from the running services' own logs.

The mmap threshold the process pins (``shared.service.memory``) has no getter in glibc, so what the
service reports at start is the evidence that the running process, not only the function, pins it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from localcluster import services

pytestmark = pytest.mark.integration


def _records(running: services.Running) -> list[dict[str, Any]]:
    records = []
    for line in running.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def test_both_services_pin_the_mmap_threshold(helm_service: services.Running,
                                              tofu_service: services.Running) -> None:
    for running in (helm_service, tofu_service):
        pinned = [r for r in _records(running) if "mmap_threshold_bytes" in r]
        assert pinned and pinned[-1]["mmap_threshold_bytes"] == 128 * 1024, running.log
