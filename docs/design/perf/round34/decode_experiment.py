"""Round 34: does the json module decode a list of 50 000 Applications at a steady speed in one process?

A synthetic list (each item shaped as a helm_agl Application with managedFields and a Ready condition; 46 MB) is
decoded eight times with the collector paused, then four times while the process holds 3 million small objects,
then four times after half of those are freed.  Run with any Python 3.11: ``python decode_experiment.py``.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

ITEM: dict[str, Any] = {
    "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis",
    "metadata": {
        "name": "s-0", "namespace": "scale", "uid": "6f2a0c3e-0000-4000-8000-000000000001",
        "resourceVersion": "123456", "generation": 1, "creationTimestamp": "2026-12-07T03:00:00Z",
        "labels": {"apps.cozystack.io/application.kind": "Redis",
                   "apps.cozystack.io/application.group": "apps.cozystack.io",
                   "apps.cozystack.io/application.name": "s-0"},
        "managedFields": [{"manager": "bench", "operation": "Update", "apiVersion": "apps.cozystack.io/v1alpha1",
                           "time": "2026-12-07T03:00:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:spec": {".": {}, "f:replicas": {}, "f:size": {}}}}],
    },
    "spec": {"replicas": 2, "size": "1Gi", "authEnabled": True, "resourcesPreset": "nano", "external": False},
    "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "Progressing",
                               "message": "Reconciliation in progress", "lastTransitionTime": "2026-12-07T03:00:00Z",
                               "observedGeneration": 1}], "version": "0.1.0"},
}


def listed(count: int) -> bytes:
    items = []
    for i in range(count):
        item = json.loads(json.dumps(ITEM))
        item["metadata"]["name"] = f"s-{i}"
        item["metadata"]["uid"] = f"{i:08d}-0000-4000-8000-000000000001"
        items.append(item)
    return json.dumps({"kind": "RedisList", "items": items}, separators=(",", ":")).encode()


def decode_times(raw: bytes, times: int, what: str) -> None:
    print(what, flush=True)
    for _ in range(times):
        gc.disable()
        started = time.perf_counter()
        decoded = json.loads(raw)
        decoded_at = time.perf_counter()
        del decoded
        freed_at = time.perf_counter()
        gc.enable()
        print(f"  decode {1000 * (decoded_at - started):.0f} ms, free {1000 * (freed_at - decoded_at):.0f} ms",
              flush=True)


def main() -> None:
    raw = listed(50_000)
    decode_times(raw, 8, f"{len(raw) / 1e6:.1f} MB, a new process")
    kept = [{"k": str(i), "v": [i, i + 1]} for i in range(3_000_000)]
    decode_times(raw, 4, "holding 3 million small objects")
    del kept[::2]
    decode_times(raw, 4, "after half of them are freed")


if __name__ == "__main__":
    main()
