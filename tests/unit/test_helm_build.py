"""SPEC §2: Application -> HelmRelease (helm_agl.build), one test per rule."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from helm_agl.build import VALUES_SECRET, build, values_from
from helm_agl.names import GROUP, GROUP_LABEL, KIND_LABEL, NAME_LABEL, SHARDING_LABEL
from shared.bodies import JSON
from tests.unit.helm_samples import DEFN, HEALTH_CHECKS, make_app, make_hr


def test_release_constants() -> None:
    assert VALUES_SECRET == "cozystack-values"
    assert values_from() == [{"kind": "Secret", "name": "cozystack-values"}]


def test_helmrelease_identity() -> None:
    hr = build(DEFN, make_app(spec={"replicas": 3}), group=GROUP)
    assert hr["apiVersion"] == "helm.toolkit.fluxcd.io/v2"
    assert hr["kind"] == "HelmRelease"
    assert hr["metadata"]["name"] == "postgres-db1"
    assert hr["metadata"]["namespace"] == "tenant-root"
    assert "resourceVersion" not in hr["metadata"]


def test_labels_precedence() -> None:
    defn = replace(
        DEFN,
        release_labels={
            "cozystack.io/ui": "true",
            # a definition cannot impersonate another kind: the application labels win
            KIND_LABEL: "Redis",
            NAME_LABEL: "other",
            # a release label on a user key is overridden by the user's label
            "apps.cozystack.io-team": "platform",
        },
    )
    user = {"team": "data", "env": "prod", KIND_LABEL: "Evil"}
    labels = build(defn, make_app(labels=user), group=GROUP)["metadata"]["labels"]
    assert labels == {
        "cozystack.io/ui": "true",
        "apps.cozystack.io-team": "data",
        "apps.cozystack.io-env": "prod",
        "apps.cozystack.io-apps.cozystack.io/application.kind": "Evil",
        KIND_LABEL: "Postgres",
        GROUP_LABEL: "apps.cozystack.io",
        NAME_LABEL: "db1",
    }


def test_labels_without_user_labels() -> None:
    labels = build(DEFN, make_app(), group=GROUP)["metadata"]["labels"]
    assert labels == {
        "cozystack.io/ui": "true",
        "internal.cozystack.io/tenantmodule": "false",
        KIND_LABEL: "Postgres",
        GROUP_LABEL: "apps.cozystack.io",
        NAME_LABEL: "db1",
    }


def test_annotations_are_prefixed_user_annotations_only() -> None:
    defn = replace(DEFN, install_timeout="15m", disable_wait=True)
    hr = build(defn, make_app(annotations={"note": "hello", "example.com/owner": "me"}), group=GROUP)
    assert hr["metadata"]["annotations"] == {
        "apps.cozystack.io-note": "hello",
        "apps.cozystack.io-example.com/owner": "me",
    }
    assert not build(defn, make_app(), group=GROUP).get("metadata", {}).get("annotations")


@pytest.mark.parametrize(
    ("chart_ref", "expected"),
    [
        (
            {"kind": "ExternalArtifact", "name": "cozystack-postgres", "namespace": "cozy-system"},
            {"kind": "ExternalArtifact", "name": "cozystack-postgres", "namespace": "cozy-system"},
        ),
        (
            {
                "kind": "OCIRepository",
                "name": "postgres",
                "namespace": "cozy-public",
                "apiVersion": "source.toolkit.fluxcd.io/v1",
            },
            {
                "kind": "OCIRepository",
                "name": "postgres",
                "namespace": "cozy-public",
                "apiVersion": "source.toolkit.fluxcd.io/v1",
            },
        ),
    ],
)
def test_chart_ref(chart_ref: dict[str, str], expected: dict[str, str]) -> None:
    hr = build(replace(DEFN, chart_ref=chart_ref), make_app(), group=GROUP)
    assert hr["spec"]["chartRef"] == expected
    assert "chart" not in hr["spec"]


def test_fixed_release_settings() -> None:
    spec = build(DEFN, make_app(), group=GROUP)["spec"]
    assert spec["interval"] == "5m0s"
    assert spec["maxHistory"] == 5
    assert spec["valuesFrom"] == [{"kind": "Secret", "name": "cozystack-values"}]
    for action in ("install", "upgrade"):
        assert spec[action] == {
            "timeout": "10m0s",
            "strategy": {"name": "RetryOnFailure", "retryInterval": "30s"},
        }
        assert "remediation" not in spec[action]
        assert "disableWait" not in spec[action]
    assert "healthCheckExprs" not in spec
    assert "waitStrategy" not in spec
    assert "suspend" not in spec


@pytest.mark.parametrize(
    ("install", "upgrade", "want_install", "want_upgrade"),
    [
        (None, None, "10m0s", "10m0s"),
        ("15m", None, "15m0s", "15m0s"),  # the install annotation sets both
        (None, "30m", "10m0s", "30m0s"),
        ("5m", "1h", "5m0s", "1h0m0s"),
        ("90s", None, "1m30s", "1m30s"),
    ],
)
def test_timeouts(install: str | None, upgrade: str | None, want_install: str, want_upgrade: str) -> None:
    defn = replace(DEFN, install_timeout=install, upgrade_timeout=upgrade)
    spec = build(defn, make_app(), group=GROUP)["spec"]
    assert spec["install"]["timeout"] == want_install
    assert spec["upgrade"]["timeout"] == want_upgrade


def test_disable_wait_when_annotated() -> None:
    spec = build(replace(DEFN, disable_wait=True), make_app(), group=GROUP)["spec"]
    assert spec["install"]["disableWait"] is True
    assert spec["upgrade"]["disableWait"] is True


@pytest.mark.parametrize(
    ("exprs", "strategy", "want_strategy"),
    [
        (None, None, None),
        (HEALTH_CHECKS, None, "poller"),
        (HEALTH_CHECKS, "legacy", "legacy"),
        (HEALTH_CHECKS, "poller", "poller"),
        (None, "legacy", "legacy"),
        ([], None, None),
    ],
)
def test_health_checks_and_wait_strategy(
    exprs: list[dict[str, Any]] | None, strategy: str | None, want_strategy: str | None
) -> None:
    defn = replace(DEFN, health_check_exprs=exprs, wait_strategy=strategy)
    spec = build(defn, make_app(), group=GROUP)["spec"]
    if exprs:
        assert spec["healthCheckExprs"] == exprs
        assert spec["healthCheckExprs"] is not exprs
    else:
        assert "healthCheckExprs" not in spec
    if want_strategy is None:
        assert "waitStrategy" not in spec
    else:
        assert spec["waitStrategy"] == {"name": want_strategy}


def test_values_are_the_spec_as_given_without_defaults() -> None:
    given = {"replicas": 3, "users": {"app": {}}, "databases": [{"name": "main"}], "_internal": 1}
    app = make_app(spec=given)
    before = copy.deepcopy(app)
    values = build(DEFN, app, group=GROUP)["spec"]["values"]
    assert values == given  # no "version", "storage", "owner" or "readonly" defaults
    values["users"]["app"]["readonly"] = True
    assert app == before  # the input is never shared or mutated


def test_nulls_the_schema_forbids_are_not_given_to_the_chart() -> None:
    """As a CRD drops them (found by the differential tier); to Helm a null would delete the chart's default."""
    values = build(DEFN, make_app(spec={"replicas": None, "users": {"app": {"readonly": None}}}), group=GROUP)
    assert values["spec"]["values"] == {"users": {"app": {}}}


@pytest.mark.parametrize("spec", [None, {}])
def test_empty_spec_becomes_empty_values(spec: JSON | None) -> None:
    assert build(DEFN, make_app(spec=spec), group=GROUP)["spec"]["values"] == {}


def test_create_never_sends_a_resource_version() -> None:
    hr = build(DEFN, make_app(resource_version="99"), group=GROUP)
    assert "resourceVersion" not in hr["metadata"]


def test_update_carries_the_applications_resource_version() -> None:
    live = make_hr()
    hr = build(DEFN, make_app(resource_version="41000"), group=GROUP, live=live)
    assert hr["metadata"]["resourceVersion"] == "41000"  # stale on purpose: kube-apiserver says 409


def test_update_without_resource_version_is_unconditional() -> None:
    live = make_hr()
    hr = build(DEFN, make_app(), group=GROUP, live=live)
    assert hr["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]


def test_update_keeps_live_sharding_label() -> None:
    defn = replace(DEFN, release_labels={"cozystack.io/ui": "true", SHARDING_LABEL: "shard0"})
    live = make_hr(defn, extra_labels={SHARDING_LABEL: "shard3"})
    hr = build(defn, make_app(labels={"team": "a"}), group=GROUP, live=live)
    assert hr["metadata"]["labels"][SHARDING_LABEL] == "shard3"
    # and without a live value the definition's default applies
    hr = build(defn, make_app(), group=GROUP, live=make_hr(defn))
    assert hr["metadata"]["labels"][SHARDING_LABEL] == "shard0"


def test_update_rebuilds_from_the_definition() -> None:
    live = make_hr(
        user_labels={"old": "x"},
        user_annotations={"old": "y"},
        extra_labels={"someone.else/label": "z"},
        extra_annotations={"reconcile.fluxcd.io/requestedAt": "now"},
    )
    live["spec"]["install"]["remediation"] = {"retries": 3}
    live["spec"]["values"] = {"replicas": 9}
    hr = build(DEFN, make_app(spec={"replicas": 1}, labels={"new": "1"}), group=GROUP, live=live)
    assert "apps.cozystack.io-old" not in hr["metadata"]["labels"]
    assert "someone.else/label" not in hr["metadata"]["labels"]
    assert hr["metadata"]["labels"]["apps.cozystack.io-new"] == "1"
    assert "annotations" not in hr["metadata"]
    assert "remediation" not in hr["spec"]["install"]
    assert hr["spec"]["values"] == {"replicas": 1}


def test_update_keeps_controller_owned_fields() -> None:
    live = make_hr()
    live["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]
    live["spec"]["suspend"] = True
    hr = build(DEFN, make_app(), group=GROUP, live=live)
    assert hr["metadata"]["finalizers"] == ["finalizers.fluxcd.io"]
    # ownerReferences are the Application's: an update without them removes them, as on a CRD
    assert "ownerReferences" not in hr["metadata"]
    assert hr["spec"]["suspend"] is True
    assert "managedFields" not in hr["metadata"]
    assert "status" not in hr
