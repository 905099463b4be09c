"""SPEC §2: Application ⇄ HelmRelease translation (helm_agl.translate), one test per rule.

Flux statuses come from the reference YAML in ``reference/status/`` (loaded, not copied), so the
status projection is checked against what helm-controller really writes.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from helm_agl import translate as t
from shared.api.errors import ApiError
from shared.bodies import JSON

# ------------------------------------------------------------------------------------ fixtures

SCHEMA: JSON = {
    "type": "object",
    "required": ["version"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 1, "default": 2},
        "version": {"type": "string", "enum": ["v15", "v16"], "default": "v16"},
        "storage": {
            "type": "object",
            "default": {},
            "properties": {
                "size": {"type": "string", "default": "10Gi"},
                "class": {"type": "string"},
            },
        },
        "users": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"readonly": {"type": "boolean", "default": False}},
            },
        },
        "databases": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "owner": {"type": "string", "default": "admin"}},
            },
        },
        "external": {"type": "boolean", "default": False},
    },
}

HEALTH_CHECKS = [
    {
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "current": "status.phase == 'Cluster in healthy state'",
        "failed": "status.phase == 'Failed'",
    }
]


@dataclass(frozen=True)
class FakeDefinition:
    """Stands in for helm_agl.definition's model; satisfies translate.HelmDefinitionView."""

    kind: str = "Postgres"
    plural: str = "postgreses"
    singular: str = "postgres"
    prefix: str = "postgres-"
    release_labels: dict[str, str] = field(
        default_factory=lambda: {"cozystack.io/ui": "true", "internal.cozystack.io/tenantmodule": "false"}
    )
    chart_ref: dict[str, str] = field(
        default_factory=lambda: {
            "kind": "ExternalArtifact",
            "name": "cozystack-postgres",
            "namespace": "cozy-system",
        }
    )
    install_timeout: str | None = None
    upgrade_timeout: str | None = None
    disable_wait: bool = False
    wait_strategy: str | None = None
    health_check_exprs: list[dict[str, Any]] | None = None
    schema: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(SCHEMA))


DEFN = FakeDefinition()


def _view(defn: t.HelmDefinitionView) -> t.HelmDefinitionView:
    """Type-level check that the fake satisfies the protocol."""
    return defn


_view(DEFN)


def make_app(
    name: str = "db1",
    namespace: str = "tenant-root",
    spec: Any = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    resource_version: str | None = None,
    kind: str = "Postgres",
) -> JSON:
    meta: JSON = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    app: JSON = {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": kind, "metadata": meta}
    if spec is not None:
        app["spec"] = spec
    return app


def _reference_dir() -> Path | None:
    candidates = [
        os.environ.get("AGL_REFERENCE_DIR"),
        str(Path(__file__).resolve().parents[2] / "reference"),
        "/work/shared/reference",
    ]
    for cand in candidates:
        if cand and (Path(cand) / "status").is_dir():
            return Path(cand)
    return None


def load_status(which: str) -> JSON:
    """The ``status`` of reference/status/hr-status-<which>.yaml."""
    ref = _reference_dir()
    if ref is None:
        pytest.skip("reference/status YAML not found (set AGL_REFERENCE_DIR)")
    doc = yaml.safe_load((ref / "status" / f"hr-status-{which}.yaml").read_text())
    status: JSON = doc["status"]
    return status


def make_hr(
    defn: FakeDefinition = DEFN,
    name: str = "db1",
    namespace: str = "tenant-root",
    values: JSON | None = None,
    status: str | None = None,
    user_labels: dict[str, str] | None = None,
    user_annotations: dict[str, str] | None = None,
    extra_labels: dict[str, str] | None = None,
    extra_annotations: dict[str, str] | None = None,
    deleting: bool = False,
) -> JSON:
    """A HelmRelease as it sits in the cluster: what we emit, plus server- and Flux-owned fields."""
    hr = t.to_helmrelease(
        defn,
        make_app(
            name,
            namespace,
            spec=values if values is not None else {},
            labels=user_labels,
            annotations=user_annotations,
        ),
    )
    meta = hr["metadata"]
    meta.update(
        {
            "uid": "5b0f8e0c-6a3e-4d0e-9f57-0f1f3c2a9b11",
            "resourceVersion": "48213",
            "generation": 2,
            "creationTimestamp": "2026-09-10T09:00:01Z",
            "finalizers": ["finalizers.fluxcd.io"],
            "managedFields": [{"manager": "helm-agl", "operation": "Update"}],
        }
    )
    meta["labels"].update(extra_labels or {})
    if extra_annotations:
        meta.setdefault("annotations", {}).update(extra_annotations)
    if deleting:
        meta["deletionTimestamp"] = "2026-09-10T11:00:00Z"
        meta["deletionGracePeriodSeconds"] = 0
    if status is not None:
        hr["status"] = load_status(status)
    return hr


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, to check what a rollout patch does to a live object."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# ------------------------------------------------------------------------------- constants/names


def test_constants() -> None:
    assert t.GROUP == "apps.cozystack.io"
    assert t.VERSION == "v1alpha1"
    assert t.LABEL_PREFIX == "apps.cozystack.io-"
    assert (t.KIND_LABEL, t.GROUP_LABEL, t.NAME_LABEL) == (
        "apps.cozystack.io/application.kind",
        "apps.cozystack.io/application.group",
        "apps.cozystack.io/application.name",
    )
    assert t.HR_GVR == ("helm.toolkit.fluxcd.io", "v2", "helmreleases")
    assert t.VALUES_SECRET == "cozystack-values"
    assert t.SHARDING_LABEL == "sharding.fluxcd.io/key"


@pytest.mark.parametrize(
    ("prefix", "name", "release"),
    [("postgres-", "db1", "postgres-db1"), ("", "db1", "db1"), ("tenant-", "root", "tenant-root")],
)
def test_release_name_round_trip(prefix: str, name: str, release: str) -> None:
    defn = replace(DEFN, prefix=prefix)
    assert t.release_name(defn, name) == release
    assert t.application_name(defn, release) == name


@pytest.mark.parametrize("release", ["redis-db1", "postgres-", "postgres"])
def test_application_name_without_prefix_is_none(release: str) -> None:
    assert t.application_name(DEFN, release) is None


def test_label_selector_and_user_keys() -> None:
    assert t.label_selector_for(DEFN) == (
        "apps.cozystack.io/application.kind=Postgres,apps.cozystack.io/application.group=apps.cozystack.io"
    )
    assert t.translate_user_selector_key("team") == "apps.cozystack.io-team"
    assert t.translate_user_selector_key("example.com/owner") == "apps.cozystack.io-example.com/owner"


# ----------------------------------------------------------------------- Application → HelmRelease


def test_helmrelease_identity() -> None:
    hr = t.to_helmrelease(DEFN, make_app(spec={"replicas": 3}))
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
            t.KIND_LABEL: "Redis",
            t.NAME_LABEL: "other",
            # a release label on a user key is overridden by the user's label
            "apps.cozystack.io-team": "platform",
        },
    )
    user = {"team": "data", "env": "prod", t.KIND_LABEL: "Evil"}
    labels = t.to_helmrelease(defn, make_app(labels=user))["metadata"]["labels"]
    assert labels == {
        "cozystack.io/ui": "true",
        "apps.cozystack.io-team": "data",
        "apps.cozystack.io-env": "prod",
        "apps.cozystack.io-apps.cozystack.io/application.kind": "Evil",
        t.KIND_LABEL: "Postgres",
        t.GROUP_LABEL: "apps.cozystack.io",
        t.NAME_LABEL: "db1",
    }


def test_labels_without_user_labels() -> None:
    labels = t.to_helmrelease(DEFN, make_app())["metadata"]["labels"]
    assert labels == {
        "cozystack.io/ui": "true",
        "internal.cozystack.io/tenantmodule": "false",
        t.KIND_LABEL: "Postgres",
        t.GROUP_LABEL: "apps.cozystack.io",
        t.NAME_LABEL: "db1",
    }


def test_annotations_are_prefixed_user_annotations_only() -> None:
    defn = replace(DEFN, install_timeout="15m", disable_wait=True)
    hr = t.to_helmrelease(defn, make_app(annotations={"note": "hello", "example.com/owner": "me"}))
    assert hr["metadata"]["annotations"] == {
        "apps.cozystack.io-note": "hello",
        "apps.cozystack.io-example.com/owner": "me",
    }
    assert not t.to_helmrelease(defn, make_app()).get("metadata", {}).get("annotations")


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
    hr = t.to_helmrelease(replace(DEFN, chart_ref=chart_ref), make_app())
    assert hr["spec"]["chartRef"] == expected
    assert "chart" not in hr["spec"]


def test_fixed_release_settings() -> None:
    spec = t.to_helmrelease(DEFN, make_app())["spec"]
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
    spec = t.to_helmrelease(defn, make_app())["spec"]
    assert spec["install"]["timeout"] == want_install
    assert spec["upgrade"]["timeout"] == want_upgrade


def test_disable_wait_when_annotated() -> None:
    spec = t.to_helmrelease(replace(DEFN, disable_wait=True), make_app())["spec"]
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
    spec = t.to_helmrelease(defn, make_app())["spec"]
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
    values = t.to_helmrelease(DEFN, app)["spec"]["values"]
    assert values == given  # no "version", "storage", "owner" or "readonly" defaults
    values["users"]["app"]["readonly"] = True
    assert app == before  # the input is never shared or mutated


@pytest.mark.parametrize("spec", [None, {}])
def test_empty_spec_becomes_empty_values(spec: JSON | None) -> None:
    assert t.to_helmrelease(DEFN, make_app(spec=spec))["spec"]["values"] == {}


def test_create_never_sends_a_resource_version() -> None:
    hr = t.to_helmrelease(DEFN, make_app(resource_version="99"))
    assert "resourceVersion" not in hr["metadata"]


# ------------------------------------------------------------------------------------ update


def test_update_carries_the_applications_resource_version() -> None:
    live = make_hr()
    hr = t.to_helmrelease(DEFN, make_app(resource_version="41000"), existing=live)
    assert hr["metadata"]["resourceVersion"] == "41000"  # stale on purpose: kube-apiserver says 409


def test_update_without_resource_version_is_unconditional() -> None:
    live = make_hr()
    hr = t.to_helmrelease(DEFN, make_app(), existing=live)
    assert hr["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]


def test_update_keeps_live_sharding_label() -> None:
    defn = replace(DEFN, release_labels={"cozystack.io/ui": "true", t.SHARDING_LABEL: "shard0"})
    live = make_hr(defn, extra_labels={t.SHARDING_LABEL: "shard3"})
    hr = t.to_helmrelease(defn, make_app(labels={"team": "a"}), existing=live)
    assert hr["metadata"]["labels"][t.SHARDING_LABEL] == "shard3"
    # and without a live value the definition's default applies
    hr = t.to_helmrelease(defn, make_app(), existing=make_hr(defn))
    assert hr["metadata"]["labels"][t.SHARDING_LABEL] == "shard0"


def test_update_rebuilds_from_the_definition() -> None:
    live = make_hr(
        user_labels={"old": "x"},
        user_annotations={"old": "y"},
        extra_labels={"someone.else/label": "z"},
        extra_annotations={"reconcile.fluxcd.io/requestedAt": "now"},
    )
    live["spec"]["install"]["remediation"] = {"retries": 3}
    live["spec"]["values"] = {"replicas": 9}
    hr = t.to_helmrelease(DEFN, make_app(spec={"replicas": 1}, labels={"new": "1"}), existing=live)
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
    hr = t.to_helmrelease(DEFN, make_app(), existing=live)
    assert hr["metadata"]["finalizers"] == ["finalizers.fluxcd.io"]
    assert hr["metadata"]["ownerReferences"] == live["metadata"]["ownerReferences"]
    assert hr["spec"]["suspend"] is True
    assert "managedFields" not in hr["metadata"]
    assert "status" not in hr


# ---------------------------------------------------------------------- HelmRelease → Application


def test_read_back_identity_and_metadata() -> None:
    hr = make_hr(user_labels={"team": "data"}, user_annotations={"note": "hi"}, status="ready")
    app = t.from_helmrelease(DEFN, hr)
    assert app is not None
    assert app["apiVersion"] == "apps.cozystack.io/v1alpha1"
    assert app["kind"] == "Postgres"
    assert app["metadata"] == {
        "name": "db1",
        "namespace": "tenant-root",
        "uid": "5b0f8e0c-6a3e-4d0e-9f57-0f1f3c2a9b11",
        "resourceVersion": "48213",
        "generation": 2,
        "creationTimestamp": "2026-09-10T09:00:01Z",
        "labels": {"team": "data"},
        "annotations": {"note": "hi"},
    }


def test_read_back_deletion_timestamp() -> None:
    app = t.from_helmrelease(DEFN, make_hr(deleting=True))
    assert app is not None
    assert app["metadata"]["deletionTimestamp"] == "2026-09-10T11:00:00Z"


def test_read_back_labels_and_annotations_are_de_prefixed() -> None:
    hr = make_hr(
        extra_labels={"helm.toolkit.fluxcd.io/name": "x", t.SHARDING_LABEL: "s1"},
        extra_annotations={"reconcile.fluxcd.io/requestedAt": "now", "apps.cozystack.io-a/b": "c"},
        user_labels={"example.com/owner": "me"},
    )
    app = t.from_helmrelease(DEFN, hr)
    assert app is not None
    # release labels, the application labels and foreign labels are not the user's
    assert app["metadata"]["labels"] == {"example.com/owner": "me"}
    assert app["metadata"]["annotations"] == {"a/b": "c"}


def test_read_back_hides_top_level_underscore_keys_only() -> None:
    hr = make_hr(values={"_cluster": {"x": 1}, "_namespace": {}, "users": {"_a": {}}, "replicas": 3})
    app = t.from_helmrelease(DEFN, hr)
    assert app is not None
    assert "_cluster" not in app["spec"] and "_namespace" not in app["spec"]
    assert app["spec"]["users"] == {"_a": {"readonly": False}}
    assert hr["spec"]["values"]["_cluster"] == {"x": 1}  # the input is untouched


def test_read_back_applies_schema_defaults_recursively() -> None:
    hr = make_hr(values={"users": {"alice": {}, "bob": {"readonly": True}}, "databases": [{"name": "a"}]})
    app = t.from_helmrelease(DEFN, hr)
    assert app is not None
    assert app["spec"] == {
        "replicas": 2,
        "version": "v16",
        "storage": {"size": "10Gi"},
        "users": {"alice": {"readonly": False}, "bob": {"readonly": True}},
        "databases": [{"name": "a", "owner": "admin"}],
        "external": False,
    }
    assert hr["spec"]["values"] == {
        "users": {"alice": {}, "bob": {"readonly": True}},
        "databases": [{"name": "a"}],
    }


def test_read_back_keeps_given_values_over_defaults() -> None:
    hr = make_hr(values={"replicas": 5, "storage": {"size": "1Ti", "class": "fast"}, "external": True})
    app = t.from_helmrelease(DEFN, hr)
    assert app is not None
    assert app["spec"]["replicas"] == 5
    assert app["spec"]["storage"] == {"size": "1Ti", "class": "fast"}
    assert app["spec"]["external"] is True


def test_read_back_without_values_is_all_defaults() -> None:
    hr = make_hr()
    del hr["spec"]["values"]
    app = t.from_helmrelease(DEFN, hr)
    assert app is not None
    assert app["spec"]["version"] == "v16"


def test_read_back_with_empty_schema_is_values() -> None:
    defn = replace(DEFN, schema={})
    app = t.from_helmrelease(defn, make_hr(defn, values={"a": 1, "_b": 2}))
    assert app is not None
    assert app["spec"] == {"a": 1}


@pytest.mark.parametrize(
    ("which", "ready", "released"),
    [("ready", "True", "True"), ("failed", "False", "False"), ("reconciling", "Unknown", None)],
)
def test_status_projection_from_reference_statuses(which: str, ready: str, released: str | None) -> None:
    hr = make_hr(status=which)
    app = t.from_helmrelease(DEFN, hr)
    assert app is not None
    flux = hr["status"]
    assert app["status"]["version"] == flux["lastAttemptedRevision"]
    expected = [c for c in flux["conditions"] if c["type"] in ("Ready", "Released")]
    assert app["status"]["conditions"] == expected  # copied as they are, in Flux's order
    assert [c["status"] for c in app["status"]["conditions"]] == [s for s in (ready, released) if s]
    assert set(app["status"]) == {"version", "conditions"}  # history, failures, inventory... stay hidden
    assert t.ready_status(app) == ready


def test_status_without_flux_status() -> None:
    app = t.from_helmrelease(DEFN, make_hr())
    assert app is not None
    assert app["status"] == {}
    assert t.ready_status(app) == "Unknown"


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {t.KIND_LABEL: "Postgres"},
        {t.GROUP_LABEL: "apps.cozystack.io"},
        {t.KIND_LABEL: "Redis", t.GROUP_LABEL: "apps.cozystack.io"},
        {t.KIND_LABEL: "Postgres", t.GROUP_LABEL: "tofu.apps.cozystack.io"},
    ],
)
def test_helmrelease_without_kind_and_group_labels_is_not_an_application(labels: dict[str, str]) -> None:
    hr = make_hr()
    hr["metadata"]["labels"] = labels
    assert t.from_helmrelease(DEFN, hr) is None
    assert t.rollout_patch(DEFN, hr) is None


def test_helmrelease_without_prefix_is_not_an_application() -> None:
    hr = make_hr()
    hr["metadata"]["name"] = "db1"
    assert t.from_helmrelease(DEFN, hr) is None


def test_round_trip() -> None:
    app = make_app(spec={"replicas": 3, "version": "v15"}, labels={"team": "a"}, annotations={"n": "1"})
    back = t.from_helmrelease(DEFN, t.to_helmrelease(DEFN, app))
    assert back is not None
    assert back["metadata"]["name"] == "db1"
    assert back["metadata"]["labels"] == {"team": "a"}
    assert back["metadata"]["annotations"] == {"n": "1"}
    assert back["spec"] == {"replicas": 3, "version": "v15", "storage": {"size": "10Gi"}, "external": False}


# ------------------------------------------------------------------------------------- Table


def test_columns() -> None:
    assert [(c.name, c.type) for c in t.COLUMNS] == [
        ("NAME", "string"),
        ("READY", "string"),
        ("AGE", "date"),
        ("VERSION", "string"),
    ]


@pytest.mark.parametrize(
    ("which", "ready", "version"),
    [
        ("ready", "True", "6.6.1+0cc9a8446c95"),
        ("failed", "False", "6.6.2+7e4f1c2b9a11"),
        ("reconciling", "Unknown", "6.6.1+0cc9a8446c95"),
    ],
)
def test_table_cells(which: str, ready: str, version: str) -> None:
    app = t.from_helmrelease(DEFN, make_hr(status=which))
    assert app is not None
    assert t.table_cells(app) == ["db1", ready, "2026-09-10T09:00:01Z", version]


def test_table_cells_before_flux_reports() -> None:
    app = t.from_helmrelease(DEFN, make_hr())
    assert app is not None
    assert t.table_cells(app) == ["db1", "Unknown", "2026-09-10T09:00:01Z", ""]


# -------------------------------------------------------------------------------- validation


def _raises(defn: FakeDefinition, app: JSON, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        t.validate_application(defn, app, **kwargs)
    return info.value


def test_valid_application_passes() -> None:
    t.validate_application(
        DEFN, make_app(spec={"replicas": 3, "users": {"a": {}}, "databases": [{"name": "x"}]})
    )
    t.validate_application(DEFN, make_app())  # no spec at all: {} + defaults is valid


@pytest.mark.parametrize(("prefix", "budget"), [("postgres-", 44), ("", 53), ("tenant-", 46)])
def test_name_length_budget(prefix: str, budget: int) -> None:
    defn = replace(DEFN, prefix=prefix)
    t.validate_application(defn, make_app(name="a" * budget))
    err = _raises(defn, make_app(name="a" * (budget + 1)))
    assert (err.code, err.reason) == (422, "Invalid")
    causes = err.details["causes"]
    assert [c["field"] for c in causes] == ["metadata.name"]
    assert str(budget) in causes[0]["message"]
    assert err.details["kind"] == "Postgres" and err.details["group"] == "apps.cozystack.io"


@pytest.mark.parametrize("name", ["1db", "Db", "db_1", "db-", "db.one", "-db"])
def test_name_must_be_dns1035_label(name: str) -> None:
    err = _raises(DEFN, make_app(name=name))
    assert (err.code, err.reason) == (422, "Invalid")
    assert err.details["causes"][0]["field"] == "metadata.name"
    assert "DNS-1035" in err.details["causes"][0]["message"]


def test_missing_name() -> None:
    app = make_app()
    del app["metadata"]["name"]
    err = _raises(DEFN, app)
    assert err.code == 422
    assert err.details["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name is required",
            "field": "metadata.name",
        }
    ]


def test_name_not_checked_on_update_when_asked() -> None:
    t.validate_application(DEFN, make_app(name="a" * 60), check_name=False)


@pytest.mark.parametrize("spec", [[1, 2], "text", 3, True])
def test_spec_must_be_an_object(spec: Any) -> None:
    err = _raises(DEFN, make_app(spec=spec))
    assert (err.code, err.reason) == (400, "BadRequest")
    assert "spec must be an object" in err.message


def test_underscore_keys_are_rejected() -> None:
    err = _raises(DEFN, make_app(spec={"replicas": 3, "_cluster": {}}))
    assert (err.code, err.reason) == (400, "BadRequest")
    assert '"_cluster"' in err.message


def test_nested_underscore_keys_are_allowed() -> None:
    t.validate_application(DEFN, make_app(spec={"users": {"_svc": {}}}))


def test_schema_violations_one_cause_per_field() -> None:
    err = _raises(
        DEFN,
        make_app(spec={"replicas": "three", "version": "v9", "databases": [{"name": "ok"}, {"name": 5}]}),
    )
    assert (err.code, err.reason) == (422, "Invalid")
    fields = sorted(c["field"] for c in err.details["causes"])
    assert fields == ["spec.databases[1].name", "spec.replicas", "spec.version"]
    assert err.message.startswith('Postgres.apps.cozystack.io "db1" is invalid: ')
    assert err.status()["details"]["causes"] == err.details["causes"]


def test_schema_is_checked_after_defaulting() -> None:
    # "version" is required but has a default: omitting it is fine
    t.validate_application(DEFN, make_app(spec={"replicas": 1}))
    # a default that violates the schema is caught, because validation sees the defaulted spec
    broken = copy.deepcopy(SCHEMA)
    broken["properties"]["replicas"]["default"] = 0
    err = _raises(replace(DEFN, schema=broken), make_app(spec={}))
    assert [c["field"] for c in err.details["causes"]] == ["spec.replicas"]


def test_empty_schema_accepts_anything() -> None:
    t.validate_application(replace(DEFN, schema={}), make_app(spec={"anything": [1, {"x": None}]}))


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        ({"k" * 46: "v"}, None),  # "apps.cozystack.io-" + 46 chars > 63
        ({"Bad_Prefix.io/x": "v"}, None),
        ({"team": "has space"}, None),
        ({"team": "v" * 64}, None),
        (None, {"k" * 46: "v"}),
        ({"team": 5}, None),
    ],
)
def test_user_labels_and_annotations_must_survive_the_prefix(
    labels: dict[str, Any] | None, annotations: dict[str, Any] | None
) -> None:
    err = _raises(DEFN, make_app(labels=labels, annotations=annotations))
    assert err.code == 422
    field_name = "metadata.labels" if labels else "metadata.annotations"
    assert [c["field"] for c in err.details["causes"]] == [field_name]


def test_fine_labels_and_long_annotation_values_pass() -> None:
    t.validate_application(
        DEFN,
        make_app(labels={"k" * 45: "v" * 63, "example.com/team": ""}, annotations={"note": "x" * 1000}),
    )


# ------------------------------------------------------------------------------ durations




# --------------------------------------------------------------------------------- rollout


def test_rollout_nothing_to_do() -> None:
    assert t.rollout_patch(DEFN, make_hr(status="ready")) is None
    defn = replace(DEFN, install_timeout="15m", upgrade_timeout="1h", disable_wait=True)
    assert t.rollout_patch(defn, make_hr(defn)) is None


def test_rollout_equal_durations_are_not_rewritten() -> None:
    hr = make_hr()
    hr["spec"]["install"]["timeout"] = "10m"
    hr["spec"]["upgrade"]["timeout"] = "600s"
    assert t.rollout_patch(DEFN, hr) is None


def _roll(defn: FakeDefinition, hr: JSON) -> tuple[JSON, JSON]:
    patch = t.rollout_patch(defn, hr)
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == hr["metadata"]["resourceVersion"]
    patched = merge_patch(hr, patch)
    assert t.rollout_patch(defn, patched) is None, "the patch must converge"
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
    assert t.rollout_patch(DEFN, hr) is None


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
    hr = make_hr(user_labels={"team": "a"}, extra_labels={t.SHARDING_LABEL: "s2"})
    defn = replace(DEFN, release_labels={"cozystack.io/ui": "false", "new": "1"})
    patch, patched = _roll(defn, hr)
    assert patch["metadata"]["labels"] == {"cozystack.io/ui": "false", "new": "1"}
    assert "spec" not in patch
    labels = patched["metadata"]["labels"]
    assert labels["apps.cozystack.io-team"] == "a"
    assert labels[t.SHARDING_LABEL] == "s2"
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
