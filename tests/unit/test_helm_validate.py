"""SPEC §2/§5: which Applications helm_agl.validate lets through, and the Status of those it does not."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from helm_agl.names import GROUP
from helm_agl.validate import validate_application
from shared.api.errors import ApiError
from shared.bodies import JSON
from shared.schema import validation
from shared.schema.defaults import apply_defaults
from tests.unit.helm_samples import DEFN, SCHEMA, FakeDefinition, make_app, make_hr


def _raises(defn: FakeDefinition, app: JSON) -> ApiError:
    with pytest.raises(ApiError) as info:
        validate_application(defn, app, group=GROUP)
    return info.value


def test_valid_application_passes() -> None:
    validate_application(
        DEFN, make_app(spec={"replicas": 3, "users": {"a": {}}, "databases": [{"name": "x"}]}), group=GROUP
    )
    validate_application(DEFN, make_app(), group=GROUP)  # no spec at all: {} + defaults is valid


@pytest.mark.parametrize(("prefix", "budget"), [("postgres-", 44), ("", 53), ("tenant-", 46)])
def test_name_length_budget(prefix: str, budget: int) -> None:
    defn = replace(DEFN, prefix=prefix)
    validate_application(defn, make_app(name="a" * budget), group=GROUP)
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
    validate_application(DEFN, make_app(name="a" * 60), group=GROUP, live=make_hr())


@pytest.mark.parametrize("spec", [[1, 2], "text", 3, True])
def test_spec_must_be_an_object(spec: Any) -> None:
    err = _raises(DEFN, make_app(spec=spec))
    # As kube-apiserver answers for a custom resource (found by the differential tier).
    assert (err.code, err.reason) == (422, "Invalid")
    assert [(c["reason"], c["field"]) for c in err.details["causes"]] == [("FieldValueTypeInvalid", "spec")]
    assert "spec in body must be of type object" in err.message


def test_underscore_keys_are_rejected() -> None:
    err = _raises(DEFN, make_app(spec={"replicas": 3, "_cluster": {}}))
    assert (err.code, err.reason) == (400, "BadRequest")
    assert '"_cluster"' in err.message


def test_nested_underscore_keys_are_allowed() -> None:
    validate_application(DEFN, make_app(spec={"users": {"_svc": {}}}), group=GROUP)


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
    validate_application(DEFN, make_app(spec={"replicas": 1}), group=GROUP)
    # a default that violates the schema is caught, because validation sees the defaulted spec
    broken = copy.deepcopy(SCHEMA)
    broken["properties"]["replicas"]["default"] = 0
    err = _raises(replace(DEFN, schema=broken), make_app(spec={}))
    assert [c["field"] for c in err.details["causes"]] == ["spec.replicas"]


def test_empty_schema_accepts_anything() -> None:
    defn = replace(DEFN, schema={})
    validate_application(defn, make_app(spec={"anything": [1, {"x": None}]}), group=GROUP)


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
    validate_application(
        DEFN,
        make_app(labels={"k" * 45: "v" * 63, "example.com/team": ""}, annotations={"note": "x" * 1000}),
        group=GROUP,
    )


def test_the_schema_validator_is_compiled_once_per_schema_revision() -> None:
    """The checks are compiled for a schema object once and reused by every request that validates against it;
    a new revision (a new parsed schema, from a changed definition) gets its own."""
    schema = copy.deepcopy(SCHEMA)
    first = validation._checks_for(schema)
    validate_application(replace(DEFN, schema=schema), make_app(spec={"replicas": 3}), group=GROUP)
    assert validation._checks_for(schema) is first
    assert validation._checks_for(copy.deepcopy(SCHEMA)) is not first


def test_a_spec_defaulted_by_the_caller_is_validated_as_given() -> None:
    """A write hands validation the spec mutating admission already defaulted: it is checked as it is, not defaulted
    again (a default the schema refuses shows that it was not)."""
    app = make_app(spec={"replicas": 3})
    defaulted = apply_defaults(SCHEMA, app["spec"])
    validate_application(DEFN, app, group=GROUP, defaulted=defaulted)
    with pytest.raises(ApiError) as info:
        validate_application(DEFN, app, group=GROUP, defaulted={**defaulted, "replicas": "three"})
    err = info.value
    assert err.code == 422 and [c["field"] for c in err.details["causes"]] == ["spec.replicas"]
