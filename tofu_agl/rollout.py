"""The rollout computation: what a changed definition changes on an existing Terraform.

Pure: the reconciler reads each Terraform, asks :func:`rollout_patch` for a merge patch and
writes it.  Fields that locate an instance's state (``workspace``, ``backendConfig``) are never
patched: they would point the instance at different (usually empty) state and plan to re-create
everything.  They are reported instead, and :func:`not_rolled_out` turns that report into the
entry the reconciler lists on the definition's ``status.notRolledOut``.  They are compared with
what the definition would build for that very Terraform, per-instance state suffix included
(:func:`tofu_agl.build.state_backend_config`, with the Terraform's own name), so an instance that
already has its own state is not reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.api.patch import merge_diff
from shared.api.rollout import guarded_patch, release_label_patch
from shared.bodies import JSON

from . import approval
from .build import STATE_LOCATION, definition_fields
from .definition import TofuApplicationDefinition, TofuDefinitionView
from .names import IDENTITY_LABELS, LABEL_PREFIX, NAME_LABEL, application_name, is_application
from .project import user_entries

#: Values the Terraform CRD (v0.16.5) defaults when a field is omitted; used to compare a live
#: object with the definition without seeing phantom differences.
CRD_DEFAULTS: JSON = {
    "serviceAccountName": "tf-runner",
    "storeReadablePlan": "none",
    "workspace": "default",
    "destroyResourcesOnDeletion": False,
}
#: How an omitted field reads: its CRD default, or for approvePlan "" (both mean "manual").
_UNSET_MEANS: JSON = {**CRD_DEFAULTS, "approvePlan": ""}

#: Fields a definition change rolls out to existing instances.
ROLLOUT_FIELDS = (
    "sourceRef",
    "path",
    "interval",
    "retryInterval",
    "approvePlan",
    "destroyResourcesOnDeletion",
    "writeOutputsToSecret",
    "runnerPodTemplate",
    "serviceAccountName",
    "storeReadablePlan",
    "varsFrom",
)
#: Fields that locate an instance's state: reported when they differ, never patched.
PINNED_FIELDS = STATE_LOCATION


def rollout_patch(defn: TofuDefinitionView, backing: Mapping[str, Any], *,
                  group: str) -> tuple[JSON | None, list[str]]:
    """Merge patch bringing an existing Terraform in line with its (changed) definition.

    Returns ``(patch or None, pinned fields that differ)``: the pinned fields are never patched
    (the caller reports them on the definition's status).  ``spec.approvePlan`` is what
    :func:`tofu_agl.approval.kept_approval` decides; an instance's runner-service-account override
    is honoured only while the definition allows overrides.  The patch carries the Terraform's
    ``metadata.resourceVersion`` so it fails with 409 if the object changed since it was read; the
    caller re-reads and recomputes.  A Terraform of another kind or group (``group`` is the served
    one) yields ``(None, [])``: the reconciler re-reads a Terraform by name after a conflict, and its
    labels may have changed meanwhile.
    """
    if not is_application(backing, defn.kind, group):
        return None, []
    meta = backing.get("metadata") or {}
    live_spec = backing.get("spec") or {}
    labels = meta.get("labels") or {}
    desired = definition_fields(defn, _application_name(defn, backing), str(meta.get("namespace") or ""),
                                user_entries(meta.get("annotations")),
                                terraform_name=str(meta.get("name") or "") or None)
    desired["approvePlan"] = approval.kept_approval(defn, backing)

    spec_patch: JSON = {}
    for field in ROLLOUT_FIELDS:
        want, have = desired.get(field), live_spec.get(field)
        if _effective(field, want) != _effective(field, have):
            spec_patch[field] = None if want is None else merge_diff(have, want)
    pinned = [f for f in PINNED_FIELDS if _effective(f, desired.get(f)) != _effective(f, live_spec.get(f))]

    label_patch = release_label_patch(defn.release_labels, labels,
                                      reserved=IDENTITY_LABELS, user_prefix=LABEL_PREFIX)
    return guarded_patch(meta, spec_patch, label_patch), pinned


def not_rolled_out(defn: TofuDefinitionView, backing: Mapping[str, Any], fields: list[str]) -> JSON:
    """One ``status.notRolledOut`` entry: the Application (not the Terraform) and its kept fields."""
    return {
        "name": _application_name(defn, backing),
        "namespace": str((backing.get("metadata") or {}).get("namespace") or ""),
        "fields": sorted(fields),
    }


def _application_name(defn: TofuDefinitionView, backing: Mapping[str, Any]) -> str:
    """The Application's name: its label, which outlives a prefix change, else the Terraform's name."""
    meta = backing.get("metadata") or {}
    label = (meta.get("labels") or {}).get(NAME_LABEL)
    return str(label or application_name(defn, str(meta.get("name") or "")) or "")


def _effective(field: str, value: Any) -> Any:
    return _UNSET_MEANS.get(field) if value is None else value


def rollout_key(defn: TofuApplicationDefinition) -> tuple[object, ...]:
    """What a rollout of ``defn`` depends on: a rollout is done once per distinct key.

    Everything a Terraform takes from its definition is in the definition's spec, so the generation
    is the whole key (helm_agl's also carries annotations).
    """
    return (defn.generation,)
