"""tofu_agl.generate: a TofuApplicationDefinition from an OpenTofu module.

The modules under tests/data/modules were written for these tests: ``network`` uses every
construct the generator maps (and plans with real OpenTofu, see
tests/integration/test_generated_definitions.py); ``edges`` holds what is reported or kept as text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.schema.defaults import apply_defaults
from shared.schema.validation import schema_error, validate
from tofu_agl.definition import TofuApplicationDefinition, acceptance
from tofu_agl.generate.__main__ import main, plural_of
from tofu_agl.generate.definition import SENSITIVE_OUTPUTS
from tofu_agl.generate.hcl import parse_expression, read_module
from tofu_agl.generate.types import Naming, camel_case, type_schema
from tofu_agl.generate.validation import translate
from tofu_agl.variables import SENSITIVE, marshal_vars

MODULES = Path(__file__).resolve().parents[1] / "data" / "modules"


def generate(capsys: pytest.CaptureFixture[str], module: str, *flags: str) -> tuple[dict[str, Any], list[str]]:
    """(definition, stderr lines) of the CLI run on a fixture module."""
    assert main([str(MODULES / module), *flags]) == 0
    out, err = capsys.readouterr()
    definition: dict[str, Any] = yaml.safe_load(out)
    return definition, err.splitlines()


def schema_of(definition: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(definition["spec"]["application"]["openAPISchema"])
    return schema


@pytest.fixture
def network(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], list[str]]:
    return generate(capsys, "network", "--kind", "Network", "--source-name", "modules",
                    "--source-namespace", "cozy-system", "--path", "./network", "--approve-plan", "manual")


@pytest.fixture
def edges(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], list[str]]:
    return generate(capsys, "edges", "--kind", "DNSZone")


# ------------------------------------------------------------------------------ the definition


def test_definition_frame(network: tuple[dict[str, Any], list[str]]) -> None:
    definition, _ = network
    assert definition["apiVersion"] == "cozystack.io/v1alpha1"
    assert definition["kind"] == "TofuApplicationDefinition"
    assert definition["metadata"] == {"name": "network"}
    application = definition["spec"]["application"]
    assert (application["kind"], application["plural"], application["singular"]) == ("Network", "networks", "network")
    assert definition["spec"]["release"] == {"prefix": "network-", "labels": {}}
    terraform = definition["spec"]["terraform"]
    assert terraform["sourceRef"] == {"kind": "GitRepository", "name": "modules", "namespace": "cozy-system"}
    assert terraform["path"] == "./network"
    assert terraform["approvePlan"] == "manual"
    assert terraform["variableNaming"] == "snake_case"


def test_definition_is_accepted_by_tofu_agl(network: tuple[dict[str, Any], list[str]]) -> None:
    verdict = acceptance(TofuApplicationDefinition.from_object(network[0]), [])
    assert verdict.accepted, verdict.message


def test_network_schema_is_valid_and_translates_everything(network: tuple[dict[str, Any], list[str]]) -> None:
    definition, problems = network
    assert schema_error(schema_of(definition)) is None
    assert problems == []


def test_outputs_with_sensitive_ones_marked(network: tuple[dict[str, Any], list[str]]) -> None:
    outputs = network[0]["spec"]["terraform"]["writeOutputsToSecret"]
    assert outputs == {
        "name": "{{ .name }}-outputs",
        "outputs": ["network_id", "subnet_cidrs", "admin_password"],
        "annotations": {SENSITIVE_OUTPUTS: "admin_password"},
    }


def test_no_outputs_no_secret(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text('variable "x" {\n  type = string\n}\n')
    assert main([str(tmp_path), "--kind", "X"]) == 0
    assert "writeOutputsToSecret" not in yaml.safe_load(capsys.readouterr().out)["spec"]["terraform"]


def test_defaults_of_plural_and_source(capsys: pytest.CaptureFixture[str]) -> None:
    definition, _ = generate(capsys, "network", "--kind", "Policy")
    assert definition["spec"]["application"]["plural"] == "policies"
    assert definition["spec"]["terraform"]["sourceRef"] == {"kind": "GitRepository", "name": "network"}
    assert "path" not in definition["spec"]["terraform"]
    assert definition["spec"]["terraform"]["approvePlan"] == "auto"


@pytest.mark.parametrize(
    ("singular", "plural"),
    [("vpc", "vpcs"), ("dnszone", "dnszones"), ("policy", "policies"), ("gateway", "gateways"),
     ("address", "addresses"), ("mesh", "meshes"), ("box", "boxes")],
)
def test_plural_of(singular: str, plural: str) -> None:
    assert plural_of(singular) == plural


def test_bad_kind_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([str(MODULES / "network"), "--kind", "network"])
    assert "--kind" in capsys.readouterr().err


def test_unreadable_module(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([str(tmp_path), "--kind", "X"]) == 1
    assert "no *.tf or *.tofu files" in capsys.readouterr().err
    (tmp_path / "main.tf").write_text('variable "x" {\n  type = \n}\n')
    assert main([str(tmp_path), "--kind", "X"]) == 1
    assert "main.tf" in capsys.readouterr().err


# ------------------------------------------------------------------------------ type mapping


def test_primitives_validations_and_descriptions(network: tuple[dict[str, Any], list[str]]) -> None:
    props = schema_of(network[0])["properties"]
    assert props["region"] == {
        "description": "Region the network lives in.",
        "type": "string",
        "default": "eu-west-1",
        "enum": ["eu-west-1", "eu-central-1", "us-east-1"],
    }
    assert props["cidrBlock"]["pattern"] == "^[0-9.]+/[0-9]+$"
    assert props["namePrefix"] == {"type": "string", "default": "net", "minLength": 2, "maxLength": 12}
    assert props["maxSubnets"] == {"type": "number", "default": 4, "minimum": 1, "exclusiveMaximum": 16}


def test_deep_nesting_with_optional_defaults_in_lists_of_objects(network: tuple[dict[str, Any], list[str]]) -> None:
    subnets = schema_of(network[0])["properties"]["subnets"]
    assert subnets["type"] == "array" and subnets["maxItems"] == 6
    subnet = subnets["items"]
    assert subnet["required"] == ["availabilityZone", "cidrBlock"]
    assert subnet["properties"]["public"] == {"type": "boolean", "default": False}
    assert subnet["properties"]["tags"] == {
        "type": "object", "additionalProperties": {"type": "string"}, "default": {}}
    nat = subnet["properties"]["natGateway"]
    assert "default" not in nat and nat["required"] == ["enabled"]
    assert nat["properties"]["elasticIpIds"] == {
        "type": "array", "items": {"type": "string"}, "uniqueItems": True, "default": []}
    route = nat["properties"]["routes"]["items"]
    assert route == {
        "type": "object",
        "properties": {
            "destinationCidr": {"type": "string"},
            "nextHopType": {"type": "string", "default": "gateway"},
        },
        "required": ["destinationCidr"],
    }
    # the variable's default, its keys renamed like the properties
    assert subnets["default"] == [
        {"availabilityZone": "a", "cidrBlock": "10.0.1.0/24"},
        {"availabilityZone": "b", "cidrBlock": "10.0.2.0/24", "public": True,
         "natGateway": {"enabled": True, "routes": [{"destinationCidr": "0.0.0.0/0"}]}},
    ]


def test_set_tuple_map_any_nullable(network: tuple[dict[str, Any], list[str]]) -> None:
    props = schema_of(network[0])["properties"]
    assert props["dnsServers"] == {
        "type": "array", "items": {"type": "string"}, "uniqueItems": True, "default": ["10.0.0.2"]}
    assert props["portRange"] == {
        "description": "First and last port opened to the network.",
        "type": "array",
        "prefixItems": [{"type": "number"}, {"type": "number"}],
        "minItems": 2,
        "maxItems": 2,
        "default": [1024, 65535],
    }
    assert props["tags"] == {
        "type": "object", "additionalProperties": {"type": "string"}, "default": {"team": "platform"}}
    assert props["extra"] == {"description": "Free-form settings.", "default": {}}
    # default = null: optional, no default; nullable = true is kept
    assert props["flowLogRetentionDays"] == {"type": "number", "nullable": True}


def test_map_values_keep_their_attribute_names(network: tuple[dict[str, Any], list[str]]) -> None:
    """tofu_agl converts names only through properties and items, so map values stay verbatim."""
    peerings = schema_of(network[0])["properties"]["peerings"]
    assert peerings["additionalProperties"]["properties"].keys() == {"remote_cidr", "allow_dns"}
    assert peerings["default"] == {"shared": {"remote_cidr": "10.1.0.0/16"}}


def test_sensitive_variable_marked_and_its_default_not_published(network: tuple[dict[str, Any], list[str]]) -> None:
    schema = schema_of(network[0])
    password = schema["properties"]["adminPassword"]
    assert password == {"type": "string", SENSITIVE: True, "minLength": 12}
    assert "adminPassword" not in schema.get("required", [])
    assert "change-me-please" not in network[0]["spec"]["application"]["openAPISchema"]


def test_only_defaults_yields_the_modules_own_values(network: tuple[dict[str, Any], list[str]]) -> None:
    """An empty spec, defaulted, becomes the variables OpenTofu would compute from its defaults."""
    definition = TofuApplicationDefinition.from_object(network[0])
    spec = apply_defaults(definition.schema, {})
    naming = definition.terraform.variable_naming
    tf_vars = {v["name"]: v["value"] for v in marshal_vars(definition.schema, naming, spec)}
    assert tf_vars["subnets"] == [
        {"availability_zone": "a", "cidr_block": "10.0.1.0/24", "public": False, "tags": {}},
        {"availability_zone": "b", "cidr_block": "10.0.2.0/24", "public": True, "tags": {},
         "nat_gateway": {"enabled": True, "elastic_ip_ids": [],
                         "routes": [{"destination_cidr": "0.0.0.0/0", "next_hop_type": "gateway"}]}},
    ]
    assert tf_vars["peerings"] == {"shared": {"remote_cidr": "10.1.0.0/16", "allow_dns": True}}
    assert set(tf_vars) == {"region", "cidr_block", "name_prefix", "max_subnets", "subnets", "dns_servers",
                            "port_range", "peerings", "tags", "extra"}


def test_translated_validations_are_enforced(network: tuple[dict[str, Any], list[str]]) -> None:
    schema = schema_of(network[0])
    assert validate(schema, {"region": "eu-west-1", "maxSubnets": 15, "namePrefix": "ab"}) == []
    bad = {"region": "mars-1", "cidrBlock": "x", "namePrefix": "a", "maxSubnets": 16,
           "subnets": [{"availabilityZone": "a", "cidrBlock": "c"}] * 7, "portRange": [1]}
    fields = {cause["field"] for cause in validate(schema, bad)}
    assert {"spec.region", "spec.cidrBlock", "spec.namePrefix", "spec.maxSubnets", "spec.subnets",
            "spec.portRange"} <= fields


def test_verbatim_naming_keeps_module_names(capsys: pytest.CaptureFixture[str]) -> None:
    definition, problems = generate(capsys, "edges", "--kind", "DNSZone", "--variable-naming", "verbatim")
    props = schema_of(definition)["properties"]
    assert {"zone_name", "recordSet", "node-count", "a_b_c"} <= props.keys()
    assert not any("converts back" in p for p in problems)
    verdict = acceptance(TofuApplicationDefinition.from_object(definition), [])
    assert verdict.accepted, verdict.message


# ------------------------------------------------------------------------------ edges and reports


def test_required_untyped_null_default_and_heredoc(edges: tuple[dict[str, Any], list[str]]) -> None:
    schema = schema_of(edges[0])
    assert schema["required"] == ["zoneName", "untyped", "records"]
    props = schema["properties"]
    assert props["zoneName"] == {
        "description": 'DNS zone, "example.org" style.\nWithout the final dot.', "type": "string"}
    assert props["recordTtl"] == {"type": "number"}
    assert props["owner"] == {"default": "nobody", "nullable": True}
    assert props["untyped"] == {}
    assert props["records"]["items"]["properties"]["ttl"] == {"type": "number"}


def test_heredoc_default_is_the_string_opentofu_reads(edges: tuple[dict[str, Any], list[str]]) -> None:
    # `tofu plan` with jsonencode(var.motd) shows exactly this value: quotes and backslashes as written
    assert schema_of(edges[0])["properties"]["motd"]["default"] == 'Hello "world"\n  \\n stays\n'


def test_snake_case_name_without_camel_case_form_is_kept(edges: tuple[dict[str, Any], list[str]]) -> None:
    # a_b_c -> aBC would convert back to a_bc
    assert "a_b_c" in schema_of(edges[0])["properties"]


def test_tuple_elements_keep_their_attribute_names(edges: tuple[dict[str, Any], list[str]]) -> None:
    endpoint = schema_of(edges[0])["properties"]["endpoint"]
    assert endpoint["prefixItems"][1]["properties"].keys() == {"port_number"}
    assert endpoint["default"] == ["localhost", {"port_number": 53}]


def test_equality_and_or_become_an_enum_and_collisions_stay_text(edges: tuple[dict[str, Any], list[str]]) -> None:
    mode = schema_of(edges[0])["properties"]["mode"]
    assert mode["enum"] == ["fast", "safe"]
    # the second validation would set enum again: kept as text instead
    assert "pattern" not in mode
    assert 'can(regex("^[a-z]+$", var.mode))' in mode["description"]


def test_each_unsupported_construct_is_reported(edges: tuple[dict[str, Any], list[str]]) -> None:
    definition, problems = edges
    assert problems == [
        "warning: variable 'recordSet': no property name converts back to 'recordSet' under variableNaming "
        "snake_case; left out (use --variable-naming verbatim)",
        "warning: variable 'node-count': no property name converts back to 'node-count' under variableNaming "
        "snake_case; left out (use --variable-naming verbatim)",
        "warning: variable 'records': validation `alltrue([for r in var.records : r.ttl == null || r.ttl > 0])` "
        "kept as text in the description",
        "warning: variable 'endpoint': validation `var.endpoint[1].port_number > 0` kept as text in the description",
        "warning: variable 'token': attribute 'deprecated' is not translated",
        "warning: variable 'mode': validation `can(regex(\"^[a-z]+$\", var.mode)) && contains([\"fast\", \"safe\"], "
        "var.mode)` kept as text in the description",
    ]
    props = schema_of(definition)["properties"]
    assert props["records"]["minItems"] == 1
    assert props["records"]["description"] == (
        "Checked by the module when planning:\n"
        "- alltrue([for r in var.records : r.ttl == null || r.ttl > 0]) (TTLs are positive.)"
    )


def test_unknown_type_is_reported_and_accepts_anything() -> None:
    problems: list[str] = []
    schema = type_schema(parse_expression("object({a = optional(string), b = frobnicate(string)})"),
                         Naming("snake_case", problems), "variable 'x'")
    assert schema["properties"]["b"] == {}
    assert problems == ["variable 'x'.b: type frobnicate(string) is not understood; any value accepted"]


def test_non_constant_optional_default_is_reported() -> None:
    problems: list[str] = []
    schema = type_schema(parse_expression('object({a = optional(string, upper("x"))})'),
                         Naming("snake_case", problems), "variable 'x'")
    assert schema["properties"]["a"] == {"type": "string"}
    assert problems == ["variable 'x'.a: default left out: not a constant: upper(\"x\")"]


# ------------------------------------------------------------------------------ pieces


@pytest.mark.parametrize(
    ("name", "camel"),
    [("cidr_block", "cidrBlock"), ("region", "region"), ("_private", "_private"), ("ipv4_cidr", "ipv4Cidr")],
)
def test_camel_case(name: str, camel: str) -> None:
    assert camel_case(name) == camel


@pytest.mark.parametrize(
    ("condition", "schema", "keywords"),
    [
        ('can(regex("^a+$", var.v))', {"type": "string"}, {"pattern": "^a+$"}),
        ('contains(["a", "b"], var.v)', {"type": "string"}, {"enum": ["a", "b"]}),
        ("length(var.v) > 2", {"type": "string"}, {"minLength": 3}),
        ("length(var.v) < 4", {"type": "array"}, {"maxItems": 3}),
        ("length(var.v) == 2", {"type": "object"}, {"minProperties": 2, "maxProperties": 2}),
        ("3 <= length(var.v)", {"type": "array"}, {"minItems": 3}),
        ("var.v > 0", {"type": "number"}, {"exclusiveMinimum": 0}),
        ("var.v <= 1.5", {"type": "number"}, {"maximum": 1.5}),
        ("-1 < var.v", {"type": "number"}, {"exclusiveMinimum": -1}),
        ("var.v >= 1 && var.v <= 9", {"type": "number"}, {"minimum": 1, "maximum": 9}),
        ('var.v == "x" || var.v == "y" || var.v == "x"', {"type": "string"}, {"enum": ["x", "y"]}),
        # not translated: another variable, a part of the variable, wrong type, overlapping keys
        ('can(regex("^a+$", var.w))', {"type": "string"}, None),
        ("var.v.port > 0", {"type": "object"}, None),
        ('can(regex("^a+$", var.v))', {"type": "number"}, None),
        ("var.v > 0", {"type": "string"}, None),
        ("length(var.v) > 0", {}, None),
        ("var.v >= 1 && var.v >= 2", {"type": "number"}, None),
        ("var.v != 1", {"type": "number"}, None),
        ("length(var.v) < 0", {"type": "string"}, None),
        ("var.v > 1 || var.v < -1", {"type": "number"}, None),
    ],
)
def test_translate(condition: str, schema: dict[str, Any], keywords: dict[str, Any] | None) -> None:
    assert translate(parse_expression(condition), "v", schema) == keywords


def test_tofu_files_replace_tf_files_and_json_files_are_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "main.tf").write_text('variable "old" {\n  type = string\n}\n')
    (tmp_path / "main.tofu").write_text('variable "new" {\n  type = number\n  default = 1e3\n}\n')
    (tmp_path / "extra.tf").write_text('variable "kept" {\n  type = bool\n  default = true\n}\n')
    (tmp_path / "generated.tf.json").write_text('{"variable": {"hidden": {}}}')
    assert main([str(tmp_path), "--kind", "X"]) == 0
    out, err = capsys.readouterr()
    properties = json.loads(yaml.safe_load(out)["spec"]["application"]["openAPISchema"])["properties"]
    assert properties == {"kept": {"type": "boolean", "default": True}, "new": {"type": "number", "default": 1000.0}}
    assert err.splitlines() == [
        "warning: file 'generated.tf.json': JSON syntax is not read; its variables and outputs are missing"]


def test_modules_read_in_file_order() -> None:
    module = read_module(MODULES / "edges")
    assert [o.name for o in module.outputs] == ["zone"]
    assert module.variables[0].name == "zone_name"
    token = next(v for v in module.variables if v.name == "token")
    assert token.sensitive and token.other_attributes == ("deprecated",)
