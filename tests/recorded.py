"""The objects recorded from the real controllers under ``tests/data/status/`` (how each was recorded:
``tests/data/README.md``). Tests read them from the repository only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

#: One recorded object per file, named ``<kind>-<phase>.yaml`` (``helmrelease-installed``, ``terraform-pending``).
STATUS_DIR = Path(__file__).resolve().parent / "data" / "status"


def load_recorded(stem: str) -> Any:
    """The recorded object ``tests/data/status/<stem>.yaml``, e.g. ``load_recorded("terraform-pending")``."""
    return yaml.safe_load((STATUS_DIR / f"{stem}.yaml").read_text())


#: What a recorded Terraform keeps besides its status: what the projection and the approval rules read.
TERRAFORM_SPEC_KEPT = ("approvePlan", "vars", "writeOutputsToSecret", "storeReadablePlan", "workspace",
                       "destroyResourcesOnDeletion")
TERRAFORM_META_KEPT = ("name", "namespace", "labels", "generation", "finalizers", "deletionTimestamp")


def trimmed_terraform(terraform: dict[str, Any]) -> dict[str, Any]:
    """A live Terraform as it is recorded: identity, the spec fields read back, the whole status."""
    meta = terraform["metadata"]
    kept: dict[str, Any] = {k: meta[k] for k in TERRAFORM_META_KEPT if k in meta}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if "managed-fields" not in k}
    if annotations:
        kept["annotations"] = annotations
    return {"apiVersion": terraform["apiVersion"], "kind": terraform["kind"], "metadata": kept,
            "spec": {k: terraform["spec"][k] for k in TERRAFORM_SPEC_KEPT if k in terraform["spec"]},
            "status": terraform.get("status", {})}


def status_shape(status: dict[str, Any]) -> dict[str, Any]:
    """What must stay the same between runs: the fields present and each condition's type/status/reason."""
    return {"fields": sorted(status),
            "conditions": sorted((c["type"], c["status"], c["reason"]) for c in status.get("conditions", []))}


def record_or_check_terraform(phase: str, terraform: dict[str, Any]) -> None:
    """With ``AGL_RECORD_FLUX=1`` record ``terraform`` as ``terraform-<phase>.yaml``; otherwise check that
    tofu-controller's live status still has the recorded shape."""
    path = STATUS_DIR / f"terraform-{phase}.yaml"
    if os.environ.get("AGL_RECORD_FLUX") == "1":
        header = f"# A Terraform as tofu-controller v0.16.5 left it: {phase} (recorded by tests/flux/)\n"
        path.write_text(header + yaml.safe_dump(trimmed_terraform(terraform), sort_keys=False))
        return
    expected = yaml.safe_load(path.read_text())["status"]
    assert status_shape(terraform.get("status", {})) == status_shape(expected), \
        f"tofu-controller's {phase} status changed shape; see {path}"


#: What a recorded Event keeps: everything but the server-set bookkeeping that changes on every run.
EVENT_DROPPED = ("managedFields", "resourceVersion", "creationTimestamp")


def event_shape(event: dict[str, Any]) -> dict[str, Any]:
    """What must stay the same between runs: the fields present, who reported it, its type and reason."""
    return {"fields": sorted(k for k, v in event.items() if v not in (None, "", {})),
            "source": event.get("source"), "reportingComponent": event.get("reportingComponent"),
            "type": event.get("type"), "reason": event.get("reason")}


def record_or_check_event(name: str, event: dict[str, Any]) -> None:
    """With ``AGL_RECORD_FLUX=1`` record a controller's Event as ``event-<name>.yaml``; otherwise check that the
    live one still has the recorded shape (which Events API wrote it shows in its fields: core/v1 has ``count``
    and ``firstTimestamp``, events.k8s.io/v1 ``eventTime``)."""
    path = STATUS_DIR / f"event-{name}.yaml"
    if os.environ.get("AGL_RECORD_FLUX") == "1":
        kept = {**event, "metadata": {k: v for k, v in event["metadata"].items() if k not in EVENT_DROPPED}}
        header = f"# An Event as the real controller wrote it: {name} (recorded by tests/flux/)\n"
        path.write_text(header + yaml.safe_dump(kept, sort_keys=False, allow_unicode=True))
        return
    expected = yaml.safe_load(path.read_text())
    assert event_shape(event) == event_shape(expected), f"the controller's {name} Event changed shape; see {path}"
