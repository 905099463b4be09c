"""Projection of a tofu-controller ``Terraform`` status onto the Application's ``status``.

The user never sees the Terraform object, so everything they need to act on must be in the
Application: whether it is ready, whether a plan waits for *their* approval (and the exact command
that approves it), which revision is applied and where the outputs went.  Output *values* are
deliberately never copied: they may be secrets and already live in the outputs Secret.

This module reads only the Terraform object; it knows nothing about definitions, so the caller
passes the approval command (see :func:`project_status`).
"""

from __future__ import annotations

from typing import Any

from shared.api.rest import Column
from shared.bodies import JSON

#: Phases shown in the STATUS column, in the order they are decided by :func:`phase`.
READY = "Ready"
PLANNING = "Planning"
AWAITING_APPROVAL = "AwaitingApproval"
APPLYING = "Applying"
FAILED = "Failed"
DRIFTED = "Drifted"
DELETING = "Deleting"

#: tofu-controller's Ready reason when drift detection found changed infrastructure.
DRIFT_DETECTED_REASON = "DriftDetected"
#: tofu-controller's "approve every plan" value of ``spec.approvePlan``.
AUTO = "auto"

COLUMNS: tuple[Column, ...] = (
    Column("NAME", "string", "Name of the application", "name"),
    Column("READY", "string", "Status of the Ready condition"),
    Column("STATUS", "string", "Ready, Planning, AwaitingApproval, Applying, Failed, Drifted or Deleting"),
    Column("PLAN", "string", "Id of the plan waiting to be applied, - when none"),
    Column("OUTPUTS", "string", "Secret holding the Terraform outputs"),
    Column("AGE", "date", "Time since creation"),
)

# Terraform condition type -> Application condition type.  Plan/Apply are renamed to read as
# states of the Application ("Planned", "Applied"), the others keep their Flux meaning.
_CONDITION_MAP: tuple[tuple[str, str], ...] = (
    ("Ready", "Ready"),
    ("Plan", "Planned"),
    ("Apply", "Applied"),
    ("Stalled", "Stalled"),
)
# observedGeneration is dropped: it counts the Terraform's generations, not the Application's.
_CONDITION_FIELDS = ("status", "reason", "message", "lastTransitionTime")


def _dict(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def _conditions(tf: JSON) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for cond in _dict(tf.get("status")).get("conditions") or []:
        if isinstance(cond, dict) and isinstance(cond.get("type"), str):
            out[cond["type"]] = cond
    return out


def pending_plan(tf: JSON) -> str:
    """The id of the plan tofu-controller holds for approval, ``""`` when none."""
    pending = _dict(_dict(tf.get("status")).get("plan")).get("pending")
    return pending if isinstance(pending, str) else ""


def plan_approved(tf: JSON) -> bool:
    """Whether tofu-controller will apply the pending plan without further action.

    Mirrors the controller's own rule (force, ``auto``, or an ``approvePlan`` that is the pending
    id or a non-empty prefix of it) so the status never claims "awaiting approval" for a plan the
    controller is already applying.
    """
    spec = _dict(tf.get("spec"))
    pending = pending_plan(tf)
    if not pending:
        return False
    approve = spec.get("approvePlan") or ""
    if spec.get("force") is True or approve == AUTO:
        return True
    return bool(approve) and pending.startswith(approve)


def awaiting_approval(tf: JSON) -> bool:
    """A plan is pending and nothing approves it: only the user can move the instance on."""
    return bool(pending_plan(tf)) and not plan_approved(tf)


def phase(tf: JSON) -> str:
    """The one-word STATUS of an instance, derived from the Terraform object.

    Decided in this order, so that the most actionable state wins: being deleted; a failure
    (Ready False or Stalled) — drift reported as ``Drifted`` because the fix differs (approve the
    corrective plan); a plan waiting for the user; a plan being applied; Ready True on the current
    generation; anything else is still planning.
    """
    if _dict(tf.get("metadata")).get("deletionTimestamp"):
        return DELETING
    conds = _conditions(tf)
    ready = conds.get("Ready", {})
    if ready.get("status") == "False":
        return DRIFTED if ready.get("reason") == DRIFT_DETECTED_REASON else FAILED
    if conds.get("Stalled", {}).get("status") == "True":
        return FAILED
    if awaiting_approval(tf):
        return AWAITING_APPROVAL
    if pending_plan(tf) or conds.get("Apply", {}).get("status") == "Unknown":
        return APPLYING
    if ready.get("status") == "Unknown" and ready.get("message") == "Applying":
        return APPLYING
    if ready.get("status") == "True" and not _stale(tf):
        return READY
    return PLANNING


def _stale(tf: JSON) -> bool:
    """The controller has not yet seen the latest spec (its verdict is about an older one)."""
    generation = _dict(tf.get("metadata")).get("generation")
    observed = _dict(tf.get("status")).get("observedGeneration")
    return isinstance(generation, int) and isinstance(observed, int) and observed < generation


def _awaiting_condition(tf: JSON, approve_command: str, conds: dict[str, JSON]) -> JSON:
    pending = pending_plan(tf)
    cond: JSON = {"type": "AwaitingApproval"}
    if awaiting_approval(tf):
        cond.update(
            status="True",
            reason="PlanPendingApproval",
            message=f'Plan "{pending}" is waiting for approval; approve it with: {approve_command}{pending}',
        )
        when = conds.get("Plan", {}).get("lastTransitionTime") or _dict(tf.get("status")).get("lastPlanAt")
    else:
        cond.update(
            status="False",
            reason="PlanApproved" if pending else "NoPendingPlan",
            message=f'Plan "{pending}" is approved' if pending else "No plan is waiting for approval",
        )
        when = conds.get("Ready", {}).get("lastTransitionTime")
    if when:
        cond["lastTransitionTime"] = when
    return cond


def project_status(tf: JSON, approve_command: str) -> JSON:
    """The Application ``status`` for a Terraform object.

    ``approve_command`` is the command that approves a plan *without* the id, ending in ``=``
    (e.g. ``kubectl annotate vpcs net -n team --overwrite tofu.apps.cozystack.io/approve-plan=``);
    the pending id is appended, so the message can be copied and run as is.
    """
    tf_status = _dict(tf.get("status"))
    conds = _conditions(tf)
    conditions: list[JSON] = []
    for source, target in _CONDITION_MAP:
        if source in conds:
            copied: JSON = {"type": target}
            copied.update({k: conds[source][k] for k in _CONDITION_FIELDS if k in conds[source]})
            conditions.append(copied)
    conditions.append(_awaiting_condition(tf, approve_command, conds))

    out: JSON = {"phase": phase(tf), "conditions": conditions}
    if tf_status.get("lastAppliedRevision"):
        out["version"] = tf_status["lastAppliedRevision"]
    plan = _dict(tf_status.get("plan"))
    projected_plan = {k: plan[k] for k in ("pending", "lastApplied") if plan.get(k)}
    if projected_plan:
        out["plan"] = projected_plan
    secret = _dict(_dict(tf.get("spec")).get("writeOutputsToSecret")).get("name")
    names = tf_status.get("availableOutputs")
    if secret or names:
        outputs: JSON = {}
        if secret:
            outputs["secretName"] = secret
        outputs["names"] = list(names) if isinstance(names, list) else []
        out["outputs"] = outputs
    return out


def table_cells(app: JSON) -> list[Any]:
    """One Table row for an Application, in :data:`COLUMNS` order (AGE as the raw timestamp)."""
    meta = _dict(app.get("metadata"))
    status = _dict(app.get("status"))
    ready = "Unknown"
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = str(cond.get("status") or "Unknown")
    return [
        meta.get("name", ""),
        ready,
        status.get("phase") or PLANNING,
        _dict(status.get("plan")).get("pending") or "-",
        _dict(status.get("outputs")).get("secretName") or "",
        meta.get("creationTimestamp"),
    ]
