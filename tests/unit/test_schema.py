"""shared.schema: parsing, defaulting, validation causes and the structural rewrite."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.schema.defaults import apply_defaults, without_nulls
from shared.schema.structural import structural
from shared.schema.validation import parse_schema, schema_error, validate

FIXTURES = Path(__file__).resolve().parents[2] / "deploy" / "samples" / "definitions"

INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 8},
        "replicas": {"type": "integer", "default": 2, "minimum": 1},
        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
        "size": {**INT_OR_STRING, "default": "10Gi"},
        "resources": {
            "type": "object",
            "default": {},
            "properties": {
                "cpu": INT_OR_STRING,
                "limits": {
                    "type": "object",
                    "default": {},
                    "properties": {"burst": {"type": "boolean", "default": False}},
                },
            },
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id"],
                "properties": {"id": {"type": "string"}, "weight": {"type": "integer", "default": 1}},
            },
        },
        "users": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"admin": {"type": "boolean", "default": False}},
            },
        },
        "note": {"type": "string", "nullable": True, "default": "n/a"},
        "strict": {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}}},
    },
}


def postgres_schema() -> dict[str, Any]:
    obj = yaml.safe_load((FIXTURES / "postgres.yaml").read_text())
    return parse_schema(obj["spec"]["application"]["openAPISchema"])


# --------------------------------------------------------------------------- parse / schema_error


def test_parse_schema_accepts_object() -> None:
    assert parse_schema('{"type": "object"}') == {"type": "object"}


@pytest.mark.parametrize("text", ["{", "", "not json"])
def test_parse_schema_rejects_bad_json(text: str) -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_schema(text)


@pytest.mark.parametrize("text", ["[]", '"x"', "3", "null"])
def test_parse_schema_rejects_non_objects(text: str) -> None:
    with pytest.raises(ValueError, match="must be a JSON object"):
        parse_schema(text)


def test_schema_error_none_for_usable_schemas() -> None:
    assert schema_error(SCHEMA) is None
    assert schema_error(postgres_schema()) is None
    assert schema_error({}) is None


def test_schema_error_accepts_openapi_forms() -> None:
    schema = {
        "type": "integer",
        "minimum": 0,
        "exclusiveMinimum": True,
        "nullable": True,
        "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
        "example": 3,
    }
    assert schema_error(schema) is None


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ([], "must be a JSON object"),
        ({"type": "strange"}, "not a valid JSON schema"),
        ({"type": "object", "properties": {"a": {"type": 3}}}, "properties/a"),
        ({"type": "string", "pattern": "(unclosed"}, "not a valid JSON schema"),
        ({"type": "object", "required": "name"}, "not a valid JSON schema"),
        ({"$ref": "https://example.com/schema.json"}, "only references inside the schema"),
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
    ],
)
def test_schema_error_reports_problems(schema: Any, fragment: str) -> None:
    error = schema_error(schema)
    assert error is not None and fragment in error


def test_schema_error_allows_local_refs() -> None:
    schema = {
        "type": "object",
        "$defs": {"port": {"type": "integer"}},
        "properties": {"p": {"$ref": "#/$defs/port"}},
    }
    assert schema_error(schema) is None
    assert validate(schema, {"p": "x"})[0]["field"] == "spec.p"


# --------------------------------------------------------------------------- defaults


def test_apply_defaults_fills_missing_and_nested() -> None:
    value = {"name": "db", "items": [{"id": "a"}, {"id": "b", "weight": 5}], "users": {"alice": {}}}
    out = apply_defaults(SCHEMA, value)
    assert out["replicas"] == 2
    assert out["mode"] == "a"
    assert out["size"] == "10Gi"
    # default {} is itself defaulted, recursively
    assert out["resources"] == {"limits": {"burst": False}}
    assert out["items"] == [{"id": "a", "weight": 1}, {"id": "b", "weight": 5}]
    assert out["users"] == {"alice": {"admin": False}}
    assert "strict" not in out


def test_apply_defaults_does_not_mutate_input_or_defaults() -> None:
    schema = copy.deepcopy(SCHEMA)
    value = {"name": "db", "users": {"bob": {"admin": True}}}
    snapshot = copy.deepcopy(value)
    out = apply_defaults(schema, value)
    assert value == snapshot
    assert schema == SCHEMA
    out["resources"]["limits"]["burst"] = True
    assert schema["properties"]["resources"]["default"] == {}
    assert apply_defaults(schema, {})["resources"]["limits"]["burst"] is False


def test_apply_defaults_keeps_given_values() -> None:
    out = apply_defaults(SCHEMA, {"name": "x", "replicas": 7, "resources": {"limits": {"burst": True}}})
    assert out["replicas"] == 7
    assert out["resources"]["limits"]["burst"] is True


def test_apply_defaults_null_handling() -> None:
    out = apply_defaults(SCHEMA, {"name": "x", "replicas": None, "note": None})
    assert out["replicas"] == 2  # null on a non-nullable field is defaulted
    assert out["note"] is None  # nullable keeps the explicit null


def test_nulls_the_schema_does_not_allow_are_dropped_as_kube_does() -> None:
    """Found by the differential tier: a CRD drops a non-nullable null (then defaults it); a
    nullable one and nulls inside free-form values are kept."""
    value = {"name": None, "replicas": None, "note": None, "users": {"alice": {"admin": None}, "bob": None},
             "items": [{"id": "a", "weight": None}]}
    assert without_nulls(SCHEMA, value) == {"note": None, "users": {"alice": {}}, "items": [{"id": "a"}]}
    assert "name" not in apply_defaults(SCHEMA, {"name": None})  # no default: dropped, not kept as null
    assert without_nulls({"type": "object", "x-kubernetes-preserve-unknown-fields": True}, {"a": None}) == {"a": None}
    assert without_nulls({"properties": {"a": {"type": ["string", "null"]}}}, {"a": None}) == {"a": None}


def test_apply_defaults_non_objects_pass_through() -> None:
    assert apply_defaults(SCHEMA, None) is None
    assert apply_defaults({}, {"a": 1}) == {"a": 1}


def test_apply_defaults_postgres_fixture() -> None:
    out = apply_defaults(postgres_schema(), {})
    assert out["replicas"] == 2
    assert out["postgresql"] == {"parameters": {"max_connections": 100, "shared_buffers": "128MB"}}
    assert out["quorum"] == {"minSyncReplicas": 0, "maxSyncReplicas": 0}
    assert validate(postgres_schema(), out) == []


# --------------------------------------------------------------------------- validate


def test_validate_valid_value_has_no_causes() -> None:
    assert validate(SCHEMA, apply_defaults(SCHEMA, {"name": "db", "size": 3})) == []


def test_validate_one_cause_per_field_sorted() -> None:
    value = {
        "replicas": "three",
        "mode": "c",
        "size": 1.5,
        "items": [{"id": "a"}, {"weight": 2}],
        "users": {"alice": {"admin": "yes"}},
        "strict": {"a": "x", "zzz": 1},
    }
    causes = validate(SCHEMA, value)
    fields = [c["field"] for c in causes]
    assert fields == sorted(fields)
    by_field = {c["field"]: c for c in causes}
    assert by_field["spec.name"] == {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.name",
    }
    assert by_field["spec.replicas"]["reason"] == "FieldValueTypeInvalid"
    assert by_field["spec.replicas"]["message"] == (
        'Invalid value: "string": spec.replicas in body must be of type integer: "string"')
    assert by_field["spec.mode"]["reason"] == "FieldValueNotSupported"
    assert 'supported values: "a", "b"' in by_field["spec.mode"]["message"]
    assert by_field["spec.size"]["message"] == "Invalid value: 1.5: must be an integer or a string"
    assert by_field["spec.items[1].id"]["reason"] == "FieldValueRequired"
    assert by_field["spec.users.alice.admin"]["reason"] == "FieldValueTypeInvalid"
    assert by_field["spec.strict.zzz"]["message"] == 'unknown field "zzz"'
    assert len(causes) == len(set(fields))


def test_validate_bounds_and_lengths() -> None:
    causes = validate(SCHEMA, {"name": "a-very-long-name", "replicas": 0})
    by_field = {c["field"]: c for c in causes}
    assert by_field["spec.name"]["reason"] == "FieldValueTooLong"
    assert "may not be more than 8" in by_field["spec.name"]["message"]
    assert "greater than or equal to 1" in by_field["spec.replicas"]["message"]


def test_validate_path_prefix() -> None:
    assert validate(SCHEMA, {}, path="")[0]["field"] == "name"
    assert validate(SCHEMA, {}, path="spec.values")[0]["field"] == "spec.values.name"


def test_validate_nullable_and_exclusive_bounds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
            "s": {"type": "string", "nullable": True, "enum": ["x"]},
        },
    }
    assert validate(schema, {"n": 1, "s": None}) == []
    causes = validate(schema, {"n": 0})
    assert [c["field"] for c in causes] == ["spec.n"]
    assert "greater than 0" in causes[0]["message"]


def test_validate_top_level_type() -> None:
    causes = validate({"type": "object"}, [1])
    assert causes == [
        {
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "array": spec in body must be of type object: "array"',
            "field": "spec",
        }
    ]


def test_validate_cozystack_pattern_on_int_or_string() -> None:
    schema = postgres_schema()
    assert validate(schema, {"size": 10, "resources": {"cpu": "500m"}}) == []
    causes = validate(schema, {"size": "ten gigs"})
    assert [c["field"] for c in causes] == ["spec.size"]
    assert "should match" in causes[0]["message"]


def test_validate_does_not_check_unknown_formats() -> None:
    assert validate({"type": "string", "format": "int-or-whatever"}, "x") == []


# --------------------------------------------------------------------------- structural


def _walk(node: dict[str, Any], path: str = "spec") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], f"{path}[*]")
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], f"{path}[]")
    return out


def assert_structural(schema: dict[str, Any]) -> None:
    for path, node in _walk(schema):
        typed = (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert isinstance(node.get("type", ""), str), path
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), path
        for banned in (
            "$ref",
            "$defs",
            "$schema",
            "const",
            "examples",
            "prefixItems",
            "if",
            "patternProperties",
        ):
            assert banned not in node, f"{path} keeps {banned}"
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(bound, True), bool), path
    json.dumps(schema)


def test_structural_postgres_fixture_keeps_shape() -> None:
    out = structural(postgres_schema())
    assert_structural(out)
    props = out["properties"]
    assert props["replicas"] == {
        "description": props["replicas"]["description"],
        "default": 2,
        "minimum": 1,
        "maximum": 9,
        "type": "integer",
    }
    assert props["size"]["x-kubernetes-int-or-string"] is True
    assert props["size"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert props["users"]["additionalProperties"]["properties"]["password"]["type"] == "string"
    assert props["storageClass"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"


def test_structural_rewrites_draft_2020_keywords() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": {
            "tag": {"type": "string", "const": "x"},
            "node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}},
        },
        "properties": {
            "tag": {"$ref": "#/$defs/tag", "description": "the tag"},
            "maybe": {"type": ["string", "null"]},
            "count": {"type": "integer", "exclusiveMinimum": 0, "examples": [3]},
            "either": {"type": ["integer", "string"]},
            "anything": {},
            "free": {"type": "object"},
            "mixed": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "additionalProperties": {"type": "string"},
            },
            "list": {"type": "array"},
            "opt": {
                "anyOf": [{"type": "object", "properties": {"x": {"type": "integer"}}}, {"type": "null"}]
            },
            "tree": {"$ref": "#/$defs/node"},
            "inferred": {"enum": ["a", "b"]},
            "all": {
                "allOf": [
                    {"properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "integer"}}},
                ]
            },
            "choice": {"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 1}, {"type": "boolean"}]},
            "mapPat": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
        },
    }
    assert schema_error(schema) is None
    out = structural(schema)
    assert_structural(out)
    p = out["properties"]
    assert out["type"] == "object"
    assert p["tag"] == {"description": "the tag", "enum": ["x"], "type": "string"}
    assert p["maybe"] == {"nullable": True, "type": "string"}
    assert p["count"] == {"minimum": 0, "exclusiveMinimum": True, "example": 3, "type": "integer"}
    assert p["either"]["x-kubernetes-int-or-string"] is True and "type" not in p["either"]
    assert p["anything"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert p["free"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert p["mixed"]["properties"] == {"a": {"type": "string"}}
    assert p["mixed"]["x-kubernetes-preserve-unknown-fields"] is True
    assert p["list"]["items"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert p["opt"]["nullable"] is True and p["opt"]["properties"]["x"]["type"] == "integer"
    assert "anyOf" not in p["opt"]
    # a recursive $ref is cut where it repeats
    assert p["tree"]["properties"]["child"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert p["inferred"]["type"] == "string"
    assert p["all"]["type"] == "object" and set(p["all"]["properties"]) == {"a", "b"}
    assert p["all"]["required"] == ["a"]
    assert p["choice"] == {"x-kubernetes-preserve-unknown-fields": True}
    assert p["mapPat"]["x-kubernetes-preserve-unknown-fields"] is True


def test_structural_does_not_mutate_input() -> None:
    schema = postgres_schema()
    snapshot = copy.deepcopy(schema)
    out = structural(schema)
    out["properties"]["replicas"]["default"] = 99
    assert schema == snapshot


def test_structural_of_empty_schema_is_free_form() -> None:
    assert structural({}) == {"x-kubernetes-preserve-unknown-fields": True}


def test_structural_keeps_preserve_unknown_fields_on_any_type() -> None:
    schema = {
        "type": "object",
        "properties": {
            "raw": {
                "type": "array",
                "x-kubernetes-preserve-unknown-fields": True,
                "items": {"type": "object"},
            },
            "blob": {
                "type": "object",
                "properties": {"a": {"type": "string"}},
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    }
    out = structural(schema)["properties"]
    assert out["raw"]["x-kubernetes-preserve-unknown-fields"] is True
    assert out["raw"]["items"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert out["blob"]["properties"] == {"a": {"type": "string"}}
    assert out["blob"]["x-kubernetes-preserve-unknown-fields"] is True
