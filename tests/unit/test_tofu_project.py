"""Terraform -> Application: metadata and spec read back, and the status projection and STATUS
phases, checked against the realistic Terraform statuses in ``shared/reference/status`` (loaded,
not copied)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from tests.unit.tofu_samples import GROUP, SCHEMA, Defn, app
from tofu_agl import project
from tofu_agl.build import build
from tofu_agl.definition import TofuApplicationDefinition, TofuDefinitionView
from tofu_agl.names import RUNNER_SA_ANNOTATION
from tofu_agl.project import to_application
from tofu_agl.rollout import rollout_patch
from tofu_agl.validate import validate_application

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
        "status": project.project_status(tf, COMMAND),
    }


# --------------------------------------------------------------------------- planning


def test_planning(reference: Loader) -> None:
    tf = terraform(reference, "planning", approve="auto")
    out = project.project_status(tf, COMMAND)
    conds = conditions(out)
    assert project.phase(tf) == "Planning"
    assert out["phase"] == "Planning"
    assert conds["Ready"]["status"] == "Unknown"
    assert conds["Ready"]["message"] == "Terraform Planning"
    assert "Planned" not in conds and "Applied" not in conds
    assert conds["AwaitingApproval"]["status"] == "False"
    assert "Reconciling" not in conds
    assert "version" not in out and "plan" not in out
    assert out["outputs"] == {"secretName": "net-outputs", "names": []}
    assert project.table_cells(app_for(tf)) == [
        "net",
        "Unknown",
        "Planning",
        "-",
        "net-outputs",
        "2026-09-10T09:00:00Z",
    ]


def test_no_status_at_all_is_planning() -> None:
    tf = {"metadata": {"name": "vpc-net"}, "spec": {"approvePlan": "auto"}}
    out = project.project_status(tf, COMMAND)
    assert out["phase"] == "Planning"
    assert [c["type"] for c in out["conditions"]] == ["AwaitingApproval"]
    assert "outputs" not in out


# --------------------------------------------------------------------------- pending


def test_pending_plan_awaits_approval_with_exact_command(reference: Loader) -> None:
    tf = terraform(reference, "pending", approve="")
    out = project.project_status(tf, COMMAND)
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
    cells = project.table_cells(app_for(tf))
    assert cells[2:4] == ["AwaitingApproval", PLAN_ID]


def test_stale_approval_still_awaits(reference: Loader) -> None:
    tf = terraform(reference, "pending", approve="plan-main-0000000000")
    assert project.phase(tf) == "AwaitingApproval"
    assert conditions(project.project_status(tf, COMMAND))["AwaitingApproval"]["status"] == "True"


@pytest.mark.parametrize("approve", [PLAN_ID, "auto", "plan-main-b8e3"])
def test_approved_pending_plan_is_applying(reference: Loader, approve: str) -> None:
    # a non-empty prefix is what tofu-controller itself accepts, so it is applying, not awaiting
    tf = terraform(reference, "pending", approve=approve)
    out = project.project_status(tf, COMMAND)
    assert out["phase"] == "Applying"
    awaiting = conditions(out)["AwaitingApproval"]
    assert awaiting["status"] == "False"
    assert awaiting["reason"] == "PlanApproved"


def test_apply_in_progress_is_applying(reference: Loader) -> None:
    tf = terraform(reference, "pending", approve=PLAN_ID)
    tf["status"]["conditions"].append({"type": "Apply", "status": "Unknown", "reason": "Progressing"})
    tf["status"]["plan"] = {}
    assert project.phase(tf) == "Applying"
    ready_applying = terraform(reference, "planning")
    ready_applying["status"]["conditions"][1]["message"] = "Applying"
    assert project.phase(ready_applying) == "Applying"


# --------------------------------------------------------------------------- applied


def test_applied(reference: Loader) -> None:
    tf = terraform(reference, "applied", approve=PLAN_ID, generation=2)
    out = project.project_status(tf, COMMAND)
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
    assert project.table_cells(app_for(tf)) == ["net", "True", "Ready", "-", "net-outputs", "2026-09-10T09:00:00Z"]


def test_conditions_do_not_carry_the_terraform_generation(reference: Loader) -> None:
    out = project.project_status(terraform(reference, "applied"), COMMAND)
    assert all("observedGeneration" not in c for c in out["conditions"])


def test_ready_on_an_older_generation_is_planning(reference: Loader) -> None:
    tf = terraform(reference, "applied", generation=3)
    assert project.phase(tf) == "Planning"


def test_outputs_without_secret(reference: Loader) -> None:
    tf = terraform(reference, "applied")
    del tf["spec"]["writeOutputsToSecret"]
    out = project.project_status(tf, COMMAND)
    assert out["outputs"] == {"names": ["age_key", "subnet_ids", "vpc_id"]}
    assert project.table_cells({"metadata": {}, "status": out})[4] == ""


# --------------------------------------------------------------------------- failed / drift / deleting


def test_failed(reference: Loader) -> None:
    tf = terraform(reference, "failed", approve="auto", generation=3)
    out = project.project_status(tf, COMMAND)
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
    assert project.table_cells(app_for(tf))[1:3] == ["False", "Failed"]


def test_stalled_alone_is_failed(reference: Loader) -> None:
    tf = terraform(reference, "failed")
    tf["status"]["conditions"][0]["status"] = "Unknown"
    assert project.phase(tf) == "Failed"


def test_drift(reference: Loader) -> None:
    tf = terraform(reference, "applied", approve="")
    ready = tf["status"]["conditions"][0]
    ready.update(status="False", reason="DriftDetected", message="Drift detected")
    out = project.project_status(tf, COMMAND)
    assert out["phase"] == "Drifted"
    assert conditions(out)["Ready"]["reason"] == "DriftDetected"


@pytest.mark.parametrize("phase", ["planning", "pending", "applied", "failed"])
def test_deleting_wins(reference: Loader, phase: str) -> None:
    tf = terraform(reference, phase, deletionTimestamp="2026-09-10T11:00:00Z")
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
    d = Defn(variable_naming=naming)
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


def test_status_has_approve_command() -> None:
    d = Defn(approve_plan="manual")
    tf = build(d, app(), group=GROUP)
    tf["status"] = {"plan": {"pending": "plan-main-b8e362c206"}}
    out = to_application(d, tf, group=GROUP)
    assert out is not None
    cond = next(c for c in out["status"]["conditions"] if c["type"] == "AwaitingApproval")
    assert cond["status"] == "True"
    command = "kubectl annotate vpcs net -n team --overwrite tofu.apps.cozystack.io/approve-plan="
    assert f"{command}plan-main-b8e362c206" in cond["message"]


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
    assert rollout_patch(d, tf) == (None, [])


@pytest.mark.parametrize("phase", ["planning", "pending", "applied", "failed"])
@pytest.mark.parametrize("approve", ["", "auto", PLAN_ID])
def test_the_cache_keeps_all_the_projection_reads(reference: Loader, phase: str, approve: str) -> None:
    """The storage's cache keeps only ``SPEC_READ`` of a Terraform's spec: lists (from the cache) and gets
    (whole objects from kube-apiserver) must still show the same Application, status and plan preview."""
    from shared.client.informer import keeping_spec
    from tofu_agl import plan
    from tofu_agl.storage import PlanSummaries

    d = _real_definition(approvePlan="manual", storeReadablePlan="json", workspace="prod",
                         writeOutputsToSecret={"name": "{{ .name }}-outputs", "outputs": ["vpc_id"]})
    a = app(spec={"subnets": [{"cidrBlock": "a"}]}, labels={"team": "a"}, annotations={"note": "x"})
    whole = build(d, a, group=GROUP)
    whole["metadata"].update(uid="u-1", resourceVersion="7", generation=2, creationTimestamp="2026-09-10T09:00:00Z",
                             managedFields=[{"manager": "tofu-agl", "fieldsV1": {"f:spec": {}}}])
    whole["spec"] = {**copy.deepcopy(reference("tf-spec")["spec"]), **whole["spec"], "approvePlan": approve,
                     "force": approve == ""}
    whole["status"] = copy.deepcopy(reference(f"tf-status-{phase}")["status"])
    cached = keeping_spec(project.SPEC_READ)(copy.deepcopy(whole))
    assert "managedFields" not in cached["metadata"] and "runnerPodTemplate" not in cached["spec"]
    assert to_application(d, cached, group=GROUP) == to_application(d, whole, group=GROUP)
    assert project.awaiting_approval(cached) == project.awaiting_approval(whole)
    assert plan.plan_location(cached) == plan.plan_location(whole)
    assert PlanSummaries.key(cached) == PlanSummaries.key(whole)
