"""An Application's finalizers and ownerReferences as its backing object's own (shared.api.ownership)."""

from __future__ import annotations

import copy

from helm_agl.build import build as build_hr
from helm_agl.names import GROUP as HELM_GROUP
from helm_agl.project import to_application as hr_to_app
from shared.api import errors, ownership
from shared.bodies import JSON
from tests.unit import tofu_samples
from tests.unit.helm_samples import DEFN, make_app
from tofu_agl.build import build as build_tf
from tofu_agl.project import to_application as tf_to_app

OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "0a1b", "controller": True}
FLUX = "finalizers.fluxcd.io"
TOFU = "finalizers.tf.contrib.fluxcd.io"


def test_the_controllers_finalizer_is_hidden_and_the_rest_shown_in_order() -> None:
    app_meta: JSON = {}
    ownership.to_application({"finalizers": ["b.io/x", FLUX, "a.io/y"], "ownerReferences": [OWNER]}, app_meta,
                             (FLUX,))
    assert app_meta == {"finalizers": ["b.io/x", "a.io/y"], "ownerReferences": [OWNER]}
    only_flux: JSON = {}
    ownership.to_application({"finalizers": [FLUX]}, only_flux, (FLUX,))
    assert only_flux == {}


def test_an_update_replaces_only_the_users_finalizers() -> None:
    backing: JSON = {"finalizers": ["stale"], "ownerReferences": [OWNER]}
    live = {"finalizers": ["old.io/user", FLUX], "ownerReferences": [OWNER]}
    ownership.to_backing({"finalizers": ["new.io/user"]}, backing, (FLUX,), live)
    assert backing == {"finalizers": ["new.io/user", FLUX]}
    # a user who removes every finalizer leaves the controller's in place
    emptied: JSON = {}
    ownership.to_backing({}, emptied, (FLUX,), live)
    assert emptied == {"finalizers": [FLUX]}
    # the controller's finalizer named by the user is not doubled
    named: JSON = {}
    ownership.to_backing({"finalizers": [FLUX]}, named, (FLUX,), live)
    assert named == {"finalizers": [FLUX]}


def test_a_create_carries_exactly_the_users_metadata() -> None:
    backing: JSON = {}
    ownership.to_backing({"finalizers": ["a.io/x"], "ownerReferences": [OWNER]}, backing, (FLUX,))
    assert backing == {"finalizers": ["a.io/x"], "ownerReferences": [OWNER]}
    # a value kube-apiserver must refuse is passed on as it is
    odd: JSON = {}
    ownership.to_backing({"finalizers": "a.io/x"}, odd, (FLUX,), {"finalizers": [FLUX]})
    assert odd == {"finalizers": "a.io/x"}


def test_finalizer_warnings_are_the_crd_registrys() -> None:
    new = {"finalizers": ["plain", "dotted.name", "a.io/ok", "orphan", "kept"]}
    assert ownership.finalizer_warnings(new, {"finalizers": ["kept"]}) == [
        'metadata.finalizers: "dotted.name": prefer a domain-qualified finalizer name including a path (/) to '
        "avoid accidental conflicts with other finalizer writers",
        'metadata.finalizers: "plain": prefer a domain-qualified finalizer name to avoid accidental conflicts '
        "with other finalizer writers",
    ]
    assert ownership.finalizer_warnings({}) == []


def test_helm_round_trip() -> None:
    app = make_app()
    app["metadata"].update(finalizers=["a.io/x"], ownerReferences=[OWNER])
    hr = build_hr(DEFN, app, group=HELM_GROUP)
    assert hr["metadata"]["finalizers"] == ["a.io/x"]
    assert hr["metadata"]["ownerReferences"] == [OWNER]
    live = copy.deepcopy(hr)
    live["metadata"].update(finalizers=["a.io/x", FLUX], deletionTimestamp="2026-11-26T00:00:00Z",
                            deletionGracePeriodSeconds=0)
    read = hr_to_app(DEFN, live, group=HELM_GROUP) or {}
    assert read["metadata"]["finalizers"] == ["a.io/x"]
    assert read["metadata"]["ownerReferences"] == [OWNER]
    assert read["metadata"]["deletionGracePeriodSeconds"] == 0
    rebuilt = build_hr(DEFN, {**app, "metadata": {**app["metadata"], "finalizers": []}}, group=HELM_GROUP,
                       live=live)
    assert rebuilt["metadata"]["finalizers"] == [FLUX]


def test_tofu_round_trip() -> None:
    defn = tofu_samples.Defn()
    app = tofu_samples.app()
    app["metadata"].update(finalizers=["a.io/x"], ownerReferences=[OWNER])
    tf = build_tf(defn, app, group=tofu_samples.GROUP)
    assert tf["metadata"]["finalizers"] == ["a.io/x"]
    assert tf["metadata"]["ownerReferences"] == [OWNER]
    live = copy.deepcopy(tf)
    live["metadata"].update(finalizers=[TOFU, "a.io/x"], deletionGracePeriodSeconds=0)
    read = tf_to_app(defn, live, group=tofu_samples.GROUP) or {}
    assert read["metadata"]["finalizers"] == ["a.io/x"]
    assert read["metadata"]["ownerReferences"] == [OWNER]
    rebuilt = build_tf(defn, {**app, "metadata": {**app["metadata"], "finalizers": ["b.io/y"]}},
                       group=tofu_samples.GROUP, live=live)
    assert rebuilt["metadata"]["finalizers"] == ["b.io/y", TOFU]


def test_a_backing_objects_invalid_is_told_of_the_application() -> None:
    backing = errors.ApiError(
        422, "Invalid",
        'HelmRelease.helm.toolkit.fluxcd.io "postgres-db1" is invalid: metadata.finalizers: Forbidden: no new '
        'finalizers can be added if the object is being deleted, found new finalizers []string{"b.io/y"}',
        details={"name": "postgres-db1", "group": "helm.toolkit.fluxcd.io", "kind": "HelmRelease",
                 "causes": [{"reason": "FieldValueForbidden", "field": "metadata.finalizers", "message": "x"}]},
    )
    renamed = errors.renamed_invalid(backing, "apps.cozystack.io", "Postgres", "db1").status()
    assert renamed["message"].startswith(
        'Postgres.apps.cozystack.io "db1" is invalid: metadata.finalizers: Forbidden: no new finalizers')
    assert renamed["details"] == {"group": "apps.cozystack.io", "kind": "Postgres", "name": "db1",
                                  "causes": backing.details["causes"]}


def test_metadata_causes_are_kube_apiservers() -> None:
    causes = ownership.metadata_causes({
        "ownerReferences": [{"apiVersion": "apps/", "kind": "", "name": "a", "controller": True},
                            {"apiVersion": "v1", "kind": "K", "name": "b", "uid": "u", "controller": True}],
        "finalizers": ["ok.io/x", "-bad", "orphan", "foregroundDeletion"],
    })
    assert [(c["field"], c["message"].split(": ")[-1]) for c in causes] == [
        ("metadata.ownerReferences.apiVersion", "version must not be empty"),
        ("metadata.ownerReferences.kind", "must not be empty"),
        ("metadata.ownerReferences.uid", "must not be empty"),
        ("metadata.ownerReferences", 'Only one reference can have Controller set to true. Found "true" in '
                                     "references for /a and K/b"),
        ("metadata.finalizers", "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                                "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                                "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
        ("metadata.finalizers", "finalizer orphan and foregroundDeletion cannot be both set"),
    ]
    assert ownership.metadata_causes({"finalizers": ["a.io/b"], "ownerReferences": [OWNER]}) == []
    assert ownership.qualified_name_errors("/x") == ["prefix part must be non-empty"]
    assert ownership.qualified_name_errors("x" * 64)[0] == "name part must be no more than 63 bytes"
