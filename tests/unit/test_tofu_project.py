"""Terraform -> Application: metadata and spec read back, and the status projection and STATUS
phases, checked against the Terraform objects recorded from the real tofu-controller in
``tests/data/status/terraform-<phase>.yaml``.  Every expected value is read from the recording
(loaded, not copied); the few statuses no recording holds are derived from one, in the open."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from tests.unit.tofu_samples import GROUP, RECORDED_PENDING, SCHEMA, Defn, app, defn
from tofu_agl import plan, project
from tofu_agl.build import build
from tofu_agl.definition import TofuApplicationDefinition, TofuDefinitionView
from tofu_agl.names import RUNNER_SA_ANNOTATION
from tofu_agl.project import to_application
from tofu_agl.rollout import rollout_patch
from tofu_agl.validate import validate_application

PLAN_ID = RECORDED_PENDING
COMMAND = "kubectl annotate vpcs net -n team --overwrite tofu.apps.cozystack.io/approve-plan="
#: The recorded phases (``tests/data/status/terraform-<phase>.yaml``).
PHASES = ("planning", "pending", "applied", "failed", "drifted", "deleting")

Loader = Callable[[str], Any]


def terraform(reference: Loader, phase: str, approve: str | None = None, **meta: Any) -> dict[str, Any]:
    """The Terraform of Application ``net`` as tofu-controller recorded it in ``phase``.

    Kept from the recording: ``metadata.generation`` (and ``deletionTimestamp``), the outputs Secret, and
    the whole status.  ``approve`` replaces the recorded ``spec.approvePlan``; ``meta`` adds or overrides
    metadata.  The name and creationTimestamp are the test's own (the recordings keep neither of use here).
    """
    recorded = copy.deepcopy(reference(f"terraform-{phase}"))
    kept = {k: recorded["metadata"][k] for k in ("generation", "deletionTimestamp") if k in recorded["metadata"]}
    return {
        "apiVersion": recorded["apiVersion"],
        "kind": recorded["kind"],
        "metadata": {
            "name": "vpc-net",
            "namespace": "team",
            "creationTimestamp": "2026-09-10T09:00:00Z",
            **kept,
            **meta,
        },
        "spec": {
            "approvePlan": recorded["spec"]["approvePlan"] if approve is None else approve,
            "writeOutputsToSecret": recorded["spec"]["writeOutputsToSecret"],
        },
        "status": recorded["status"],
    }


def recorded_condition(tf: dict[str, Any], type_: str) -> dict[str, Any]:
    """The condition ``type_`` tofu-controller wrote on ``tf``."""
    found: dict[str, Any] = next(c for c in tf["status"]["conditions"] if c["type"] == type_)
    return found


def recorded_types(tf: dict[str, Any]) -> set[str]:
    return {c["type"] for c in tf["status"].get("conditions") or []}


def shown_as(condition: dict[str, Any], type_: str) -> dict[str, Any]:
    """A recorded ``condition`` as the Application shows it: named ``type_``, its observedGeneration kept
    (the Application's generation is the Terraform's)."""
    return {**condition, "type": type_}


def kstatus_view(projected: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """(status, reason) of the projected Ready, Reconciling and Stalled conditions."""
    conds = conditions(projected)
    return {t: (conds[t]["status"], conds[t]["reason"]) for t in ("Ready", "Reconciling", "Stalled")}


def secret_name(tf: dict[str, Any]) -> str:
    return str(tf["spec"]["writeOutputsToSecret"]["name"])


def nothing_awaits(ready: dict[str, Any]) -> dict[str, Any]:
    """The AwaitingApproval condition shown while no plan is pending, dated by the recorded ``ready``."""
    return {"type": "AwaitingApproval", "status": "False", "reason": "NoPendingPlan",
            "message": "No plan is waiting for approval", "lastTransitionTime": ready["lastTransitionTime"]}


def conditions(projected: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in projected["conditions"]}


def app_for(tf: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "net", "creationTimestamp": tf["metadata"]["creationTimestamp"]},
        "status": project.project_status(tf, COMMAND),
    }


def stalled(tf: dict[str, Any]) -> dict[str, Any]:
    """``tf`` (a recorded failure) once its retries ran out: DERIVED, no recording holds it.

    tofu-controller adds this ``Stalled`` condition only when ``status.reconciliationFailures`` passes
    ``spec.remediation.retries``; tofu_agl's Terraforms set no remediation and are retried forever, so
    the real controller never wrote one for the recordings.  Type, status, reason and message are the ones
    tofu-controller v0.16.5 sets for it; time and generation are taken from the recorded Ready condition.
    """
    ready = recorded_condition(tf, "Ready")
    tf["status"]["conditions"].append({
        "type": "Stalled",
        "status": "True",
        "reason": "RetryLimitReached",
        "message": "Resource reached maximum number of retries.",
        "lastTransitionTime": ready["lastTransitionTime"],
        "observedGeneration": ready["observedGeneration"],
    })
    return tf


# --------------------------------------------------------------------------- planning


def test_planning(reference: Loader) -> None:
    tf = terraform(reference, "planning", approve="auto")
    ready = recorded_condition(tf, "Ready")
    # tofu-controller's Reconciling condition (reason Progressing) and its -1 say it is working on it
    assert "Reconciling" in recorded_types(tf)
    out = project.project_status(tf, COMMAND)
    conds = conditions(out)
    assert project.phase(tf) == "Planning"
    assert out["phase"] == "Planning"
    assert conds["Ready"] == shown_as(ready, "Ready")
    assert set(conds) == {"Ready", "Reconciling", "Stalled", "AwaitingApproval"}  # no Planned/Applied yet
    assert out["observedGeneration"] == tf["status"]["observedGeneration"] == -1
    assert kstatus_view(out)["Reconciling"] == ("True", recorded_condition(tf, "Reconciling")["reason"])
    assert conds["Stalled"]["status"] == "False"
    assert conds["AwaitingApproval"] == nothing_awaits(ready)
    assert "version" not in out and "plan" not in out
    assert out["outputs"] == {"secretName": secret_name(tf), "names": []}
    assert project.table_cells(app_for(tf)) == [
        "net",
        ready["status"],
        "Planning",
        "-",
        secret_name(tf),
        tf["metadata"]["creationTimestamp"],
    ]


def test_no_status_at_all_is_planning() -> None:
    tf = {"metadata": {"name": "vpc-net"}, "spec": {"approvePlan": "auto"}}
    out = project.project_status(tf, COMMAND)
    assert out["phase"] == "Planning"
    assert [c["type"] for c in out["conditions"]] == ["Ready", "Reconciling", "Stalled", "AwaitingApproval"]
    # nothing observed yet: no observedGeneration, and Reconciling True so that kstatus says InProgress
    assert "observedGeneration" not in out
    assert kstatus_view(out) == {"Ready": ("Unknown", "LatestGenerationNotObserved"),
                                 "Reconciling": ("True", "LatestGenerationNotObserved"),
                                 "Stalled": ("False", "NotStalled")}
    assert "tofu-controller" in conditions(out)["Reconciling"]["message"]
    assert "outputs" not in out


# --------------------------------------------------------------------------- pending


def test_pending_plan_awaits_approval_with_exact_command(reference: Loader) -> None:
    tf = terraform(reference, "pending", approve="")
    pending = tf["status"]["plan"]["pending"]
    planned = recorded_condition(tf, "Plan")
    assert "Reconciling" in recorded_types(tf)
    out = project.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "AwaitingApproval"
    awaiting = conds["AwaitingApproval"]
    assert awaiting["status"] == "True"
    assert awaiting["reason"] == "PlanPendingApproval"
    assert f"{COMMAND}{pending}" in awaiting["message"]
    assert awaiting["lastTransitionTime"] == planned["lastTransitionTime"]  # since the plan was made
    assert conds["Planned"] == shown_as(planned, "Planned")
    assert conds["Ready"] == shown_as(recorded_condition(tf, "Ready"), "Ready")
    # waiting for the user is work in progress, not a failure; the message is the one to act on
    assert kstatus_view(out)["Reconciling"] == ("True", "AwaitingApproval")
    assert conds["Reconciling"]["message"] == awaiting["message"]
    assert conds["Stalled"]["status"] == "False"
    assert out["plan"] == {"pending": pending}
    cells = project.table_cells(app_for(tf))
    assert cells[2:4] == ["AwaitingApproval", pending]


def test_stale_approval_still_awaits(reference: Loader) -> None:
    tf = terraform(reference, "pending", approve="plan-main-0000000000")
    assert tf["spec"]["approvePlan"] != tf["status"]["plan"]["pending"]
    assert project.phase(tf) == "AwaitingApproval"
    assert conditions(project.project_status(tf, COMMAND))["AwaitingApproval"]["status"] == "True"


@pytest.mark.parametrize("approve", [PLAN_ID, "auto", PLAN_ID[:-6]], ids=["id", "auto", "prefix"])
def test_approved_pending_plan_is_applying(reference: Loader, approve: str) -> None:
    # a non-empty prefix is what tofu-controller itself accepts, so it is applying, not awaiting
    tf = terraform(reference, "pending", approve=approve)
    out = project.project_status(tf, COMMAND)
    assert out["phase"] == "Applying"
    awaiting = conditions(out)["AwaitingApproval"]
    assert awaiting["status"] == "False"
    assert awaiting["reason"] == "PlanApproved"
    assert kstatus_view(out)["Reconciling"] == ("True", "Applying")
    assert PLAN_ID in conditions(out)["Reconciling"]["message"]


def test_apply_in_progress_is_applying(reference: Loader) -> None:
    # DERIVED from the pending recording (none was recorded mid-apply, which lasts a moment): the plan
    # approved and taken off status.plan, an Apply condition still Unknown.
    tf = terraform(reference, "pending", approve=PLAN_ID)
    tf["status"]["conditions"].append({"type": "Apply", "status": "Unknown", "reason": "Progressing"})
    tf["status"]["plan"] = {}
    assert project.phase(tf) == "Applying"
    # DERIVED from the planning recording: tofu-controller marks Ready Unknown with the message "Applying"
    # just before it runs the apply (TerraformProgressing), a moment no recording caught.
    ready_applying = terraform(reference, "planning")
    recorded_condition(ready_applying, "Ready")["message"] = "Applying"
    assert project.phase(ready_applying) == "Applying"


# --------------------------------------------------------------------------- applied


def test_applied(reference: Loader) -> None:
    recorded_status = reference("terraform-applied")["status"]
    # approved by hand: approvePlan still names the plan it applied
    tf = terraform(reference, "applied", approve=recorded_status["plan"]["lastApplied"])
    status = tf["status"]
    assert tf["metadata"]["generation"] == status["observedGeneration"]  # the verdict is on the current spec
    ready = recorded_condition(tf, "Ready")
    out = project.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "Ready"
    assert conds["Ready"] == shown_as(ready, "Ready")
    assert conds["Applied"] == shown_as(recorded_condition(tf, "Apply"), "Applied")
    assert conds["Planned"] == shown_as(recorded_condition(tf, "Plan"), "Planned")
    assert conds["AwaitingApproval"] == nothing_awaits(ready)
    # tofu-controller's Output condition is not shown: outputs are status.outputs
    assert "Output" in recorded_types(tf) and "Output" not in conds
    assert set(conds) == {"Ready", "Reconciling", "Stalled", "Applied", "Planned", "AwaitingApproval"}
    assert out["observedGeneration"] == status["observedGeneration"]
    assert kstatus_view(out) == {"Ready": ("True", ready["reason"]), "Reconciling": ("False", "Succeeded"),
                                 "Stalled": ("False", "NotStalled")}
    assert out["version"] == status["lastAppliedRevision"]
    assert out["plan"] == {"lastApplied": status["plan"]["lastApplied"]}
    assert out["outputs"] == {"secretName": secret_name(tf), "names": status["availableOutputs"]}
    assert "inventory" not in out
    assert project.table_cells(app_for(tf)) == [
        "net", ready["status"], "Ready", "-", secret_name(tf), tf["metadata"]["creationTimestamp"],
    ]


@pytest.mark.parametrize("phase", PHASES)
def test_conditions_carry_the_generation_they_describe(reference: Loader, phase: str) -> None:
    """The Application's generation is the Terraform's, so tofu-controller's per-condition observedGeneration
    is kept (``kubectl wait --for=condition=Ready`` compares it with metadata.generation)."""
    tf = terraform(reference, phase)
    recorded = {c["type"]: c["observedGeneration"] for c in tf["status"].get("conditions") or []}
    out = project.project_status(tf, COMMAND)
    copied = {"Planned": "Plan", "Applied": "Apply"}
    for cond in out["conditions"]:
        if cond["type"] in copied and copied[cond["type"]] in recorded:
            assert cond["observedGeneration"] == recorded[copied[cond["type"]]]


def test_ready_on_an_older_generation_is_planning(reference: Loader) -> None:
    observed = reference("terraform-applied")["status"]["observedGeneration"]
    tf = terraform(reference, "applied", generation=observed + 1)
    assert project.phase(tf) == "Planning"
    out = project.project_status(tf, COMMAND)
    # the Ready True is about the older generation: not Ready for this one, and work in progress
    assert out["observedGeneration"] == observed
    assert kstatus_view(out) == {"Ready": ("Unknown", "LatestGenerationNotObserved"),
                                 "Reconciling": ("True", "LatestGenerationNotObserved"),
                                 "Stalled": ("False", "NotStalled")}


def test_outputs_without_secret(reference: Loader) -> None:
    tf = terraform(reference, "applied")
    del tf["spec"]["writeOutputsToSecret"]
    out = project.project_status(tf, COMMAND)
    assert out["outputs"] == {"names": tf["status"]["availableOutputs"]}
    assert project.table_cells({"metadata": {}, "status": out})[4] == ""


# --------------------------------------------------------------------------- failed / drift / deleting


def test_failed(reference: Loader) -> None:
    # A failed plan as tofu-controller leaves a Terraform of tofu_agl: Ready False and nothing else,
    # since without spec.remediation it retries forever and never marks it Stalled.  OpenTofu refused a
    # variable: only a changed spec helps, so the Application is Stalled (project.NEEDS_A_HUMAN).
    tf = terraform(reference, "failed", approve="auto")
    ready = recorded_condition(tf, "Ready")
    assert ready["status"] == "False"
    out = project.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "Failed"
    assert conds["Ready"] == shown_as(ready, "Ready")  # OpenTofu's error, word for word
    assert set(conds) == {"Ready", "Reconciling", "Stalled", "AwaitingApproval"}
    assert kstatus_view(out)["Stalled"] == ("True", "TFExecPlanFailed")
    assert conds["Stalled"]["message"] == ready["message"]
    assert conds["Reconciling"]["status"] == "False"
    # nothing was ever applied: no version, no outputs yet
    assert "lastAppliedRevision" not in tf["status"] and "version" not in out
    assert out["outputs"] == {"secretName": secret_name(tf), "names": []}
    assert project.table_cells(app_for(tf))[1:3] == [ready["status"], "Failed"]


def _leaking(reference: Loader, value: str) -> dict[str, Any]:
    """The failed recording with OpenTofu's diagnostic printing ``value`` in clear, as it does for a variable the
    module does not mark sensitive (tests/data/modules/redaction shows it for real in the flux tier)."""
    tf = terraform(reference, "failed", approve="auto")
    ready = recorded_condition(tf, "Ready")
    ready["message"] = f'{ready["message"]}\n\nvar.token is "{value}"; and bare: {value}'
    return tf


def test_tofu_controllers_messages_are_masked_with_the_secret_values(reference: Loader) -> None:
    secret = "leak-a-long-secret-value"
    out = project.project_status(_leaking(reference, secret), COMMAND, masks=[secret])
    texts = json.dumps(out)
    assert secret not in texts
    conds = conditions(out)
    for type_ in ("Ready", "Stalled"):  # Stalled repeats Ready's words
        assert conds[type_]["message"].endswith(f"var.token is {plan.REDACTED}; and bare: {plan.REDACTED}")
        assert "size must be between 1 and 10." in conds[type_]["message"]  # the rest still tells what failed
    assert conds["AwaitingApproval"] == conditions(project.project_status(_leaking(reference, secret), COMMAND))[
        "AwaitingApproval"]  # the service's own words are left alone


def test_a_message_is_withheld_until_the_secret_values_are_known_or_when_one_cannot_be_masked(
        reference: Loader) -> None:
    secret = "leak-a-long-secret-value"
    unknown = conditions(project.project_status(_leaking(reference, secret), COMMAND, masks=None))
    short = conditions(project.project_status(_leaking(reference, "ab1"), COMMAND, masks=["ab1"]))
    for conds, why in ((unknown, "not read yet"), (short, "too short to mask")):
        for type_ in ("Ready", "Stalled"):
            assert conds[type_]["message"].startswith("tofu-controller's message is withheld") and \
                why in conds[type_]["message"], conds[type_]
        assert "approve" in conds["AwaitingApproval"]["message"] or conds["AwaitingApproval"]["reason"]
    assert secret not in json.dumps(unknown)


def test_the_sensitive_spec_values_are_masked_in_the_status_without_any_secret(reference: Loader) -> None:
    d = replace(defn(), schema={**SCHEMA, "properties": {**SCHEMA["properties"],
                                                        "token": {"type": "string", "x-cozystack-sensitive": True}}})
    tf = build(d, app(spec={"cidrBlock": "10.0.0.0/16", "token": "leak-from-the-spec-1234"}), group=GROUP)
    tf["status"] = _leaking(reference, "leak-from-the-spec-1234")["status"]
    shown = to_application(d, tf, group=GROUP)
    assert shown is not None and shown["spec"].get("token") == "leak-from-the-spec-1234"
    assert "leak-from-the-spec-1234" not in json.dumps(shown["status"])


def test_stalled_is_shown_and_failed(reference: Loader) -> None:
    tf = stalled(terraform(reference, "failed", approve="auto"))
    out = project.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "Failed"
    assert kstatus_view(out)["Stalled"] == ("True", "TFExecPlanFailed")  # Ready's failure, decided first
    assert conds["Ready"] == shown_as(recorded_condition(tf, "Ready"), "Ready")


def test_stalled_alone_is_failed(reference: Loader) -> None:
    # DERIVED twice over (see stalled()): Stalled True while Ready is not False, to show Stalled alone decides
    tf = stalled(terraform(reference, "failed"))
    recorded_condition(tf, "Ready")["status"] = "Unknown"
    assert project.phase(tf) == "Failed"
    out = project.project_status(tf, COMMAND)
    # tofu-controller's own Stalled is kept; Ready reads False with its words, as kstatus reads Failed
    assert kstatus_view(out) == {"Ready": ("False", "RetryLimitReached"), "Reconciling": ("False", "Stalled"),
                                 "Stalled": ("True", "RetryLimitReached")}


def test_a_failure_a_retry_may_fix_is_in_progress(reference: Loader) -> None:
    # DERIVED from the failed recording: the same Ready False with a reason tofu-controller writes when the
    # module's source is not ready yet; it retries every retryInterval, so no human is needed yet.
    tf = terraform(reference, "failed", approve="auto")
    recorded_condition(tf, "Ready")["reason"] = "ArtifactFailed"
    out = project.project_status(tf, COMMAND)
    assert out["phase"] == "Retrying"  # STATUS agrees with kstatus: in progress, not Failed
    assert kstatus_view(out)["Reconciling"] == ("True", "ArtifactFailed")
    assert kstatus_view(out)["Stalled"][0] == "False"


def test_drift(reference: Loader) -> None:
    tf = terraform(reference, "drifted")
    ready = recorded_condition(tf, "Ready")
    assert ready["reason"] == project.DRIFT_DETECTED_REASON  # the reason tofu-controller really writes
    assert not tf["status"].get("plan", {}).get("pending")
    out = project.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "Drifted"
    assert conds["Ready"] == shown_as(ready, "Ready")  # the corrective plan, as tofu-controller printed it
    assert conds["AwaitingApproval"]["reason"] == "NoPendingPlan"
    assert out["version"] == tf["status"]["lastAppliedRevision"]
    assert project.table_cells(app_for(tf))[1:3] == [ready["status"], "Drifted"]
    # plans of this kind are approved by hand: tofu-controller waits for a human instead of repairing it
    assert tf["spec"]["approvePlan"] != "auto"
    assert kstatus_view(out)["Stalled"] == ("True", "DriftDetected")
    assert conds["Reconciling"]["status"] == "False"


def test_drift_on_an_auto_approved_kind_is_repaired(reference: Loader) -> None:
    tf = terraform(reference, "drifted", approve="auto")
    out = project.project_status(tf, COMMAND)
    assert out["phase"] == "Drifted"
    assert kstatus_view(out)["Reconciling"] == ("True", "DriftDetected")
    assert kstatus_view(out)["Stalled"][0] == "False"


def test_deleting(reference: Loader) -> None:
    tf = terraform(reference, "deleting")
    assert tf["metadata"]["deletionTimestamp"]
    assert "Reconciling" in recorded_types(tf)
    out = project.project_status(tf, COMMAND)
    conds = conditions(out)
    assert out["phase"] == "Deleting"
    assert conds["Ready"] == shown_as(recorded_condition(tf, "Ready"), "Ready")
    assert kstatus_view(out)["Reconciling"] == ("True", "Deleting")
    assert "Output" not in conds
    assert project.table_cells(app_for(tf))[2] == "Deleting"


@pytest.mark.parametrize("phase", [p for p in PHASES if p != "deleting"])
def test_deleting_wins(reference: Loader, phase: str) -> None:
    deleted_at = reference("terraform-deleting")["metadata"]["deletionTimestamp"]
    tf = terraform(reference, phase, deletionTimestamp=deleted_at)
    assert project.phase(tf) == "Deleting"
    assert project.table_cells(app_for(tf))[2] == "Deleting"


# --------------------------------------------------------------------------- table


def test_columns() -> None:
    assert [c.name for c in project.COLUMNS] == ["NAME", "READY", "STATUS", "PLAN", "OUTPUTS", "AGE"]
    assert project.COLUMNS[-1].type == "date"
    assert project.COLUMNS[0].format == "name"


def test_table_cells_defaults() -> None:
    assert project.table_cells({"metadata": {"name": "x"}}) == ["x", "Unknown", "Planning", "-", "", None]

# --------------------------------------------------------------------------- Terraform -> Application


def test_to_application_reads_back_metadata_and_generation() -> None:
    d = Defn()
    tf = build(d, app(labels={"team": "a"}, annotations={"note": "x"}), group=GROUP)
    tf["metadata"].update(
        uid="u-1",
        resourceVersion="42",
        creationTimestamp="2026-09-10T09:00:00Z",
        deletionTimestamp="2026-09-10T10:00:00Z",
        generation=3,
        finalizers=["finalizers.tf.contrib.fluxcd.io"],
    )
    tf["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = "other"
    out = to_application(d, tf, group=GROUP)
    assert out is not None
    assert out["apiVersion"] == f"{GROUP}/v1alpha1"
    assert out["kind"] == "VPC"
    assert out["metadata"] == {
        "name": "net",
        "namespace": "team",
        "uid": "u-1",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2026-09-10T09:00:00Z",
        "deletionTimestamp": "2026-09-10T10:00:00Z",
        "labels": {"team": "a"},
        "annotations": {"note": "x"},
    }
    assert out["status"]["phase"] == "Deleting"


def test_to_application_ignores_foreign_objects() -> None:
    d = Defn()
    tf = build(d, app(), group=GROUP)
    assert to_application(d, tf, group="tofu.example.org") is None
    assert to_application(replace(d, kind="Bucket"), tf, group=GROUP) is None
    assert to_application(replace(d, prefix="net-"), tf, group=GROUP) is None
    bare = copy.deepcopy(tf)
    bare["metadata"]["labels"] = {}
    assert to_application(d, bare, group=GROUP) is None


@pytest.mark.parametrize("naming", ["snake_case", "verbatim"])
def test_round_trip_equals_app_plus_defaults(naming: str) -> None:
    d = defn(variable_naming=naming)
    spec = {
        "cidrBlock": "10.0.0.0/16",
        "nodeCount": 7,
        "ratio": 1.5,
        "zones": ["a", "b"],
        "subnets": [{"cidrBlock": "10.0.1.0/24"}, {"cidrBlock": "10.0.2.0/24", "availabilityZone": "c"}],
        "tags": {"teamName": "x"},
        "network": {"natGateway": {"perAz": True}, "extraRoutes": {"myRoute": {"viaHost": "a"}}},
    }
    a = app(spec=spec, labels={"team": "a"}, annotations={"note": "x"})
    back = to_application(d, build(d, a, group=GROUP), group=GROUP)
    assert back is not None
    expected: dict[str, Any] = copy.deepcopy(spec)
    expected.update(region="eu-west-1", public=False)
    expected["subnets"][0]["availabilityZone"] = "eu-west-1a"
    expected["network"]["enableDns"] = True
    assert back["spec"] == expected
    assert back["metadata"]["labels"] == {"team": "a"}
    assert back["metadata"]["annotations"] == {"note": "x"}
    # idempotent: a second trip changes nothing
    again = to_application(d, build(d, {**a, "spec": back["spec"]}, group=GROUP), group=GROUP)
    assert again is not None and again["spec"] == back["spec"]


def test_status_has_approve_command(reference: Loader) -> None:
    d = defn(approve_plan="manual")
    tf = build(d, app(), group=GROUP)
    tf["status"] = copy.deepcopy(reference("terraform-pending")["status"])
    out = to_application(d, tf, group=GROUP)
    assert out is not None
    cond = next(c for c in out["status"]["conditions"] if c["type"] == "AwaitingApproval")
    assert cond["status"] == "True"
    command = "kubectl annotate vpcs net -n team --overwrite tofu.apps.cozystack.io/approve-plan="
    assert f"{command}{tf['status']['plan']['pending']}" in cond["message"]


# --------------------------------------------------------------------------- with the real definition model


def _real_definition(**terraform: Any) -> Any:
    obj = {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "TofuApplicationDefinition",
        "metadata": {"name": "vpc"},
        "spec": {
            "application": {
                "kind": "VPC",
                "plural": "vpcs",
                "singular": "vpc",
                "openAPISchema": json.dumps(SCHEMA),
            },
            "release": {"prefix": "vpc-", "labels": {"cozystack.io/ui": "true"}},
            "terraform": {
                "sourceRef": {"kind": "GitRepository", "name": "aws-vpc", "namespace": "cozy-system"},
                "path": "./modules/vpc",
                **terraform,
            },
        },
    }
    defn = TofuApplicationDefinition.from_object(obj)
    view: TofuDefinitionView = defn  # mypy: the model satisfies the protocol
    return view


def test_real_definition_model_round_trip() -> None:
    d = _real_definition(
        approvePlan="manual",
        writeOutputsToSecret={"name": "{{ .name }}-outputs", "outputs": ["vpc_id"], "labels": {"a": "b"}},
        allowServiceAccountOverride=True,
    )
    a = app(spec={"subnets": [{"cidrBlock": "a"}]}, annotations={RUNNER_SA_ANNOTATION: "tenant"})
    validate_application(d, a, group=GROUP)
    tf = build(d, a, group=GROUP)
    assert tf["spec"]["writeOutputsToSecret"] == {
        "name": "net-outputs",
        "outputs": ["vpc_id"],
        "labels": {"a": "b"},
    }
    assert tf["spec"]["approvePlan"] == ""
    assert tf["spec"]["serviceAccountName"] == "tenant"
    assert tf["spec"]["interval"] == "10m"
    back = to_application(d, tf, group=GROUP)
    assert back is not None
    assert back["spec"]["subnets"] == [{"cidrBlock": "a", "availabilityZone": "eu-west-1a"}]
    assert rollout_patch(d, tf, group=GROUP) == (None, [])


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("approve", ["", "auto", PLAN_ID])
def test_the_cache_keeps_all_the_projection_reads(reference: Loader, phase: str, approve: str) -> None:
    """The storage's cache keeps of a Terraform's spec what its readers use (``SPEC_READ``, and the fields a
    definition sets, for the rollout round): lists (from the cache) and gets (whole objects from kube-apiserver)
    must still show the same Application, status and plan preview, and a rollout compute the same patch."""
    from tofu_agl import plan
    from tofu_agl.plan_read import PlanSummaries
    from tofu_agl.rollout import PINNED_FIELDS, ROLLOUT_FIELDS, rollout_patch
    from tofu_agl.secretvalues import secret_references
    from tofu_agl.storage import CACHE_TRANSFORM

    # A definition setting every Terraform field a definition controls, so the built spec carries many the
    # projection does not read.
    d = _real_definition(approvePlan="manual", storeReadablePlan="json", workspace="prod", interval="10m",
                         retryInterval="1m", serviceAccountName="tf-runner", destroyResourcesOnDeletion=True,
                         runnerPodTemplate={"spec": {"envFrom": [{"secretRef": {"name": "aws-credentials"}}]}},
                         backendConfig={"inClusterConfig": True},
                         varsFrom=[{"kind": "ConfigMap", "name": "cloud-defaults", "optional": True},
                                   {"kind": "Secret", "name": "cloud-credentials"}],
                         writeOutputsToSecret={"name": "{{ .name }}-outputs", "outputs": ["vpc_id"]})
    a = app(spec={"subnets": [{"cidrBlock": "a"}]}, labels={"team": "a"}, annotations={"note": "x"})
    whole = build(d, a, group=GROUP)
    whole["metadata"].update(uid="u-1", resourceVersion="7", generation=2, creationTimestamp="2026-09-10T09:00:00Z",
                             managedFields=[{"manager": "tofu-agl", "fieldsV1": {"f:spec": {}}}])
    whole["spec"] = {**whole["spec"], "approvePlan": approve, "force": approve == ""}
    whole["status"] = copy.deepcopy(reference(f"terraform-{phase}")["status"])
    unread = set(whole["spec"]) - set(project.SPEC_READ)
    assert {"runnerPodTemplate", "backendConfig", "sourceRef", "path"} <= unread
    # what another writer adds to a Terraform's spec, which none of the cache's readers look at
    whole["spec"]["tfstate"] = {"forceUnlock": "auto"}
    cached = CACHE_TRANSFORM(copy.deepcopy(whole))
    assert "managedFields" not in cached["metadata"] and "tfstate" not in cached["spec"]
    # the rollout round reads the fields a definition sets from the cache too
    assert {f: cached["spec"].get(f) for f in (*ROLLOUT_FIELDS, *PINNED_FIELDS)} == \
        {f: whole["spec"].get(f) for f in (*ROLLOUT_FIELDS, *PINNED_FIELDS)}
    outdated = copy.deepcopy(whole)
    outdated["spec"].update(interval="1h", runnerPodTemplate={"spec": {"image": "runner:old"}}, workspace="old")
    patch = rollout_patch(d, CACHE_TRANSFORM(copy.deepcopy(outdated)), group=GROUP)
    assert patch == rollout_patch(d, outdated, group=GROUP) and patch[0] is not None and patch[1] == ["workspace"]
    assert to_application(d, cached, group=GROUP) == to_application(d, whole, group=GROUP)
    assert project.awaiting_approval(cached) == project.awaiting_approval(whole)
    assert plan.plan_location(cached) == plan.plan_location(whole)
    assert PlanSummaries.key(cached) == PlanSummaries.key(whole)
    # whose values are masked in what the Application shows
    assert secret_references(cached) == secret_references(whole) == ["aws-credentials", "cloud-credentials"]
