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
