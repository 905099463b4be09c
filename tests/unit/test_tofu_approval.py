"""Manual plan approval: only the pending plan's exact, full id is ever approved; changed variables reset
an approval, and a replan with the same id is approved by removing and setting the annotation, never by a
re-applied manifest.  Plan ids and statuses are read from the Terraforms recorded from the real
tofu-controller (``tests/data/status/terraform-<phase>.yaml``), never copied."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from shared.api.errors import ApiError
from shared.api.fieldmanager import from_annotation
from tests.recorded import load_recorded
from tests.unit.tofu_samples import GROUP, RECORDED_PENDING, Defn, app, defn
from tofu_agl.approval import (
    FIELD,
    approve_plan,
    approved_plan,
    check_approval,
    kept_approval,
    vars_equal,
)
from tofu_agl.build import build
from tofu_agl.names import APPROVE_ANNOTATION, LABEL_PREFIX, MANAGED_FIELDS_ANNOTATION
from tofu_agl.project import approve_command, awaiting_approval, pending_plan, project_status, to_application

#: The pending plan's id in the recorded pending Terraform, and an abbreviation of it.
PENDING = RECORDED_PENDING
ABBREVIATED = PENDING[:-6]
Loader = Callable[[str], Any]


def terraform(
    reference: Loader, phase: str, approve: str = "", recorded: str | None = None
) -> dict[str, Any]:
    annotations = {} if recorded is None else {LABEL_PREFIX + APPROVE_ANNOTATION: recorded}
    return {
        "metadata": {
            "name": "vpc-net",
            "namespace": "team",
            "labels": {
                "apps.cozystack.io/application.kind": "VPC",
                "apps.cozystack.io/application.group": "tofu.apps.cozystack.io",
                "apps.cozystack.io/application.name": "net",
            },
            "annotations": annotations,
        },
        "spec": {"approvePlan": approve},
        "status": copy.deepcopy(reference(f"terraform-{phase}")["status"]),
    }


def ann(value: str) -> dict[str, str]:
    return {APPROVE_ANNOTATION: value, "other": "x"}


def approve(annotations: dict[str, str] | None, tf: dict[str, Any] | None) -> str | None:
    """Check a write of an Application with ``annotations`` over ``tf``; the plan id it approves."""
    application = app(annotations=annotations) if annotations is not None else app()
    tf_vars = (tf or {}).get("spec", {}).get("vars") or []
    check_approval(Defn(), application, tf, group=GROUP, tf_vars=tf_vars)
    return approved_plan(application, tf)


def rejected(annotations: dict[str, str], tf: dict[str, Any] | None) -> ApiError:
    with pytest.raises(ApiError) as exc:
        approve(annotations, tf)
    err = exc.value
    assert err.code == 422
    assert err.reason == "Invalid"
    assert [c["field"] for c in err.details["causes"]] == [FIELD]
    return err


def test_exact_pending_id_is_approved(reference: Loader) -> None:
    assert approve(ann(PENDING), terraform(reference, "pending")) == PENDING


def test_no_annotation_means_nothing(reference: Loader) -> None:
    assert approve({}, terraform(reference, "pending")) is None
    assert approve(None, terraform(reference, "pending")) is None
    assert approve({"other": "x"}, None) is None


def test_wrong_id_is_rejected_naming_the_pending_id(reference: Loader) -> None:
    err = rejected(ann("plan-main-0123456789"), terraform(reference, "pending"))
    assert PENDING in err.message
    assert 'VPC.tofu.apps.cozystack.io "net" is invalid' in err.message
    assert err.details["kind"] == "VPC"
    assert err.details["name"] == "net"


def test_abbreviated_id_is_rejected(reference: Loader) -> None:
    # tofu-controller would accept a prefix; we require the full id so nothing unnamed is approved
    assert PENDING.startswith(ABBREVIATED) and ABBREVIATED != PENDING
    err = rejected(ann(ABBREVIATED), terraform(reference, "pending"))
    assert "full plan id" in err.message
    assert PENDING in err.message


@pytest.mark.parametrize("value", ["", "auto", " " + PENDING, PENDING.upper()], ids=["empty", "auto", "space", "upper"])
def test_anything_but_the_exact_id_is_rejected(reference: Loader, value: str) -> None:
    rejected(ann(value), terraform(reference, "pending"))


def test_superseded_id_is_rejected_naming_the_new_pending_id(reference: Loader) -> None:
    # DERIVED from the pending recording: a plan of a later revision pending after an applied one (the
    # recordings hold one revision only); the ids are made up, any three distinct ones do.
    tf = terraform(reference, "pending", recorded="plan-main-aaaaaaaaaa")
    tf["status"]["plan"] = {"lastApplied": "plan-main-aaaaaaaaaa", "pending": "plan-main-cccccccccc"}
    err = rejected(ann("plan-main-bbbbbbbbbb"), tf)
    assert '"plan-main-cccccccccc"' in err.message
    err = rejected(
        ann("plan-main-aaaaaaaaaa" + ""), {**tf, "metadata": {**tf["metadata"], "annotations": {}}}
    )
    assert "already applied" in err.message
    assert '"plan-main-cccccccccc"' in err.message


def test_nothing_pending_is_rejected(reference: Loader) -> None:
    for phase in ("planning", "applied", "failed", "drifted", "deleting"):
        err = rejected(ann(PENDING), terraform(reference, phase))
        assert "no plan is waiting for approval" in err.message
    err = rejected(ann(PENDING), None)  # create: no Terraform, nothing to approve yet
    assert "no plan is waiting for approval" in err.message


def test_values_are_quoted_as_kube_apiserver_quotes_an_invalid_value(reference: Loader) -> None:
    # Go's %q: a quote, a backslash and a control character in the value cannot end or break the message.
    odd = 'plan-"x"\\\n'
    err = rejected(ann(odd), terraform(reference, "pending"))
    assert 'Invalid value: "plan-\\"x\\"\\\\\\n": plan "plan-\\"x\\"\\\\\\n" is not' in err.message
    assert err.message.endswith(f'the pending plan is "{PENDING}"')
    err = rejected(ann(odd), terraform(reference, "applied"))
    assert 'Invalid value: "plan-\\"x\\"\\\\\\n": no plan is waiting' in err.message


def test_unchanged_annotation_is_not_a_new_approval(reference: Loader) -> None:
    # re-applying a manifest that still carries an old id neither approves nor fails
    tf = terraform(reference, "pending", recorded="plan-main-0000000000")
    assert approve(ann("plan-main-0000000000"), tf) is None
    # ... even when the old value happens to equal the pending id (same revision, new vars)
    tf = terraform(reference, "pending", recorded=PENDING)
    assert approve(ann(PENDING), tf) is None


def test_already_approved_is_a_no_op(reference: Loader) -> None:
    assert approve(ann(PENDING), terraform(reference, "pending", approve=PENDING)) is None


def test_error_names_the_application() -> None:
    with pytest.raises(ApiError) as exc:
        check_approval(Defn(kind="Bucket"), app("b", annotations=ann("x")), None, group="tofu.example.org", tf_vars=[])
    assert 'Bucket.tofu.example.org "b" is invalid' in exc.value.message


# --------------------------------------------------------------------------- spec.approvePlan of a built Terraform


def _live(d: Defn, a: dict[str, Any], approve: str, pending: str | None) -> dict[str, Any]:
    tf = build(d, a, group=GROUP)
    tf["spec"]["approvePlan"] = approve
    tf["status"] = {"plan": {"pending": pending} if pending else {}}
    return tf


def _vars(d: Defn, a: dict[str, Any]) -> list[dict[str, Any]]:
    tf_vars: list[dict[str, Any]] = build(d, a, group=GROUP)["spec"]["vars"]
    return tf_vars


def test_approve_plan_modes() -> None:
    manual = defn(approve_plan="manual")
    assert approve_plan(manual, app(), None, _vars(manual, app())) == ""
    live = _live(manual, app(), "", "plan-main-abc")
    approving = app(annotations={APPROVE_ANNOTATION: "plan-main-abc"})
    assert approve_plan(manual, approving, live, _vars(manual, app())) == "plan-main-abc"
    assert approve_plan(Defn(), approving, live, _vars(manual, app())) == "auto"


def test_update_keeps_approval_of_pending_plan_only_with_same_vars() -> None:
    d = defn(approve_plan="manual")
    live = _live(d, app(), "plan-main-abc", "plan-main-abc")
    assert approve_plan(d, app(), live, _vars(d, app())) == "plan-main-abc"
    # label-only change keeps it too
    assert approve_plan(d, app(labels={"x": "y"}), live, _vars(d, app())) == "plan-main-abc"
    # new variables -> the old approval must not apply the next plan (same revision, same id)
    changed = app(spec={"cidrBlock": "10.1.0.0/16"})
    assert approve_plan(d, changed, live, _vars(d, changed)) == ""
    # an approval of an already applied plan is not kept
    stale = _live(d, app(), "plan-main-abc", None)
    assert approve_plan(d, app(), stale, _vars(d, app())) == ""


def test_rollout_keeps_only_an_approval_of_the_pending_plan() -> None:
    manual = defn(approve_plan="manual")
    assert kept_approval(manual, _live(manual, app(), "plan-main-abc", "plan-main-abc")) == "plan-main-abc"
    assert kept_approval(manual, _live(manual, app(), "plan-main-abc", None)) == ""
    assert kept_approval(manual, _live(manual, app(), "auto", "plan-main-abc")) == ""
    assert kept_approval(Defn(), _live(manual, app(), "", "plan-main-abc")) == "auto"


def test_vars_equal_treats_pruned_null_as_null() -> None:
    live = {"spec": {"vars": [{"name": "a"}]}}
    assert vars_equal(live, [{"name": "a", "value": None}])


# --------------------------------------------------------------------------- a replan with the same id

MANUAL = defn(approve_plan="manual")
APPROVE_CLAIM = f"f:{APPROVE_ANNOTATION}"

#: The Application's managedFields after ``kubectl apply`` (owning a note annotation and the spec) and
#: ``kubectl annotate`` of the approval, plus one manager owning the approval next to another annotation.
MANAGED: list[dict[str, Any]] = [
    {"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": f"{GROUP}/v1alpha1",
     "time": "2026-09-10T09:00:00Z", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:note": {}}}, "f:spec": {".": {}, "f:cidrBlock": {}}}},
    {"manager": "kubectl-annotate", "operation": "Update", "apiVersion": f"{GROUP}/v1alpha1",
     "time": "2026-09-10T09:05:00Z", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:metadata": {"f:annotations": {APPROVE_CLAIM: {}}}}},
    {"manager": "gitops", "operation": "Apply", "apiVersion": f"{GROUP}/v1alpha1",
     "time": "2026-09-10T09:06:00Z", "fieldsType": "FieldsV1",
     "fieldsV1": {"f:metadata": {"f:annotations": {APPROVE_CLAIM: {}, "f:owner": {}}, "f:labels": {"f:team": {}}}}},
]


def _pending_status() -> dict[str, Any]:
    status: dict[str, Any] = copy.deepcopy(load_recorded("terraform-pending")["status"])
    return status


def _approved(d: Defn) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Application ``net`` whose user approved the recorded pending plan with the annotation (its
    managers in its managedFields), and its live Terraform after that approval was written."""
    before = build(d, app(), group=GROUP)
    before["status"] = _pending_status()
    approving = app(annotations={APPROVE_ANNOTATION: PENDING, "note": "x", "owner": "y"},
                    labels={"team": "a"}, managedFields=copy.deepcopy(MANAGED))
    live = build(d, approving, group=GROUP, live=before)
    live["status"] = _pending_status()
    return approving, live


def _changed(a: dict[str, Any]) -> dict[str, Any]:
    """``a`` with other variables, still carrying everything else (its approve-plan annotation too)."""
    return {**a, "spec": {"cidrBlock": "10.1.0.0/16"}}


def _managed(tf: dict[str, Any]) -> list[dict[str, Any]]:
    entries = from_annotation(tf["metadata"]["annotations"].get(MANAGED_FIELDS_ANNOTATION))
    assert entries is not None
    return entries


def _claims_approval(entry: dict[str, Any]) -> bool:
    return APPROVE_CLAIM in entry.get("fieldsV1", {}).get("f:metadata", {}).get("f:annotations", {})


def test_changed_variables_reset_the_approval_and_keep_the_annotation() -> None:
    approving, live = _approved(MANUAL)
    key = LABEL_PREFIX + APPROVE_ANNOTATION
    assert live["spec"]["approvePlan"] == PENDING and live["metadata"]["annotations"][key] == PENDING
    changed = _changed(approving)
    # a manifest re-applied with new variables and the old annotation is no new approval: accepted ...
    check_approval(MANUAL, changed, live, group=GROUP, tf_vars=_vars(MANUAL, changed))
    tf = build(MANUAL, changed, group=GROUP, live=live)
    # ... the approval does not carry over to the plan of the new variables, and the user's metadata stays
    assert tf["spec"]["approvePlan"] == ""
    assert tf["metadata"]["annotations"][key] == PENDING
    assert _managed(tf) == MANAGED


@pytest.mark.parametrize("defn, update", [
    (Defn(), _changed),  # auto approval: nothing to reset
    (MANUAL, lambda a: {**a, "metadata": {**a["metadata"], "labels": {"team": "b"}}}),  # same variables
], ids=["auto", "unchanged-variables"])
def test_the_approval_stays_under_auto_approval_or_with_the_same_variables(
    defn: Defn, update: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    approving, live = _approved(defn)
    tf = build(defn, update(approving), group=GROUP, live=live)
    assert tf["spec"]["approvePlan"] == ("auto" if defn.terraform.approve_plan == "auto" else PENDING)


def _replanned() -> tuple[dict[str, Any], dict[str, Any]]:
    """After a variables-only change: the stored Application (still carrying the approval) and its Terraform,
    on which tofu-controller made a new plan with the *same* id (it derives ids from the source revision; the
    recorded pending status, same id, stands for it)."""
    approving, live = _approved(MANUAL)
    after = build(MANUAL, _changed(approving), group=GROUP, live=live)
    after["status"] = _pending_status()
    assert pending_plan(after) == PENDING and awaiting_approval(after)
    stored = to_application(MANUAL, after, group=GROUP, defaulted=False)
    assert stored is not None and stored["metadata"]["annotations"][APPROVE_ANNOTATION] == PENDING
    return stored, after


def test_a_reapplied_manifest_does_not_approve_a_replan_with_the_same_id() -> None:
    stored, after = _replanned()
    again = copy.deepcopy(stored)  # what a GitOps tool (or kubectl annotate --overwrite) writes: no change
    check_approval(MANUAL, again, after, group=GROUP, tf_vars=_vars(MANUAL, again))
    assert approved_plan(again, after) is None
    assert build(MANUAL, again, group=GROUP, live=after)["spec"]["approvePlan"] == ""


def test_removing_then_setting_the_annotation_approves_a_replan_with_the_same_id() -> None:
    stored, after = _replanned()
    removed = copy.deepcopy(stored)
    del removed["metadata"]["annotations"][APPROVE_ANNOTATION]
    check_approval(MANUAL, removed, after, group=GROUP, tf_vars=_vars(MANUAL, removed))
    without = build(MANUAL, removed, group=GROUP, live=after)
    without["status"] = after["status"]
    assert without["spec"]["approvePlan"] == ""
    assert LABEL_PREFIX + APPROVE_ANNOTATION not in without["metadata"]["annotations"]
    again = copy.deepcopy(removed)
    again["metadata"]["annotations"][APPROVE_ANNOTATION] = PENDING
    check_approval(MANUAL, again, without, group=GROUP, tf_vars=_vars(MANUAL, again))
    assert approved_plan(again, without) == PENDING
    assert build(MANUAL, again, group=GROUP, live=without)["spec"]["approvePlan"] == PENDING


def _printed(tf: dict[str, Any]) -> str:
    awaiting = next(c for c in project_status(tf, approve_command(MANUAL, "net", "team"))["conditions"]
                    if c["type"] == "AwaitingApproval")
    assert awaiting["status"] == "True"
    return str(awaiting["message"]).split("approve it with: ", 1)[1]


def test_the_printed_command_removes_and_sets_when_the_annotation_already_holds_the_id() -> None:
    set_it = f"kubectl annotate vpcs net -n team --overwrite {APPROVE_ANNOTATION}={PENDING}"
    _, after = _replanned()
    assert _printed(after) == f"kubectl annotate vpcs net -n team --overwrite {APPROVE_ANNOTATION}- && {set_it}"
    first = build(MANUAL, app(), group=GROUP)  # nothing approved yet: one command
    first["status"] = _pending_status()
    assert _printed(first) == set_it
