"""Terraform -> Application: what a user reads back, its status, and its Table row.

The storage's reads, its watch and its write responses all project through here, so ``get``,
``list``, ``watch`` and ``kubectl get`` show the same Application for the same Terraform.

The user never sees the Terraform object, so everything they need to act on must be in the
Application: whether it is ready, whether a plan waits for *their* approval (and the exact command
that approves it), which revision is applied and where the outputs went.  Output *values* are
deliberately never copied: they may be secrets and already live in the outputs Secret.  The spec
is read back from the Terraform ``vars`` through the schema's naming, with defaults applied, so
``app -> Terraform -> app`` is the identity plus defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.api import ownership
from shared.api.fieldmanager import from_annotation
from shared.api.readiness import READY as READY_CONDITION
from shared.api.readiness import (
    RECONCILING,
    STALLED,
    BackendReport,
    Signal,
    condition_signal,
    latest_transition,
    readiness,
)
from shared.api.rest import Column
from shared.bodies import JSON
from shared.schema.defaults import apply_defaults

from .definition import TofuDefinitionView
from .names import (
    APPROVE_ANNOTATION,
    AUTO,
    CONTROLLER_FINALIZERS,
    LABEL_PREFIX,
    MANAGED_FIELDS_ANNOTATION,
    VERSION,
    application_name,
    is_application,
)
from .plan import HUMAN, JSON_PLAN, sensitive_values
from .secretvalues import guard_messages
from .variables import unmarshal_vars

#: Application metadata copied from the Terraform as it is (the server-owned fields).
COPIED_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds")

#: What the projection, the watch and the plan preview read of a Terraform's spec; the storage's
#: cache keeps only these (a Terraform's runner pod template, backend and sources are most of it).
SPEC_READ = ("vars", "approvePlan", "force", "writeOutputsToSecret", "storeReadablePlan", "workspace",
             # the Secrets it reads, whose values are masked (tofu_agl.secretvalues.secret_references)
             "varsFrom", "backendConfigsFrom", "cliConfigSecretRef")

#: Phases shown in the STATUS column, in the order they are decided by :func:`phase`.
READY = "Ready"
PLANNING = "Planning"
AWAITING_APPROVAL = "AwaitingApproval"
APPLYING = "Applying"
FAILED = "Failed"
RETRYING = "Retrying"
DRIFTED = "Drifted"
DELETING = "Deleting"

#: tofu-controller's Ready reason when drift detection found changed infrastructure.
DRIFT_DETECTED_REASON = "DriftDetected"

COLUMNS: tuple[Column, ...] = (
    Column("NAME", "string", "Name of the application", "name"),
    Column("READY", "string", "Status of the Ready condition"),
    Column("STATUS", "string", "Ready, Planning, AwaitingApproval, Applying, Retrying, Failed, Drifted or "
                               "Deleting"),
    Column("PLAN", "string", "Id of the plan waiting to be applied, - when none"),
    Column("OUTPUTS", "string", "Secret holding the Terraform outputs"),
    Column("AGE", "date", "Time since creation"),
)

# Terraform condition type -> Application condition type, copied as they are.  Plan/Apply are renamed to
# read as states of the Application ("Planned", "Applied"); Ready, Reconciling and Stalled are derived
# (:func:`backend_report`).  A condition's observedGeneration is the Application's too: its generation is
# the Terraform's.
_CONDITION_MAP: tuple[tuple[str, str], ...] = (
    ("Plan", "Planned"),
    ("Apply", "Applied"),
)
_CONDITION_FIELDS = ("status", "reason", "message", "lastTransitionTime", "observedGeneration")

CONTROLLER = "tofu-controller"

#: tofu-controller's ``Ready`` False reasons that retrying with the same inputs cannot fix, so they are
#: ``Stalled`` (kstatus ``Failed``) although tofu-controller, without ``spec.remediation``, retries them
#: forever and never writes ``Stalled`` itself.  ``TFExecPlanFailed`` is what it writes when OpenTofu
#: refuses the variables (a module's ``validation``, a wrong type: ``tests/data/status/terraform-failed.yaml``)
#: or the configuration; the Application's spec or the definition must change.  The variables or the
#: runner template cannot be generated from the spec (``VarsGenerationFailed``, ``TemplateGenerationFailed``),
#: a cross-namespace reference is refused (``AccessDenied``), or the retries ran out (``RetryLimitReached``).
#: Every other failure (the source not ready yet, a state lock held, a dependency, an apply or init that
#: failed on the way to a provider or a backend) is retried and may succeed: ``Reconciling``.  A plan
#: failure that was transient after all clears ``Stalled`` on the next successful run.
NEEDS_A_HUMAN = frozenset({
    "TFExecPlanFailed", "VarsGenerationFailed", "TemplateGenerationFailed", "AccessDenied", "RetryLimitReached",
})


def to_application(
    defn: TofuDefinitionView, backing: Mapping[str, Any], *, group: str, plan_summary: JSON | None = None,
    defaulted: bool = True, spec: JSON | None = None, secret_values: Sequence[str] | None = (),
) -> JSON | None:
    """The Application a Terraform represents, or None when it is not one of this kind.

    A Terraform without this definition's kind and group labels, or whose name lacks the prefix
    (it could not be addressed by name), is not an Application.  ``plan_summary`` is the summary
    of the pending plan (:func:`tofu_agl.plan.summary`) when the storage could read one.  With
    ``defaulted`` False, ``spec`` is the Application as stored (the variables, which carry the
    defaults applied when they were written), the object patches apply to.
    ``metadata.managedFields`` come from the service's annotation.  ``spec``, when given, is that spec
    already projected from a Terraform with the same variables (a create projects its spec once).
    """
    if not is_application(backing, defn.kind, group):
        return None
    meta = backing.get("metadata") or {}
    name = application_name(defn, str(meta.get("name") or ""))
    if name is None:
        return None
    namespace = str(meta.get("namespace") or "")
    app_meta: JSON = {"name": name, "namespace": namespace}
    for field in COPIED_METADATA:
        if meta.get(field) is not None:
            app_meta[field] = meta[field]
    labels = user_entries(meta.get("labels"))
    if labels:
        app_meta["labels"] = labels
    annotations = user_entries(meta.get("annotations"))
    if annotations:
        app_meta["annotations"] = annotations
    ownership.to_application(meta, app_meta, CONTROLLER_FINALIZERS)
    managed = from_annotation((meta.get("annotations") or {}).get(MANAGED_FIELDS_ANNOTATION))
    if managed:
        app_meta["managedFields"] = managed
    if spec is None:
        tf_vars = (backing.get("spec") or {}).get("vars")
        spec = unmarshal_vars(defn.schema, defn.terraform.variable_naming, tf_vars)
        if defaulted:
            spec = apply_defaults(defn.schema, spec)
    masks = None if secret_values is None else [*sensitive_values(defn.schema, spec), *secret_values]
    return {
        "apiVersion": f"{group}/{VERSION}",
        "kind": defn.kind,
        "metadata": app_meta,
        "spec": spec,
        "status": project_status(backing, approve_command(defn, name, namespace), plan_summary=plan_summary,
                                 review_hint=review_hint(defn, group, name, namespace), masks=masks),
    }


def user_entries(entries: Any) -> dict[str, str]:
    """The user's own labels (or annotations) among a Terraform's, without the prefix."""
    if not isinstance(entries, dict):
        return {}
    n = len(LABEL_PREFIX)
    return {k[n:]: str(v) for k, v in entries.items() if k.startswith(LABEL_PREFIX) and len(k) > n}


def approve_command(defn: TofuDefinitionView, name: str, namespace: str) -> str:
    """The approval command up to ``=``; :func:`project_status` appends the pending plan's id.

    ``--overwrite`` is included because after a first approval the annotation already exists and
    kubectl refuses to change it otherwise.
    """
    return f"kubectl annotate {defn.plural} {name} -n {namespace} --overwrite {APPROVE_ANNOTATION}="


def plan_path(defn: TofuDefinitionView, group: str, name: str, namespace: str) -> str:
    """The URL of an Application's readable plan (the read-only ``plan`` subresource)."""
    return f"/apis/{group}/{VERSION}/namespaces/{namespace}/{defn.plural}/{name}/plan"


def review_hint(defn: TofuDefinitionView, group: str, name: str, namespace: str) -> str:
    """How to read a pending plan before approving it; empty when the definition keeps no readable plan."""
    if defn.terraform.store_readable_plan not in (HUMAN, JSON_PLAN):
        return ""
    return (f"review its summary in status.plan.summary (kubectl describe {defn.plural} {name} -n {namespace}) "
            f"and the whole plan with: kubectl get --raw {plan_path(defn, group, name, namespace)}; ")


def _conditions(tf: Mapping[str, Any]) -> dict[str, JSON]:
    out: dict[str, JSON] = {}
    for cond in (tf.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and isinstance(cond.get("type"), str):
            out[cond["type"]] = cond
    return out


def pending_plan(tf: Mapping[str, Any]) -> str:
    """The id of the plan tofu-controller holds for approval, ``""`` when none."""
    pending = ((tf.get("status") or {}).get("plan") or {}).get("pending")
    return pending if isinstance(pending, str) else ""


def plan_approved(tf: Mapping[str, Any]) -> bool:
    """Whether tofu-controller will apply the pending plan without further action.

    Mirrors the controller's own rule (force, ``auto``, or an ``approvePlan`` that is the pending
    id or a non-empty prefix of it) so the status never claims "awaiting approval" for a plan the
    controller is already applying.
    """
    return _approves(tf.get("spec") or {}, pending_plan(tf))


def _approves(spec: Mapping[str, Any], pending: str) -> bool:
    approve = spec.get("approvePlan") or ""
    return bool(pending) and (spec.get("force") is True or approve == AUTO
                              or (bool(approve) and pending.startswith(approve)))


def awaiting_approval(tf: Mapping[str, Any]) -> bool:
    """A plan is pending and nothing approves it: only the user can move the instance on."""
    pending = pending_plan(tf)
    return bool(pending) and not _approves(tf.get("spec") or {}, pending)


@dataclass(frozen=True, slots=True)
class _Reading:
    """What the phase, the kstatus report and the approval condition read of a Terraform, read once."""
    conds: dict[str, JSON]
    pending: str
    awaiting: bool
    deleting: bool


def _reading(tf: Mapping[str, Any]) -> _Reading:
    pending = pending_plan(tf)
    return _Reading(conds=_conditions(tf), pending=pending,
                    awaiting=bool(pending) and not _approves(tf.get("spec") or {}, pending),
                    deleting=bool((tf.get("metadata") or {}).get("deletionTimestamp")))


def phase(tf: Mapping[str, Any], reading: _Reading | None = None) -> str:
    """The one-word STATUS of an instance, derived from the Terraform object.

    Decided in this order, so that the most actionable state wins: being deleted; a failure
    (Ready False or Stalled) — drift reported as ``Drifted`` because the fix differs (approve the
    corrective plan), one that tofu-controller's next attempt may fix (a reason not in
    :data:`NEEDS_A_HUMAN`, e.g. the module's source not ready yet) as ``Retrying``, as kstatus reads it
    in progress; a plan waiting for the user; a plan being applied; Ready True on the current
    generation; anything else is still planning.
    """
    read = reading or _reading(tf)
    if read.deleting:
        return DELETING
    conds = read.conds
    ready = conds.get("Ready", {})
    if ready.get("status") == "False":
        if ready.get("reason") == DRIFT_DETECTED_REASON:
            return DRIFTED
        return FAILED if ready.get("reason") in NEEDS_A_HUMAN else RETRYING
    if conds.get("Stalled", {}).get("status") == "True":
        return FAILED
    if read.awaiting:
        return AWAITING_APPROVAL
    if read.pending or conds.get("Apply", {}).get("status") == "Unknown":
        return APPLYING
    if ready.get("status") == "Unknown" and ready.get("message") == "Applying":
        return APPLYING
    if ready.get("status") == "True" and not _stale(tf):
        return READY
    return PLANNING


def _stale(tf: Mapping[str, Any]) -> bool:
    """The controller has not yet seen the latest spec (its verdict is about an older one)."""
    generation = (tf.get("metadata") or {}).get("generation")
    observed = (tf.get("status") or {}).get("observedGeneration")
    return isinstance(generation, int) and isinstance(observed, int) and observed < generation


def _awaiting_condition(tf: Mapping[str, Any], approve_command: str, review_hint: str, read: _Reading) -> JSON:
    pending, conds = read.pending, read.conds
    cond: JSON = {"type": "AwaitingApproval"}
    if read.awaiting:
        cond.update(
            status="True",
            reason="PlanPendingApproval",
            message=f'Plan "{pending}" is waiting for approval; {review_hint}'
            f"approve it with: {approval_command(tf, approve_command, pending)}",
        )
        when = conds.get("Plan", {}).get("lastTransitionTime") or (tf.get("status") or {}).get("lastPlanAt")
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


def approval_command(tf: Mapping[str, Any], approve_command: str, pending: str) -> str:
    """The command that approves ``pending`` on the Application of ``tf``, ready to copy.

    Usually ``approve_command`` with the id.  When the annotation already holds that id (tofu-controller
    gave a variables-only replan the id of the plan approved before), setting it again would change
    nothing, so the command first removes the annotation (``...approve-plan-``) and then sets it.
    """
    recorded = ((tf.get("metadata") or {}).get("annotations") or {}).get(LABEL_PREFIX + APPROVE_ANNOTATION)
    command = f"{approve_command}{pending}"
    if recorded != pending:
        return command
    return f"{approve_command.removesuffix('=')}- && {command}"


def project_status(backing: Mapping[str, Any], approve_command: str, *, plan_summary: JSON | None = None,
                   review_hint: str = "", masks: Sequence[str] | None = ()) -> JSON:
    """The Application ``status`` for the Terraform ``backing``.

    ``approve_command`` is the command that approves a plan *without* the id, ending in ``=``
    (e.g. ``kubectl annotate vpcs net -n team --overwrite tofu.apps.cozystack.io/approve-plan=``);
    the pending id is appended, so the message can be copied and run as is.  ``review_hint``
    (:func:`review_hint`) tells where to read the plan first; ``plan_summary`` becomes
    ``status.plan.summary`` while a plan is pending.  ``masks`` are the secret values to keep out of
    tofu-controller's messages (None: not all known yet; see :func:`secretvalues.guard_messages`).
    """
    tf_status = backing.get("status") or {}
    meta = backing.get("metadata") or {}
    read = _reading(backing)
    conds = read.conds
    awaiting = _awaiting_condition(backing, approve_command, review_hint, read)
    generation = meta.get("generation")
    derived = readiness(generation if isinstance(generation, int) else None, backend_report(backing, awaiting, read),
                        since=latest_transition(tf_status.get("conditions"), meta.get("creationTimestamp")))
    conditions: list[JSON] = [dict(c) for c in derived.conditions]
    for source, target in _CONDITION_MAP:
        if source in conds:
            copied: JSON = {"type": target}
            copied.update({k: conds[source][k] for k in _CONDITION_FIELDS if k in conds[source]})
            conditions.append(copied)
    conditions.append(awaiting)
    guard_messages(conditions, tf_status.get("conditions"), masks)

    out: JSON = {"phase": phase(backing, read), "conditions": conditions}
    if derived.observed_generation is not None:
        out["observedGeneration"] = derived.observed_generation
    if tf_status.get("lastAppliedRevision"):
        out["version"] = tf_status["lastAppliedRevision"]
    plan = tf_status.get("plan") or {}
    projected_plan = {k: plan[k] for k in ("pending", "lastApplied") if plan.get(k)}
    if plan_summary is not None and projected_plan.get("pending"):
        projected_plan["summary"] = plan_summary
    if projected_plan:
        out["plan"] = projected_plan
    secret = ((backing.get("spec") or {}).get("writeOutputsToSecret") or {}).get("name")
    names = tf_status.get("availableOutputs")
    if secret or names:
        outputs: JSON = {}
        if secret:
            outputs["secretName"] = secret
        outputs["names"] = list(names) if isinstance(names, list) else []
        out["outputs"] = outputs
    return out


def backend_report(tf: Mapping[str, Any], awaiting: Mapping[str, Any], reading: _Reading | None = None
                   ) -> BackendReport:
    """tofu-controller's state in kstatus' terms, decided in :func:`phase`'s order.

    Being deleted is work in progress (kstatus says ``Terminating`` first anyway).  A ``Ready`` False is
    ``Stalled`` when it needs a human (:data:`NEEDS_A_HUMAN`; drift on a kind whose plans a human approves,
    since tofu-controller then waits for them instead of repairing it) and otherwise ``Reconciling``: it is
    retried every ``retryInterval``.  tofu-controller's own ``Stalled`` is kept.  A plan waiting for the user
    is ``Reconciling`` with reason ``AwaitingApproval`` and the command that approves it (``awaiting``'s
    message), not a failure: the instance moves on once approved.  A plan being applied, and
    tofu-controller's own ``Reconciling``, are ``Reconciling``.
    """
    read = reading or _reading(tf)
    conds = read.conds
    observed = (tf.get("status") or {}).get("observedGeneration")
    ready = conds.get(READY_CONDITION)
    reconciling: Signal | None = None
    stalled: Signal | None = None
    failure = _failure(ready) if ready is not None and ready.get("status") == "False" else None
    if read.deleting:
        reconciling = Signal("Deleting", f"{CONTROLLER} is running the destroy and removing the instance")
    elif failure is not None:
        drift_repaired = failure.reason == DRIFT_DETECTED_REASON and _approves_itself(tf)
        if failure.reason in NEEDS_A_HUMAN or (failure.reason == DRIFT_DETECTED_REASON and not drift_repaired):
            stalled = failure
        else:
            reconciling = failure
    elif (own_stall := condition_signal(conds.get(STALLED))) is not None:
        stalled = own_stall
    elif read.awaiting:
        reconciling = Signal("AwaitingApproval", str(awaiting.get("message") or ""),
                             awaiting.get("lastTransitionTime") if isinstance(awaiting.get("lastTransitionTime"),
                                                                              str) else None)
    elif phase(tf, read) == APPLYING:
        pending = read.pending
        reconciling = Signal("Applying", f'{CONTROLLER} is applying plan "{pending}"' if pending
                             else f"{CONTROLLER} is applying the approved plan")
    else:
        reconciling = condition_signal(conds.get(RECONCILING))
    return BackendReport(
        controller=CONTROLLER,
        observed_generation=observed if isinstance(observed, int) and not isinstance(observed, bool) else None,
        ready=_as_ready(ready), reconciling=reconciling, stalled=stalled)


def _failure(ready: Mapping[str, Any]) -> Signal:
    when = ready.get("lastTransitionTime")
    return Signal(str(ready.get("reason") or "Failed"), str(ready.get("message") or ""),
                  when if isinstance(when, str) else None)


def _approves_itself(tf: Mapping[str, Any]) -> bool:
    """Plans of ``tf`` are applied without a human (``approvePlan: auto`` or ``force``)."""
    spec = tf.get("spec") or {}
    return spec.get("force") is True or spec.get("approvePlan") == AUTO


def _as_ready(ready: Mapping[str, Any] | None) -> JSON | None:
    """tofu-controller's ``Ready`` with the fields an Application's condition carries."""
    if ready is None:
        return None
    return {"type": READY_CONDITION, **{k: ready[k] for k in _CONDITION_FIELDS if k in ready}}


def table_cells(app: Mapping[str, Any]) -> list[Any]:
    """One Table row for an Application, in :data:`COLUMNS` order (AGE as the raw timestamp)."""
    meta = app.get("metadata") or {}
    status = app.get("status") or {}
    ready = "Unknown"
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            ready = str(cond.get("status") or "Unknown")
    return [
        meta.get("name", ""),
        ready,
        status.get("phase") or PLANNING,
        (status.get("plan") or {}).get("pending") or "-",
        (status.get("outputs") or {}).get("secretName") or "",
        meta.get("creationTimestamp"),
    ]
