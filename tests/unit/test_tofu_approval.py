"""Manual plan approval: only the pending plan's exact, full id is ever approved."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from shared.api.errors import ApiError
from tests.unit.tofu_samples import GROUP, Defn, app
from tofu_agl.approval import FIELD, approve_plan, approved_plan, check_approval, kept_approval, vars_equal
from tofu_agl.build import build
from tofu_agl.names import APPROVE_ANNOTATION, LABEL_PREFIX

PENDING = "plan-main-b8e362c206"
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
        "status": copy.deepcopy(reference(f"tf-status-{phase}")["status"]),
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
    err = rejected(ann("plan-main-b8e3"), terraform(reference, "pending"))
    assert "full plan id" in err.message
    assert PENDING in err.message


@pytest.mark.parametrize("value", ["", "auto", " plan-main-b8e362c206", "PLAN-MAIN-B8E362C206"])
def test_anything_but_the_exact_id_is_rejected(reference: Loader, value: str) -> None:
    rejected(ann(value), terraform(reference, "pending"))


def test_superseded_id_is_rejected_naming_the_new_pending_id(reference: Loader) -> None:
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
    for phase in ("planning", "applied", "failed"):
        err = rejected(ann(PENDING), terraform(reference, phase))
        assert "no plan is waiting for approval" in err.message
    err = rejected(ann(PENDING), None)  # create: no Terraform, nothing to approve yet
    assert "no plan is waiting for approval" in err.message


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
    manual = Defn(approve_plan="manual")
    assert approve_plan(manual, app(), None, _vars(manual, app())) == ""
    live = _live(manual, app(), "", "plan-main-abc")
    approving = app(annotations={APPROVE_ANNOTATION: "plan-main-abc"})
    assert approve_plan(manual, approving, live, _vars(manual, app())) == "plan-main-abc"
    assert approve_plan(Defn(), approving, live, _vars(manual, app())) == "auto"


def test_update_keeps_approval_of_pending_plan_only_with_same_vars() -> None:
    d = Defn(approve_plan="manual")
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
    manual = Defn(approve_plan="manual")
    assert kept_approval(manual, _live(manual, app(), "plan-main-abc", "plan-main-abc")) == "plan-main-abc"
    assert kept_approval(manual, _live(manual, app(), "plan-main-abc", None)) == ""
    assert kept_approval(manual, _live(manual, app(), "auto", "plan-main-abc")) == ""
    assert kept_approval(Defn(), _live(manual, app(), "", "plan-main-abc")) == "auto"


def test_vars_equal_treats_pruned_null_as_null() -> None:
    live = {"spec": {"vars": [{"name": "a"}]}}
    assert vars_equal(live, [{"name": "a", "value": None}])
