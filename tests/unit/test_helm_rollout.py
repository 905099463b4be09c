"""SPEC §2 "Reconciler": the rollout patch of helm_agl.rollout, one test per rule."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from helm_agl.definition import ApplicationDefinition
from helm_agl.names import SHARDING_LABEL
from helm_agl.rollout import rollout_key, rollout_patch
from shared.api.patch import merge_patch
from shared.bodies import JSON
from tests.kube import FIXTURES
from tests.unit.helm_samples import DEFN, FOREIGN_LABELS, GROUP, HEALTH_CHECKS, FakeDefinition, make_hr


def test_rollout_nothing_to_do() -> None:
    assert rollout_patch(DEFN, make_hr(status="installed"), group=GROUP) == (None, [])
    defn = replace(DEFN, install_timeout="15m", upgrade_timeout="1h", disable_wait=True)
    assert rollout_patch(defn, make_hr(defn), group=GROUP) == (None, [])


def test_rollout_equal_durations_are_not_rewritten() -> None:
    hr = make_hr()
    hr["spec"]["install"]["timeout"] = "10m"
    hr["spec"]["upgrade"]["timeout"] = "600s"
    assert rollout_patch(DEFN, hr, group=GROUP) == (None, [])


def _roll(defn: FakeDefinition, hr: JSON) -> tuple[JSON, JSON]:
    patch, not_rolled_out = rollout_patch(defn, hr, group=GROUP)
    assert patch is not None
    assert not_rolled_out == []
    assert patch["metadata"]["resourceVersion"] == hr["metadata"]["resourceVersion"]
    patched = merge_patch(hr, patch)
    assert rollout_patch(defn, patched, group=GROUP) == (None, []), "the patch must converge"
    return patch, patched


def test_rollout_replaces_chart_ref() -> None:
    old = replace(
        DEFN,
        chart_ref={
            "kind": "HelmChart",
            "name": "postgres-old",
            "namespace": "cozy-public",
            "apiVersion": "source.toolkit.fluxcd.io/v1",
        },
    )
    hr = make_hr(old)
    patch, patched = _roll(DEFN, hr)
    assert patch["spec"]["chartRef"] == {
        "kind": "ExternalArtifact",
        "name": "cozystack-postgres",
        "namespace": "cozy-system",
        "apiVersion": None,  # a merge patch would otherwise keep the old apiVersion
    }
    assert patched["spec"]["chartRef"] == DEFN.chart_ref
    assert set(patch["spec"]) == {"chartRef"}
    assert patched["spec"]["values"] == hr["spec"]["values"]


def test_rollout_same_chart_ref_apiversion_only_is_left_alone() -> None:
    hr = make_hr()
    hr["spec"]["chartRef"]["apiVersion"] = "source.toolkit.fluxcd.io/v1"
    assert rollout_patch(DEFN, hr, group=GROUP) == (None, [])


def test_rollout_moves_legacy_chart_to_chart_ref() -> None:
    hr = make_hr()
    del hr["spec"]["chartRef"]
    hr["spec"]["chart"] = {
        "spec": {"chart": "postgres", "sourceRef": {"kind": "HelmRepository", "name": "cozystack-apps"}}
    }
    patch, patched = _roll(DEFN, hr)
    assert patch["spec"]["chart"] is None
    assert "chart" not in patched["spec"]
    assert patched["spec"]["chartRef"] == DEFN.chart_ref


def test_rollout_forces_values_from() -> None:
    hr = make_hr()
    hr["spec"]["valuesFrom"] = [
        {"kind": "Secret", "name": "cozystack-values"},
        {"kind": "ConfigMap", "name": "extra", "valuesKey": "values.yaml"},
    ]
    patch, patched = _roll(DEFN, hr)
    assert patch["spec"] == {"valuesFrom": [{"kind": "Secret", "name": "cozystack-values"}]}
    del hr["spec"]["valuesFrom"]
    _, patched = _roll(DEFN, hr)
    assert patched["spec"]["valuesFrom"] == [{"kind": "Secret", "name": "cozystack-values"}]


def test_rollout_adds_and_overwrites_release_labels_only() -> None:
    hr = make_hr(user_labels={"team": "a"}, extra_labels={SHARDING_LABEL: "s2"})
    defn = replace(DEFN, release_labels={"cozystack.io/ui": "false", "new": "1"})
    patch, patched = _roll(defn, hr)
    assert patch["metadata"]["labels"] == {"cozystack.io/ui": "false", "new": "1"}
    assert "spec" not in patch
    labels = patched["metadata"]["labels"]
    assert labels["apps.cozystack.io-team"] == "a"
    assert labels[SHARDING_LABEL] == "s2"
    assert labels["internal.cozystack.io/tenantmodule"] == "false"  # never removed


def test_rollout_applies_timeout_annotations() -> None:
    defn = replace(DEFN, install_timeout="20m", upgrade_timeout="45m")
    patch, patched = _roll(defn, make_hr())
    assert patch["spec"] == {"install": {"timeout": "20m0s"}, "upgrade": {"timeout": "45m0s"}}
    assert patched["spec"]["install"]["strategy"] == {"name": "RetryOnFailure", "retryInterval": "30s"}
    # the annotation is removed again: back to the default
    patch, _ = _roll(DEFN, patched)
    assert patch["spec"] == {"install": {"timeout": "10m0s"}, "upgrade": {"timeout": "10m0s"}}


def test_rollout_disable_wait_added_and_removed() -> None:
    waiting = replace(DEFN, disable_wait=True)
    patch, patched = _roll(waiting, make_hr())
    assert patch["spec"] == {"install": {"disableWait": True}, "upgrade": {"disableWait": True}}
    patch, patched = _roll(DEFN, patched)
    assert patch["spec"] == {"install": {"disableWait": None}, "upgrade": {"disableWait": None}}
    assert "disableWait" not in patched["spec"]["install"]


def test_rollout_fills_missing_install_and_upgrade() -> None:
    hr = make_hr()
    del hr["spec"]["install"], hr["spec"]["upgrade"]
    _, patched = _roll(DEFN, hr)
    assert patched["spec"]["install"] == {"timeout": "10m0s"}
    assert patched["spec"]["upgrade"] == {"timeout": "10m0s"}


def test_rollout_leaves_values_health_checks_and_user_data_alone() -> None:
    hr = make_hr(values={"replicas": 4}, user_annotations={"n": "1"})
    defn = replace(
        DEFN,
        chart_ref={"kind": "OCIRepository", "name": "pg", "namespace": "cozy-public"},
        health_check_exprs=HEALTH_CHECKS,
    )
    patch, patched = _roll(defn, hr)
    assert set(patch["spec"]) == {"chartRef"}
    assert patched["spec"]["values"] == {"replicas": 4}
    assert patched["metadata"]["annotations"] == hr["metadata"]["annotations"]


@pytest.mark.parametrize("labels", FOREIGN_LABELS)
def test_rollout_leaves_other_kinds_alone(labels: dict[str, str]) -> None:
    hr = make_hr(replace(DEFN, chart_ref={"kind": "OCIRepository", "name": "other", "namespace": "x"}))
    hr["metadata"]["labels"] = labels
    assert rollout_patch(DEFN, hr, group=GROUP) == (None, [])


def test_rollout_key_follows_the_rolled_out_annotations() -> None:
    """Annotations do not bump a definition's generation, but the timeouts and disable-wait roll out."""
    obj = yaml.safe_load((FIXTURES / "definitions" / "redis.yaml").read_text())
    obj["metadata"]["generation"] = 3
    before = rollout_key(ApplicationDefinition.from_object(obj))
    obj["metadata"].setdefault("annotations", {})["release.cozystack.io/helm-install-disable-wait"] = "true"
    after = rollout_key(ApplicationDefinition.from_object(obj))
    assert before != after
    obj["metadata"]["annotations"]["release.cozystack.io/helm-upgrade-timeout"] = "20m"
    assert rollout_key(ApplicationDefinition.from_object(obj)) != after


def test_rollout_never_rewrites_identity_or_user_labels() -> None:
    """A definition whose release.labels names an identity label or a user's label key is Accepted, but its
    rollout must not rewrite who an existing HelmRelease belongs to (build() protects the same keys)."""
    hr = make_hr(user_labels={"team": "a"})
    defn = replace(DEFN, release_labels={"apps.cozystack.io/application.name": "someone-else",
                                         "apps.cozystack.io/application.kind": "Other",
                                         "apps.cozystack.io/application.group": "other.example.io",
                                         "apps.cozystack.io-team": "b", "fine": "1"})
    patch, patched = _roll(defn, hr)
    assert patch["metadata"]["labels"] == {"fine": "1"}
    labels = patched["metadata"]["labels"]
    name_label = "apps.cozystack.io/application.name"
    assert labels[name_label] == hr["metadata"]["labels"][name_label]
    assert labels["apps.cozystack.io-team"] == "a"
