"""Manual plan approval: only the pending plan's exact, full id is ever approved."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from shared.api.errors import ApiError
from tofu_agl.approval import FIELD, check_approval
from tofu_agl.translate import APPROVE_ANNOTATION, USER_PREFIX

PENDING = "plan-main-b8e362c206"
Loader = Callable[[str], Any]


def terraform(
    reference: Loader, phase: str, approve: str = "", recorded: str | None = None
) -> dict[str, Any]:
    annotations = {} if recorded is None else {USER_PREFIX + APPROVE_ANNOTATION: recorded}
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


def rejected(annotations: dict[str, str], tf: dict[str, Any] | None) -> ApiError:
    with pytest.raises(ApiError) as exc:
        check_approval(annotations, tf)
    err = exc.value
    assert err.code == 422
    assert err.reason == "Invalid"
    assert [c["field"] for c in err.details["causes"]] == [FIELD]
    return err


def test_exact_pending_id_is_approved(reference: Loader) -> None:
    assert check_approval(ann(PENDING), terraform(reference, "pending")) == PENDING


def test_no_annotation_means_nothing(reference: Loader) -> None:
    assert check_approval({}, terraform(reference, "pending")) is None
    assert check_approval(None, terraform(reference, "pending")) is None
    assert check_approval({"other": "x"}, None) is None


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
    assert check_approval(ann("plan-main-0000000000"), tf) is None
    # ... even when the old value happens to equal the pending id (same revision, new vars)
    tf = terraform(reference, "pending", recorded=PENDING)
    assert check_approval(ann(PENDING), tf) is None


def test_already_approved_is_a_no_op(reference: Loader) -> None:
    assert check_approval(ann(PENDING), terraform(reference, "pending", approve=PENDING)) is None


def test_error_labels_can_be_given(reference: Loader) -> None:
    with pytest.raises(ApiError) as exc:
        check_approval(ann("x"), None, group="tofu.example.org", kind="Bucket", name="b")
    assert 'Bucket.tofu.example.org "b" is invalid' in exc.value.message
