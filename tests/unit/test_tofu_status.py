"""Status projection and STATUS phases, checked against the realistic Terraform statuses in
``shared/reference/status`` (loaded, not copied)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tofu_agl import status as s

PLAN_ID = "plan-main-b8e362c206"
COMMAND = "kubectl annotate vpcs net -n team --overwrite tofu.apps.cozystack.io/approve-plan="

Loader = Callable[[str], Any]


def terraform(reference: Loader, phase: str, approve: str = "", **meta: Any) -> dict[str, Any]:
    """A Terraform object carrying the reference status of ``phase``."""
    return {
        "apiVersion": "infra.contrib.fluxcd.io/v1alpha2",
        "kind": "Terraform",
        "metadata": {
            "name": "vpc-net",
            "namespace": "team",
            "creationTimestamp": "2026-09-10T09:00:00Z",
            **meta,
        },
        "spec": {
            "approvePlan": approve,
            "writeOutputsToSecret": {"name": "net-outputs", "outputs": ["vpc_id"]},
        },
        "status": copy.deepcopy(reference(f"tf-status-{phase}")["status"]),
    }


def conditions(projected: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in projected["conditions"]}


def app_for(tf: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "net", "creationTimestamp": tf["metadata"]["creationTimestamp"]},
        "status": s.project_status(tf, COMMAND),
    }


# --------------------------------------------------------------------------- planning


def test_planning(reference: Loader) -> None:
    tf = terraform(reference, "planning", approve="auto")
    out = s.project_status(tf, COMMAND)
    conds = conditions(out)
    assert s.phase(tf) == "Planning"
    assert out["phase"] == "Planning"
    assert conds["Ready"]["status"] == "Unknown"
    assert conds["Ready"]["message"] == "Terraform Planning"
    assert "Planned" not in conds and "Applied" not in conds
    assert conds["AwaitingApproval"]["status"] == "False"
    assert "Reconciling" not in conds
    assert "version" not in out and "plan" not in out
    assert out["outputs"] == {"secretName": "net-outputs", "names": []}
    assert s.table_cells(app_for(tf)) == [
        "net",
        "Unknown",
        "Planning",
        "-",
        "net-outputs",
        "2026-09-10T09:00:00Z",
    ]


def test_no_status_at_all_is_planning() -> None:
    tf = {"metadata": {"name": "vpc-net"}, "spec": {"approvePlan": "auto"}}
    out = s.project_status(tf, COMMAND)
    assert out["phase"] == "Planning"
    assert [c["type"] for c in out["conditions"]] == ["AwaitingApproval"]
    assert "outputs" not in out


# --------------------------------------------------------------------------- pending


def test_pending_plan_awaits_approval_with_exact_command(reference: Loader) -> None:
    tf = terraform(reference, "pending", approve="")
    out = s.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "AwaitingApproval"
    awaiting = conds["AwaitingApproval"]
    assert awaiting["status"] == "True"
    assert awaiting["reason"] == "PlanPendingApproval"
    assert f"{COMMAND}{PLAN_ID}" in awaiting["message"]
    assert awaiting["lastTransitionTime"] == "2026-09-10T09:00:42Z"
    assert conds["Planned"]["status"] == "True"
    assert conds["Planned"]["reason"] == "TerraformPlannedWithChanges"
    assert conds["Ready"]["status"] == "Unknown"
    assert out["plan"] == {"pending": PLAN_ID}
    cells = s.table_cells(app_for(tf))
    assert cells[2:4] == ["AwaitingApproval", PLAN_ID]


def test_stale_approval_still_awaits(reference: Loader) -> None:
    tf = terraform(reference, "pending", approve="plan-main-0000000000")
    assert s.phase(tf) == "AwaitingApproval"
    assert conditions(s.project_status(tf, COMMAND))["AwaitingApproval"]["status"] == "True"


@pytest.mark.parametrize("approve", [PLAN_ID, "auto", "plan-main-b8e3"])
def test_approved_pending_plan_is_applying(reference: Loader, approve: str) -> None:
    # a non-empty prefix is what tofu-controller itself accepts, so it is applying, not awaiting
    tf = terraform(reference, "pending", approve=approve)
    out = s.project_status(tf, COMMAND)
    assert out["phase"] == "Applying"
    awaiting = conditions(out)["AwaitingApproval"]
    assert awaiting["status"] == "False"
    assert awaiting["reason"] == "PlanApproved"


def test_apply_in_progress_is_applying(reference: Loader) -> None:
    tf = terraform(reference, "pending", approve=PLAN_ID)
    tf["status"]["conditions"].append({"type": "Apply", "status": "Unknown", "reason": "Progressing"})
    tf["status"]["plan"] = {}
    assert s.phase(tf) == "Applying"
    ready_applying = terraform(reference, "planning")
    ready_applying["status"]["conditions"][1]["message"] = "Applying"
    assert s.phase(ready_applying) == "Applying"


# --------------------------------------------------------------------------- applied


def test_applied(reference: Loader) -> None:
    tf = terraform(reference, "applied", approve=PLAN_ID, generation=2)
    out = s.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "Ready"
    assert conds["Ready"] == {
        "type": "Ready",
        "status": "True",
        "reason": "TerraformOutputsWritten",
        "message": "Outputs written: main@sha1:b8e362c206e3d0cbb7ed22ced771a0056455a2fb",
        "lastTransitionTime": "2026-09-10T09:06:31Z",
    }
    assert conds["Applied"]["status"] == "True"
    assert conds["Applied"]["reason"] == "TerraformAppliedSucceed"
    assert conds["Planned"]["status"] == "True"
    assert conds["AwaitingApproval"]["status"] == "False"
    assert conds["AwaitingApproval"]["reason"] == "NoPendingPlan"
    assert "Output" not in conds
    assert out["version"] == "main@sha1:b8e362c206e3d0cbb7ed22ced771a0056455a2fb"
    assert out["plan"] == {"lastApplied": PLAN_ID}
    assert out["outputs"] == {"secretName": "net-outputs", "names": ["age_key", "subnet_ids", "vpc_id"]}
    assert "inventory" not in out
    assert s.table_cells(app_for(tf)) == ["net", "True", "Ready", "-", "net-outputs", "2026-09-10T09:00:00Z"]


def test_conditions_do_not_carry_the_terraform_generation(reference: Loader) -> None:
    out = s.project_status(terraform(reference, "applied"), COMMAND)
    assert all("observedGeneration" not in c for c in out["conditions"])


def test_ready_on_an_older_generation_is_planning(reference: Loader) -> None:
    tf = terraform(reference, "applied", generation=3)
    assert s.phase(tf) == "Planning"


def test_outputs_without_secret(reference: Loader) -> None:
    tf = terraform(reference, "applied")
    del tf["spec"]["writeOutputsToSecret"]
    out = s.project_status(tf, COMMAND)
    assert out["outputs"] == {"names": ["age_key", "subnet_ids", "vpc_id"]}
    assert s.table_cells({"metadata": {}, "status": out})[4] == ""


# --------------------------------------------------------------------------- failed / drift / deleting


def test_failed(reference: Loader) -> None:
    tf = terraform(reference, "failed", approve="auto", generation=3)
    out = s.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "Failed"
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["reason"] == "TFExecPlanFailed"
    assert conds["Stalled"] == {
        "type": "Stalled",
        "status": "True",
        "reason": "RetryLimitReached",
        "message": "Resource reached maximum number of retries.",
        "lastTransitionTime": "2026-09-10T10:16:03Z",
    }
    assert out["version"] == "main@sha1:b8e362c206e3d0cbb7ed22ced771a0056455a2fb"
    assert s.table_cells(app_for(tf))[1:3] == ["False", "Failed"]


def test_stalled_alone_is_failed(reference: Loader) -> None:
    tf = terraform(reference, "failed")
    tf["status"]["conditions"][0]["status"] = "Unknown"
    assert s.phase(tf) == "Failed"


def test_drift(reference: Loader) -> None:
    tf = terraform(reference, "applied", approve="")
    ready = tf["status"]["conditions"][0]
    ready.update(status="False", reason="DriftDetected", message="Drift detected")
    out = s.project_status(tf, COMMAND)
    assert out["phase"] == "Drifted"
    assert conditions(out)["Ready"]["reason"] == "DriftDetected"


@pytest.mark.parametrize("phase", ["planning", "pending", "applied", "failed"])
def test_deleting_wins(reference: Loader, phase: str) -> None:
    tf = terraform(reference, phase, deletionTimestamp="2026-09-10T11:00:00Z")
    assert s.phase(tf) == "Deleting"
    assert s.table_cells(app_for(tf))[2] == "Deleting"


# --------------------------------------------------------------------------- table


def test_columns() -> None:
    assert [c.name for c in s.COLUMNS] == ["NAME", "READY", "STATUS", "PLAN", "OUTPUTS", "AGE"]
    assert s.COLUMNS[-1].type == "date"
    assert s.COLUMNS[0].format == "name"


def test_table_cells_defaults() -> None:
    assert s.table_cells({"metadata": {"name": "x"}}) == ["x", "Unknown", "Planning", "-", "", None]
