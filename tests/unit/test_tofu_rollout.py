"""The rollout computation: what a changed definition changes on an existing Terraform."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.unit.tofu_samples import GROUP, Defn, app, defn, with_terraform
from tofu_agl.build import build
from tofu_agl.names import GROUP_LABEL, KIND_LABEL, RUNNER_SA_ANNOTATION
from tofu_agl.rollout import not_rolled_out, rollout_patch


def test_rollout_nothing_to_do() -> None:
    d = Defn()
    tf = build(d, app(), group=GROUP)
    assert rollout_patch(d, tf, group=GROUP) == (None, [])


def test_rollout_nothing_to_do_after_crd_defaulting() -> None:
    d = defn(service_account_name=None, store_readable_plan=None, destroy_resources_on_deletion=False)
    tf = build(d, app(), group=GROUP)
    tf["spec"].update(serviceAccountName="tf-runner", storeReadablePlan="none", workspace="default")
    tf["spec"]["destroyResourcesOnDeletion"] = False
    assert rollout_patch(d, tf, group=GROUP) == (None, [])


@pytest.mark.parametrize("labels", [
    {},
    {KIND_LABEL: "VPC"},
    {KIND_LABEL: "Bucket", GROUP_LABEL: GROUP},
    {KIND_LABEL: "VPC", GROUP_LABEL: "apps.cozystack.io"},
])
def test_rollout_leaves_other_kinds_and_groups_alone(labels: dict[str, str]) -> None:
    """A Terraform re-read after a conflict may no longer be an Application of this kind in the served group."""
    tf = build(Defn(), app(), group=GROUP)
    tf["metadata"]["labels"] = labels
    assert rollout_patch(with_terraform(Defn(), interval="1h"), tf, group=GROUP) == (None, [])


def test_rollout_patches_changed_fields() -> None:
    old = Defn()
    tf = build(old, app(), group=GROUP)
    new = with_terraform(
        old,
        source_ref={"kind": "OCIRepository", "name": "vpc-oci"},
        path="./v2",
        interval="5m",
        retry_interval=None,
        destroy_resources_on_deletion=False,
        write_outputs_to_secret={"name": "{{ .name }}-out"},
        runner_pod_template={"spec": {"env": [{"name": "B"}]}},
        service_account_name="runner2",
        store_readable_plan="json",
        vars_from=[{"kind": "ConfigMap", "name": "cm"}],
        release_labels={"cozystack.io/ui": "false", "extra": "1"},
    )
    patch, pinned = rollout_patch(new, tf, group=GROUP)
    assert pinned == []
    assert patch == {
        "spec": {
            "sourceRef": {"kind": "OCIRepository", "name": "vpc-oci", "namespace": None},
            "path": "./v2",
            "interval": "5m",
            "retryInterval": None,
            "destroyResourcesOnDeletion": False,
            "writeOutputsToSecret": {"name": "net-out", "outputs": []},
            "runnerPodTemplate": {"metadata": None, "spec": {"env": [{"name": "B"}]}},
            "serviceAccountName": "runner2",
            "storeReadablePlan": "json",
            "varsFrom": [{"kind": "ConfigMap", "name": "cm"}],
        },
        "metadata": {"labels": {"cozystack.io/ui": "false", "extra": "1"}},
    }


def test_rollout_never_touches_workspace_or_backend_config() -> None:
    old = defn(workspace="a", backend_config={"secretSuffix": "a"})
    tf = build(old, app(), group=GROUP)
    new = with_terraform(old, workspace="b", backend_config={"secretSuffix": "b"})
    patch, pinned = rollout_patch(new, tf, group=GROUP)
    assert patch is None
    assert pinned == ["workspace", "backendConfig"]
    patch, pinned = rollout_patch(with_terraform(new, interval="1h"), tf, group=GROUP)
    assert patch == {"spec": {"interval": "1h"}}
    assert pinned == ["workspace", "backendConfig"]
    # unset in the definition == the CRD default "default"
    tf["spec"]["workspace"] = "default"
    assert rollout_patch(with_terraform(new, workspace=None), tf, group=GROUP)[1] == ["backendConfig"]


def test_rollout_does_not_flag_the_per_instance_state_suffix() -> None:
    """An instance carrying its own suffix is what the definition builds: not changed, not pinned."""
    for backend in ({"inClusterConfig": True}, {"secretSuffix": "{{ .name }}-state"}):
        d = defn(backend_config=backend)
        for name in ("net", "other"):
            tf = build(d, app(name), group=GROUP)
            assert rollout_patch(d, tf, group=GROUP) == (None, [])
            assert rollout_patch(with_terraform(d, interval="1h"), tf, group=GROUP) == (
                {"spec": {"interval": "1h"}}, [])


def test_rollout_state_suffix_is_the_terraforms_own_name_after_a_prefix_change() -> None:
    d = defn(backend_config={"inClusterConfig": True})
    tf = build(d, app(), group=GROUP)
    assert tf["spec"]["backendConfig"]["secretSuffix"] == "vpc-net"
    assert rollout_patch(replace(d, prefix="net-"), tf, group=GROUP) == (None, [])


def test_rollout_reports_a_backend_config_without_the_instance_suffix() -> None:
    """A Terraform written before suffixes were defaulted differs from what the definition builds now:
    reported like any backendConfig change, never patched."""
    d = defn(backend_config={"inClusterConfig": True})
    tf = build(d, app(), group=GROUP)
    tf["spec"]["backendConfig"] = {"inClusterConfig": True}
    assert rollout_patch(d, tf, group=GROUP) == (None, ["backendConfig"])


def test_rollout_approve_plan_modes() -> None:
    manual = defn(approve_plan="manual")
    tf = build(Defn(), app(), group=GROUP)  # auto
    tf["status"] = {"plan": {"pending": "plan-main-abc"}}
    assert rollout_patch(manual, tf, group=GROUP)[0] == {"spec": {"approvePlan": ""}}
    # an approval of the plan pending right now is kept
    tf["spec"]["approvePlan"] = "plan-main-abc"
    assert rollout_patch(manual, tf, group=GROUP)[0] is None
    # a stale one is reset
    tf["status"] = {"plan": {"lastApplied": "plan-main-abc"}}
    assert rollout_patch(manual, tf, group=GROUP)[0] == {"spec": {"approvePlan": ""}}
    # manual -> auto approves what is pending (that is what auto means)
    tf["spec"]["approvePlan"] = ""
    assert rollout_patch(Defn(), tf, group=GROUP)[0] == {"spec": {"approvePlan": "auto"}}
    # "" and omitted mean the same
    del tf["spec"]["approvePlan"]
    assert rollout_patch(manual, tf, group=GROUP)[0] is None


def test_rollout_respects_runner_sa_override_only_while_allowed() -> None:
    allowed = defn(allow_service_account_override=True)
    tf = build(allowed, app(annotations={RUNNER_SA_ANNOTATION: "tenant"}), group=GROUP)
    assert tf["spec"]["serviceAccountName"] == "tenant"
    assert rollout_patch(with_terraform(allowed, service_account_name="other"), tf, group=GROUP)[0] is None
    assert rollout_patch(with_terraform(allowed, allow_service_account_override=False), tf, group=GROUP)[0] == {
        "spec": {"serviceAccountName": "tf-runner"}
    }


def test_rollout_uses_application_name_label_for_outputs_secret() -> None:
    d = Defn()
    tf = build(d, app(), group=GROUP)
    patch, _ = rollout_patch(
        with_terraform(d, prefix="net-", write_outputs_to_secret={"name": "{{ .name }}-o"}), tf, group=GROUP
    )
    assert patch == {"spec": {"writeOutputsToSecret": {"name": "net-o", "outputs": []}}}


def test_patch_carries_the_read_resource_version() -> None:
    """So a concurrent write makes the patch fail with 409 and the reconciler re-reads."""
    tf = build(Defn(), app(), group=GROUP)
    tf["metadata"]["resourceVersion"] = "41"
    patch, _ = rollout_patch(defn(interval="1h"), tf, group=GROUP)
    assert patch == {"metadata": {"resourceVersion": "41"}, "spec": {"interval": "1h"}}
    patch, _ = rollout_patch(Defn(release_labels={"extra": "1"}), tf, group=GROUP)
    assert patch == {"metadata": {"resourceVersion": "41", "labels": {"extra": "1"}}}
    assert rollout_patch(Defn(), tf, group=GROUP) == (None, [])


def test_not_rolled_out_names_the_application() -> None:
    d = defn(workspace="a")
    tf = build(d, app(), group=GROUP)
    _, pinned = rollout_patch(with_terraform(d, workspace="b", backend_config={"x": "y"}), tf, group=GROUP)
    assert not_rolled_out(d, tf, pinned) == {
        "name": "net", "namespace": "team", "fields": ["backendConfig", "workspace"],
    }
