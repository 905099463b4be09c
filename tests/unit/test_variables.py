"""tofu_agl.variables: naming of OpenTofu variables and the spec <-> ``vars`` marshalling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.tofu_samples import Defn, defn
from tofu_agl.variables import (
    RESERVED,
    VARIABLE_NAME,
    marshal_vars,
    naming_problems,
    object_property_names,
    to_snake_case,
    unmarshal_vars,
    variable_name,
    variable_name_error,
)

#: The name rule's boundaries, shared with the check against real OpenTofu.
NAMES: dict[str, list[str]] = yaml.safe_load(
    (Path(__file__).resolve().parents[1] / "data" / "modules" / "variable-names.yaml").read_text()
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cidrBlock": {"type": "string"},
        "natGateway": {"type": "object", "properties": {"singleNatGateway": {"type": "boolean"}}},
        "subnets": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "availabilityZone": {"type": "string"},
                    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
        "matrix": {
            "type": "array",
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"cellValue": {"type": "integer"}}},
            },
        },
        "tags": {
            "type": "object",
            "additionalProperties": {"type": "object", "properties": {"ownerName": {}}},
        },
    },
}


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("cidrBlock", "cidr_block"),
        ("HTTPPort", "http_port"),
        ("already_snake", "already_snake"),
        ("dbName2", "db_name2"),
        ("enableDNSHostnames", "enable_dns_hostnames"),
        ("node-count", "node_count"),
        ("a", "a"),
        ("ID", "id"),
        ("_private", "_private"),
    ],
)
def test_to_snake_case(key: str, expected: str) -> None:
    assert to_snake_case(key) == expected


def test_to_snake_case_is_idempotent() -> None:
    for key in ("cidrBlock", "HTTPPort", "dbName2", "x_y_z"):
        once = to_snake_case(key)
        assert to_snake_case(once) == once


def test_variable_name_modes() -> None:
    assert variable_name("cidrBlock", "snake_case") == "cidr_block"
    assert variable_name("cidrBlock", "verbatim") == "cidrBlock"
    with pytest.raises(ValueError, match="unknown variable naming"):
        variable_name("x", "camelCase")


def test_reserved_names() -> None:
    """OpenTofu v1.10's moduleBlockSchema: the module block's attributes and block types."""
    assert {
        "source",
        "version",
        "count",
        "for_each",
        "depends_on",
        "providers",
        "_",
        "lifecycle",
        "locals",
        "provider",
    } == RESERVED
    for name in RESERVED:
        error = variable_name_error(name)
        assert error is not None and "reserved" in error


@pytest.mark.parametrize("name", NAMES["valid"])
def test_variable_name_valid(name: str) -> None:
    assert variable_name_error(name) is None
    assert VARIABLE_NAME.fullmatch(name)


@pytest.mark.parametrize("name", NAMES["invalid"] + NAMES["non_ascii"])
def test_variable_name_invalid(name: str) -> None:
    error = variable_name_error(name)
    assert error is not None and "must match" in error


def test_object_property_names_snake_case() -> None:
    assert object_property_names(SCHEMA, "snake_case") == [
        ("cidrBlock", "cidr_block"),
        ("natGateway", "nat_gateway"),
        ("natGateway.singleNatGateway", "single_nat_gateway"),
        ("subnets", "subnets"),
        ("subnets[].availabilityZone", "availability_zone"),
        ("subnets[].tags", "tags"),
        ("matrix", "matrix"),
        ("matrix[][].cellValue", "cell_value"),
        ("tags", "tags"),
    ]


def test_object_property_names_verbatim_and_no_free_form_maps() -> None:
    names = dict(object_property_names(SCHEMA, "verbatim"))
    assert names["natGateway.singleNatGateway"] == "singleNatGateway"
    # nothing below an additionalProperties map
    assert not any(path.startswith("tags.") or path.startswith("subnets[].tags.") for path in names)


def test_object_property_names_of_non_object_schema() -> None:
    assert object_property_names({"type": "string"}, "snake_case") == []


def test_naming_problems_clean_schema() -> None:
    assert naming_problems(SCHEMA, "snake_case") == []


def test_naming_problems_verbatim_keeps_camel_case() -> None:
    """OpenTofu identifiers may be camelCase, so verbatim serves a schema of camelCase properties."""
    assert naming_problems(SCHEMA, "verbatim") == []
    bad = {"type": "object", "properties": {"recordSet": {}, "2fa": {}, "-x": {}}}
    problems = naming_problems(bad, "verbatim")
    assert len(problems) == 2
    assert any("'2fa'" in p and "must match" in p for p in problems)
    assert any("'-x'" in p and "must match" in p for p in problems)


def test_naming_problems_reserved_and_collisions() -> None:
    schema = {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "cidrBlock": {"type": "string"},
            "cidr_block": {"type": "string"},
            "net": {"type": "object", "properties": {"zoneId": {}, "zone_id": {}, "ZoneID": {}, "count": {}}},
            "my.key": {"type": "string"},
        },
    }
    problems = naming_problems(schema, "snake_case")
    assert "property 'count': variable name 'count' is reserved by OpenTofu" in problems
    assert "properties 'cidrBlock' and 'cidr_block' both map to 'cidr_block'" in problems
    assert "properties 'zoneId' and 'zone_id' in 'net' both map to 'zone_id'" in problems
    assert "properties 'zoneId' and 'ZoneID' in 'net' both map to 'zone_id'" in problems
    assert any("'my.key'" in p for p in problems)
    # a nested attribute may be called like a reserved top-level name
    assert not any("'net.count'" in p for p in problems)


def test_naming_same_name_at_different_levels_is_fine() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "child": {"type": "object", "properties": {"name": {}}}},
    }
    assert naming_problems(schema, "snake_case") == []


# --------------------------------------------------------------------------- marshalling


def test_marshal_round_trip_through_nested_items() -> None:
    spec = {
        "cidrBlock": "10.0.0.0/16",
        "natGateway": {"singleNatGateway": True},
        "subnets": [{"availabilityZone": "a", "tags": {"costCenter": "x"}}],
        "matrix": [[{"cellValue": 1}]],
        "tags": {"teamName": {"ownerName": "me"}},
    }
    forward = marshal_vars(SCHEMA, "snake_case", spec)
    assert {v["name"]: v["value"] for v in forward} == {
        "cidr_block": "10.0.0.0/16",
        "nat_gateway": {"single_nat_gateway": True},
        "subnets": [{"availability_zone": "a", "tags": {"costCenter": "x"}}],
        "matrix": [[{"cell_value": 1}]],
        "tags": {"teamName": {"ownerName": "me"}},
    }
    assert unmarshal_vars(SCHEMA, "snake_case", forward) == spec
    assert spec["natGateway"] == {"singleNatGateway": True}


def test_marshal_verbatim_copies() -> None:
    spec = {"cidrBlock": {"a": [1]}}
    [out] = marshal_vars(SCHEMA, "verbatim", spec)
    assert out == {"name": "cidrBlock", "value": {"a": [1]}}
    assert out["value"] is not spec["cidrBlock"] and out["value"]["a"] is not spec["cidrBlock"]["a"]


def test_vars_keep_json_types_and_are_sorted() -> None:
    d = Defn()
    spec = {"region": "us-east-1", "nodeCount": 5, "public": True, "ratio": 0.5, "zones": ["a", "b"]}
    out = marshal_vars(d.schema, d.terraform.variable_naming, spec)
    assert [v["name"] for v in out] == sorted(v["name"] for v in out)
    assert {v["name"]: v["value"] for v in out} == {
        "region": "us-east-1",
        "node_count": 5,
        "public": True,
        "ratio": 0.5,
        "zones": ["a", "b"],
    }
    assert isinstance(out[0]["value"], type(out[0]["value"]))


def test_snake_case_converts_declared_keys_at_every_depth_but_not_map_keys() -> None:
    d = Defn()
    spec = {
        "cidrBlock": "10.0.0.0/16",
        "subnets": [{"cidrBlock": "10.0.1.0/24", "availabilityZone": "b"}],
        "tags": {"teamName": "x", "cost-center": "y"},
        "network": {
            "enableDns": False,
            "natGateway": {"perAz": True},
            "extraRoutes": {"someKey": {"innerKey": 1}},
        },
    }
    got = {v["name"]: v["value"] for v in marshal_vars(d.schema, d.terraform.variable_naming, spec)}
    assert got["cidr_block"] == "10.0.0.0/16"
    assert got["subnets"] == [{"cidr_block": "10.0.1.0/24", "availability_zone": "b"}]
    assert got["tags"] == {"teamName": "x", "cost-center": "y"}
    assert got["network"] == {
        "enable_dns": False,
        "nat_gateway": {"per_az": True},
        "extra_routes": {"someKey": {"innerKey": 1}},
    }
    naming = d.terraform.variable_naming
    assert unmarshal_vars(d.schema, naming, marshal_vars(d.schema, naming, spec)) == spec


def test_verbatim_passes_keys_as_written() -> None:
    schema = {
        "type": "object",
        "properties": {"cidr_block": {"type": "string"}, "net": Defn().schema["properties"]["network"]},
    }
    d = defn(variable_naming="verbatim", schema=schema)
    spec = {"cidr_block": "x", "net": {"enableDns": True, "natGateway": {"perAz": False}}}
    got = marshal_vars(d.schema, d.terraform.variable_naming, spec)
    assert got == [
        {"name": "cidr_block", "value": "x"},
        {"name": "net", "value": {"enableDns": True, "natGateway": {"perAz": False}}},
    ]
    assert unmarshal_vars(d.schema, d.terraform.variable_naming, got) == spec


def test_nested_values_are_never_flattened() -> None:
    d = Defn()
    got = marshal_vars(d.schema, d.terraform.variable_naming, {"subnets": [{"cidrBlock": "a"}, {"cidrBlock": "b"}]})
    assert got == [{"name": "subnets", "value": [{"cidr_block": "a"}, {"cidr_block": "b"}]}]


def test_unmarshal_skips_value_from_and_keeps_unknown_names() -> None:
    d = Defn()
    spec = unmarshal_vars(d.schema, d.terraform.variable_naming,
        [
            {"name": "node_count", "value": 2},
            {"name": "secret", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "hand_written", "value": "x"},
        ],
    )
    assert spec == {"nodeCount": 2, "hand_written": "x"}


def test_key_clash_is_an_error() -> None:
    d = Defn()
    with pytest.raises(ValueError, match="per_az"):
        marshal_vars(d.schema, d.terraform.variable_naming,
                     {"network": {"natGateway": {"perAz": True, "per_az": False}}})
    with pytest.raises(ValueError, match=r'^spec\.nodeCount: becomes variable "node_count"'):
        marshal_vars(d.schema, d.terraform.variable_naming, {"node_count": 1, "nodeCount": 2})
