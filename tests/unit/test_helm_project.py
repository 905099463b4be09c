"""SPEC §2: HelmRelease -> Application, status and Table (helm_agl.project), one test per rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from helm_agl.build import build
from helm_agl.names import GROUP, SHARDING_LABEL
from helm_agl.project import COLUMNS, project_status, ready_status, table_cells, to_application
from shared.bodies import JSON
from tests.unit.helm_samples import DEFN, FOREIGN_LABELS, make_app, make_hr


def test_read_back_identity_and_metadata() -> None:
    hr = make_hr(user_labels={"team": "data"}, user_annotations={"note": "hi"}, status="installed", generation=2)
    app = to_application(DEFN, hr, group=GROUP)
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
    app = to_application(DEFN, make_hr(deleting=True), group=GROUP)
    assert app is not None
    assert app["metadata"]["deletionTimestamp"] == "2026-09-10T11:00:00Z"


def test_read_back_labels_and_annotations_are_de_prefixed() -> None:
    hr = make_hr(
        extra_labels={"helm.toolkit.fluxcd.io/name": "x", SHARDING_LABEL: "s1"},
        extra_annotations={"reconcile.fluxcd.io/requestedAt": "now", "apps.cozystack.io-a/b": "c"},
        user_labels={"example.com/owner": "me"},
    )
    app = to_application(DEFN, hr, group=GROUP)
    assert app is not None
    # release labels, the application labels and foreign labels are not the user's
    assert app["metadata"]["labels"] == {"example.com/owner": "me"}
    assert app["metadata"]["annotations"] == {"a/b": "c"}


def test_read_back_hides_top_level_underscore_keys_only() -> None:
    hr = make_hr(values={"_cluster": {"x": 1}, "_namespace": {}, "users": {"_a": {}}, "replicas": 3})
    app = to_application(DEFN, hr, group=GROUP)
    assert app is not None
    assert "_cluster" not in app["spec"] and "_namespace" not in app["spec"]
    assert app["spec"]["users"] == {"_a": {"readonly": False}}
    assert hr["spec"]["values"]["_cluster"] == {"x": 1}  # the input is untouched


def test_read_back_applies_schema_defaults_recursively() -> None:
    hr = make_hr(values={"users": {"alice": {}, "bob": {"readonly": True}}, "databases": [{"name": "a"}]})
    app = to_application(DEFN, hr, group=GROUP)
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
    app = to_application(DEFN, hr, group=GROUP)
    assert app is not None
    assert app["spec"]["replicas"] == 5
    assert app["spec"]["storage"] == {"size": "1Ti", "class": "fast"}
    assert app["spec"]["external"] is True


def test_read_back_without_values_is_all_defaults() -> None:
    hr = make_hr()
    del hr["spec"]["values"]
    app = to_application(DEFN, hr, group=GROUP)
    assert app is not None
    assert app["spec"]["version"] == "v16"


def test_read_back_with_empty_schema_is_values() -> None:
    defn = replace(DEFN, schema={})
    app = to_application(defn, make_hr(defn, values={"a": 1, "_b": 2}), group=GROUP)
    assert app is not None
    assert app["spec"] == {"a": 1}


#: Each status helm-controller v1.6.2 wrote (tests/data/status/helmrelease-<phase>.yaml), on a HelmRelease of the
#: generation it was written for: the Application's observedGeneration, its Ready status (helm-controller's own
#: condition), Reconciling (status, reason) and whether Released is there.
RECORDED_PHASES = [
    # The first install runs: helm-controller's -1 and its Progressing reach kstatus as they are.
    ("installing", -1, "Unknown", ("True", "Progressing"), None),
    ("installed", 1, "True", ("False", "Succeeded"), "True"),
    ("installed-external-artifact", 1, "True", ("False", "Succeeded"), "True"),
    ("upgraded", 2, "True", ("False", "Succeeded"), "True"),
    # RetryOnFailure retries a failed install forever: still work in progress, never Stalled.
    ("failed", 1, "False", ("True", "ProgressingWithRetry"), "False"),
    ("timed-out", 1, "False", ("True", "ProgressingWithRetry"), "False"),
    # helm-controller gave up (default remediation, no retries): its Stalled decides, nothing in progress.
    ("stalled", 2, "False", ("False", "Stalled"), "False"),
]


def conditions_of(app: JSON) -> dict[str, JSON]:
    return {c["type"]: c for c in app["status"]["conditions"]}


@pytest.mark.parametrize(("phase", "observed", "ready", "reconciling", "released"), RECORDED_PHASES)
def test_status_projection_from_recorded_statuses(phase: str, observed: int, ready: str,
                                                  reconciling: tuple[str, str], released: str | None) -> None:
    hr = make_hr(status=phase)
    app = to_application(DEFN, hr, group=GROUP)
    assert app is not None
    flux = hr["status"]
    recorded = {c["type"]: c for c in flux["conditions"]}
    assert app["status"]["version"] == flux["lastAttemptedRevision"]
    assert app["status"]["observedGeneration"] == observed == flux["observedGeneration"]
    conds = conditions_of(app)
    assert [c["type"] for c in app["status"]["conditions"]] == ["Ready", "Reconciling", "Stalled"] + (
        ["Released"] if released else [])
    assert conds["Ready"] == recorded["Ready"]  # helm-controller's, as it wrote it
    if released:
        assert conds["Released"] == recorded["Released"]
    assert (conds["Reconciling"]["status"], conds["Reconciling"]["reason"]) == reconciling
    assert conds["Stalled"]["status"] == ("True" if phase == "stalled" else "False")
    assert set(app["status"]) == {"observedGeneration", "version", "conditions"}  # history, inventory... hidden
    assert ready_status(app) == ready


def test_a_retried_failure_says_what_failed() -> None:
    app = to_application(DEFN, make_hr(status="failed"), group=GROUP)
    assert app is not None
    message = conditions_of(app)["Reconciling"]["message"]
    assert "replicas: 10 is more than this chart supports (9)" in message and "retrying after 30s" in message


def test_status_before_helm_controller_saw_it() -> None:
    """Just created: no observedGeneration (nothing was observed) and Reconciling True, so kstatus says
    InProgress although it skips its generation check."""
    app = to_application(DEFN, make_hr(), group=GROUP)
    assert app is not None
    assert "observedGeneration" not in app["status"]
    conds = conditions_of(app)
    assert (conds["Reconciling"]["status"], conds["Reconciling"]["reason"]) == ("True", "LatestGenerationNotObserved")
    assert "helm-controller" in conds["Reconciling"]["message"]
    assert conds["Ready"]["status"] == "Unknown" and conds["Stalled"]["status"] == "False"
    assert ready_status(app) == "Unknown"


def test_a_newer_generation_is_in_progress_and_not_ready() -> None:
    """The spec changed after the install: the install's Ready True is about generation 1, not 3."""
    app = to_application(DEFN, make_hr(status="installed", generation=3), group=GROUP)
    assert app is not None
    assert app["status"]["observedGeneration"] == 1
    conds = conditions_of(app)
    assert (conds["Reconciling"]["status"], conds["Reconciling"]["reason"]) == ("True", "LatestGenerationNotObserved")
    assert conds["Ready"]["status"] == "Unknown" and conds["Ready"]["observedGeneration"] == 3
    assert conds["Released"]["status"] == "True"  # what helm-controller last said about the release


def test_helm_controllers_stalled_is_kept() -> None:
    """helm-controller gave up (remediation retries exhausted) with Stalled True: Failed for kstatus."""
    hr = make_hr(status="stalled")
    recorded = {c["type"]: c for c in hr["status"]["conditions"]}
    app = to_application(DEFN, hr, group=GROUP)
    assert app is not None
    conds = conditions_of(app)
    assert (conds["Stalled"]["status"], conds["Stalled"]["reason"]) == ("True", recorded["Stalled"]["reason"])
    assert conds["Stalled"]["message"] == recorded["Stalled"]["message"]
    assert conds["Reconciling"]["status"] == "False"
    assert conds["Ready"] == recorded["Ready"]


@pytest.mark.parametrize("labels", FOREIGN_LABELS)
def test_helmrelease_without_kind_and_group_labels_is_not_an_application(labels: dict[str, str]) -> None:
    hr = make_hr()
    hr["metadata"]["labels"] = labels
    assert to_application(DEFN, hr, group=GROUP) is None


def test_helmrelease_without_prefix_is_not_an_application() -> None:
    hr = make_hr()
    hr["metadata"]["name"] = "db1"
    assert to_application(DEFN, hr, group=GROUP) is None


def test_round_trip() -> None:
    app = make_app(spec={"replicas": 3, "version": "v15"}, labels={"team": "a"}, annotations={"n": "1"})
    back = to_application(DEFN, build(DEFN, app, group=GROUP), group=GROUP)
    assert back is not None
    assert back["metadata"]["name"] == "db1"
    assert back["metadata"]["labels"] == {"team": "a"}
    assert back["metadata"]["annotations"] == {"n": "1"}
    assert back["spec"] == {"replicas": 3, "version": "v15", "storage": {"size": "10Gi"}, "external": False}


def test_columns() -> None:
    assert [(c.name, c.type) for c in COLUMNS] == [
        ("NAME", "string"),
        ("READY", "string"),
        ("AGE", "date"),
        ("VERSION", "string"),
    ]


@pytest.mark.parametrize(
    ("phase", "ready", "version"),
    [
        ("installing", "Unknown", "0.1.0"),
        ("installed", "True", "0.1.0"),
        ("installed-external-artifact", "True", "0.24.1"),
        ("failed", "False", "0.1.0"),
    ],
)
def test_table_cells(phase: str, ready: str, version: str) -> None:
    app = to_application(DEFN, make_hr(status=phase), group=GROUP)
    assert app is not None
    assert table_cells(app) == ["db1", ready, "2026-09-10T09:00:01Z", version]


def test_table_cells_before_flux_reports() -> None:
    app = to_application(DEFN, make_hr(), group=GROUP)
    assert app is not None
    assert table_cells(app) == ["db1", "Unknown", "2026-09-10T09:00:01Z", ""]


def test_status_shows_only_the_kstatus_conditions_and_released() -> None:
    hr = make_hr(generation=4)
    hr["status"] = {
        "observedGeneration": 4,
        "lastAttemptedRevision": "1.0.0",
        "conditions": [{"type": "TestSuccess", "status": "True"}, {"type": "Released", "status": "False"}],
        "history": [{"chartVersion": "1.0.0"}],
    }
    status = project_status(hr)
    assert set(status) == {"observedGeneration", "version", "conditions"}
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Reconciling", "Stalled", "Released"]
