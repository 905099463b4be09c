"""Validation of incoming Applications: every check, with the Status kubectl shows."""

from __future__ import annotations

from typing import Any

import pytest

from shared.api.errors import ApiError
from shared.schema.defaults import apply_defaults
from tests.unit.tofu_samples import GROUP, Defn, app, causes, defn
from tofu_agl.build import build
from tofu_agl.names import APPROVE_ANNOTATION, RUNNER_SA_ANNOTATION
from tofu_agl.validate import validate_application


def test_valid_application_passes() -> None:
    validate_application(Defn(), app(), group=GROUP)
    validate_application(Defn(), app(spec=None) | {"spec": None}, group=GROUP)


@pytest.mark.parametrize("name", ["Net", "1net", "net_", "net-", ""])
def test_name_must_be_dns1035(name: str) -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(name), group=GROUP)
    assert exc.value.code == 422
    assert "metadata.name" in causes(exc)


def test_name_length_leaves_room_for_prefix_and_runner_suffix() -> None:
    d = Defn()  # prefix "vpc-" (4) -> 49 chars
    validate_application(d, app("a" * 49), group=GROUP)
    with pytest.raises(ApiError) as exc:
        validate_application(d, app("a" * 50), group=GROUP)
    assert exc.value.code == 422
    assert "49" in causes(exc)["metadata.name"]["message"]
    tf = build(d, app("a" * 49), group=GROUP)
    assert len(tf["metadata"]["name"] + "-tf-runner") <= 63


def test_spec_must_be_object() -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(spec=["x"]), group=GROUP)
    assert (exc.value.code, exc.value.reason) == (422, "Invalid")  # as for a custom resource


def test_underscore_keys_rejected() -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(spec={"_internal": 1}), group=GROUP)
    assert exc.value.code == 400


def test_unknown_keys_rejected_one_cause_each() -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(spec={"cidrBlock": "x", "foo": 1, "barBaz": 2}), group=GROUP)
    assert exc.value.code == 422
    got = causes(exc)
    assert set(got) == {"spec.foo", "spec.barBaz"}
    assert 'unknown field "foo"' in got["spec.foo"]["message"]


def test_schema_violations_after_defaulting_per_field() -> None:
    spec = {"nodeCount": 0, "public": "yes", "subnets": [{"cidrBlock": 5}]}
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(spec=spec), group=GROUP)
    assert exc.value.code == 422
    assert {"spec.nodeCount", "spec.public", "spec.subnets[0].cidrBlock"} <= set(causes(exc))


def test_default_violating_required_is_reported_after_defaulting() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "required": ["size"],
        "properties": {"size": {"type": "string"}},
    }
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(schema=schema), app(spec={}), group=GROUP)
    assert "spec.size" in causes(exc)
    schema["properties"]["size"]["default"] = "small"
    validate_application(Defn(schema=schema), app(spec={}), group=GROUP)


def test_runner_sa_annotation_rejected_without_override() -> None:
    a = app(annotations={RUNNER_SA_ANNOTATION: "tenant-sa"})
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), a, group=GROUP)
    assert exc.value.code == 422
    field_name = f"metadata.annotations[{RUNNER_SA_ANNOTATION}]"
    assert causes(exc)[field_name]["reason"] == "FieldValueForbidden"
    validate_application(defn(allow_service_account_override=True), a, group=GROUP)


def test_runner_sa_annotation_must_be_a_valid_name() -> None:
    a = app(annotations={RUNNER_SA_ANNOTATION: "Bad_SA"})
    with pytest.raises(ApiError) as exc:
        validate_application(defn(allow_service_account_override=True), a, group=GROUP)
    assert exc.value.code == 422


def test_key_clash_is_a_duplicate_field() -> None:
    d = Defn()
    with pytest.raises(ApiError) as exc:
        validate_application(d, app(spec={"network": {"natGateway": {"perAz": True, "per_az": False}}}), group=GROUP)
    assert exc.value.code == 422
    assert exc.value.details["causes"][0]["reason"] == "FieldValueDuplicate"


# --------------------------------------------------------------------------- metadata, as helm_agl checks it


def all_causes(exc: pytest.ExceptionInfo[ApiError]) -> list[tuple[str, str, str]]:
    return [(c["field"], c["reason"], c["message"]) for c in exc.value.details["causes"]]


def test_name_is_required() -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(""), group=GROUP)
    assert all_causes(exc) == [("metadata.name", "FieldValueRequired", "Required value: name is required")]


def test_name_is_not_rechecked_on_update() -> None:
    """Names are immutable: an existing object stays editable if the naming rules tightened."""
    d = Defn()
    live = build(d, app("a" * 49), group=GROUP)
    validate_application(Defn(prefix="a-much-longer-prefix-"), app("a" * 49), group=GROUP, live=live)


def test_label_key_is_checked_as_stored_behind_the_prefix() -> None:
    # 50 characters is a valid label name alone, but not behind "apps.cozystack.io-" (63 at most).
    long_key = "k" * 50
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(labels={long_key: "v", "ok": "v"}), group=GROUP)
    assert exc.value.code == 422
    [(field, reason, message)] = all_causes(exc)
    assert (field, reason) == ("metadata.labels", "FieldValueInvalid")
    assert message.startswith(f'Invalid value: "{long_key}": ')
    assert message.endswith(f'(stored as "apps.cozystack.io-{long_key}")')


@pytest.mark.parametrize("field", ["labels", "annotations"])
def test_label_and_annotation_keys_must_be_valid(field: str) -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(**{field: {"bad key": "v"}}), group=GROUP)
    [(path, _, message)] = all_causes(exc)
    assert path == f"metadata.{field}"
    assert message.startswith('Invalid value: "bad key": ')


def test_label_values_must_be_label_values_annotation_values_need_not() -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(labels={"team": "not a value!"}), group=GROUP)
    [(path, _, message)] = all_causes(exc)
    assert path == "metadata.labels"
    assert message.startswith("Invalid value: ")
    validate_application(Defn(), app(annotations={"note": "any text, even this!"}), group=GROUP)


@pytest.mark.parametrize("field", ["labels", "annotations"])
def test_values_must_be_strings_and_maps_must_be_maps(field: str) -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(**{field: {"count": 3}}), group=GROUP)
    assert all_causes(exc) == [
        (f"metadata.{field}", "FieldValueTypeInvalid", 'Invalid value: "count": value must be a string')
    ]
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(**{field: ["x"]}), group=GROUP)
    assert all_causes(exc) == [
        (f"metadata.{field}", "FieldValueTypeInvalid", "Invalid value: must be a map of strings")
    ]


def test_metadata_is_checked_before_the_spec() -> None:
    with pytest.raises(ApiError) as exc:
        validate_application(Defn(), app(labels={"bad key": "v"}, spec=["not", "an", "object"]), group=GROUP)
    assert exc.value.code == 422


# --------------------------------------------------------------------------- approval, decided by approval.py


def test_approval_on_create_is_rejected_nothing_is_pending() -> None:
    a = app(annotations={APPROVE_ANNOTATION: "plan-main-abc"})
    with pytest.raises(ApiError) as exc:
        validate_application(defn(approve_plan="manual"), a, group=GROUP)
    assert exc.value.code == 422
    assert "no plan is waiting for approval" in causes(exc)[f"metadata.annotations[{APPROVE_ANNOTATION}]"]["message"]


def test_approval_is_checked_after_everything_else() -> None:
    a = app(spec={"nodeCount": 0}, annotations={APPROVE_ANNOTATION: "plan-main-abc"})
    with pytest.raises(ApiError) as exc:
        validate_application(defn(approve_plan="manual"), a, group=GROUP)
    assert set(causes(exc)) == {"spec.nodeCount"}


def _with_pending(spec: Any = None) -> dict[str, Any]:
    d = defn(approve_plan="manual")
    live = build(d, app(spec=spec), group=GROUP)
    live["status"] = {"plan": {"pending": "plan-main-abc"}}
    return live


def test_approving_while_changing_spec_is_rejected_under_manual_only() -> None:
    live = _with_pending()
    changed = app(spec={"cidrBlock": "10.9.0.0/16"}, annotations={APPROVE_ANNOTATION: "plan-main-abc"})
    with pytest.raises(ApiError) as exc:
        validate_application(defn(approve_plan="manual"), changed, group=GROUP, live=live)
    assert causes(exc)[f"metadata.annotations[{APPROVE_ANNOTATION}]"]["reason"] == "FieldValueForbidden"
    validate_application(Defn(), changed, group=GROUP, live=live)
    same = app(annotations={APPROVE_ANNOTATION: "plan-main-abc"})
    validate_application(defn(approve_plan="manual"), same, group=GROUP, live=live)


def test_a_spec_defaulted_by_the_caller_is_validated_as_given() -> None:
    """A write hands validation the spec mutating admission already defaulted: the answer is the one validation
    gives when it defaults the spec itself (an undeclared key included), and the spec is checked as it is handed
    over (a value the schema refuses shows it was not defaulted again)."""
    d = Defn()
    sent = app(spec={"cidrBlock": "10.0.0.0/16", "bogus": 1})
    with pytest.raises(ApiError) as own:
        validate_application(d, sent, group=GROUP)
    defaulted = apply_defaults(d.schema, sent["spec"])
    with pytest.raises(ApiError) as handed:
        validate_application(d, sent, group=GROUP, defaulted=defaulted)
    assert causes(handed) == causes(own) and set(causes(own)) == {"spec.bogus"}
    with pytest.raises(ApiError) as refused:
        validate_application(d, app(), group=GROUP, defaulted={**defaulted, "cidrBlock": 16})
    assert set(causes(refused)) == {"spec.cidrBlock"}
