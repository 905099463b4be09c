"""tofu_agl.definition: parsing TofuApplicationDefinitions and their acceptance."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from tests.unit.definition_samples import load, varied
from tofu_agl.definition import (
    TofuApplicationDefinition,
    acceptance,
    render_template,
    template_problem,
)
from tofu_agl.reconciler import DefinitionReconciler
from tofu_agl.registry import KindRegistry


def make(
    obj: dict[str, Any], *, name: str | None = None, created: str | None = None, **changes: Any
) -> TofuApplicationDefinition:
    return TofuApplicationDefinition.from_object(varied(obj, name=name, created=created, **changes))


def with_schema(schema: dict[str, Any], naming: str = "snake_case") -> TofuApplicationDefinition:
    return make(
        load("vpc"),
        spec__application__openAPISchema=json.dumps(schema),
        spec__terraform__variableNaming=naming,
    )


def test_vpc_fixture_properties() -> None:
    d = TofuApplicationDefinition.from_object(load("vpc"))
    assert (d.kind, d.plural, d.singular, d.prefix) == ("VPC", "vpcs", "vpc", "vpc-")
    assert d.terraform.source_ref.as_ref() == {"kind": "GitRepository", "name": "aws-vpc", "namespace": "cozy-system"}
    assert d.terraform.path == "./modules/vpc"
    assert (d.terraform.interval, d.terraform.retry_interval) == ("10m", "1m")
    assert d.terraform.approve_plan == "auto"
    assert d.terraform.destroy_resources_on_deletion is True
    assert d.terraform.write_outputs_to_secret is not None
    assert d.terraform.write_outputs_to_secret.outputs == ["vpc_id", "private_subnet_ids", "public_subnet_ids"]
    assert d.terraform.variable_naming == "snake_case"
    assert d.terraform.service_account_name == "tf-runner"
    assert d.terraform.allow_service_account_override is False
    assert d.terraform.runner_pod_template is not None and "spec" in d.terraform.runner_pod_template
    assert d.terraform.backend_config == {"inClusterConfig": True, "labels": {"app.kubernetes.io/part-of": "cozystack"}}
    assert d.terraform.workspace == "default"
    assert d.terraform.store_readable_plan == "human"
    assert d.terraform.vars_from == [{"kind": "ConfigMap", "name": "cloud-defaults", "optional": True}]
    assert d.terraform.source_ref.kind == "GitRepository"
    assert d.schema["required"] == ["region"]
    assert d.render_outputs_secret_name("prod", "tenant-a", "VPC") == "prod-outputs"


def test_bucket_fixture_properties() -> None:
    d = TofuApplicationDefinition.from_object(load("bucket"))
    assert d.terraform.approve_plan == "manual"
    assert d.terraform.allow_service_account_override is True
    assert d.terraform.variable_naming == "verbatim"
    assert d.render_outputs_secret_name("logs", "tenant-a", "S3Bucket") == "s3bucket-logs-outputs"


def test_defaults_for_minimal_definition() -> None:
    obj = {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "TofuApplicationDefinition",
        "metadata": {"name": "dns"},
        "spec": {
            "application": {
                "kind": "DNSZone",
                "plural": "dnszones",
                "singular": "dnszone",
                "openAPISchema": '{"type": "object", "properties": {"zone": {"type": "string"}}}',
            },
            "terraform": {"sourceRef": {"kind": "Bucket", "name": "modules"}},
        },
    }
    d = TofuApplicationDefinition.from_object(obj)
    assert d.prefix == "" and d.release_labels == {}
    tf = d.terraform
    assert tf.interval == "10m" and tf.approve_plan == "auto" and tf.variable_naming == "snake_case"
    assert tf.allow_service_account_override is False and tf.destroy_resources_on_deletion is False
    assert tf.write_outputs_to_secret is None and tf.source_ref.as_ref() == {"kind": "Bucket", "name": "modules"}
    assert d.to_object() == obj
    with pytest.raises(ValueError, match="writeOutputsToSecret"):
        d.render_outputs_secret_name("a", "b", "c")
    assert acceptance(d, []).accepted


def test_round_trip_preserves_unknown_fields() -> None:
    obj = load("vpc")
    obj["spec"]["terraform"]["writeOutputsToSecret"]["labels"] = {"a": "b"}
    obj["spec"]["terraform"]["enableInventory"] = True
    obj["status"] = {"notRolledOut": [{"name": "x", "namespace": "y", "fields": ["workspace"]}]}
    assert TofuApplicationDefinition.from_object(obj).to_object() == obj


# --------------------------------------------------------------------------- acceptance


def test_fixtures_are_accepted() -> None:
    vpc = TofuApplicationDefinition.from_object(load("vpc"))
    bucket = TofuApplicationDefinition.from_object(load("bucket"))
    assert acceptance(vpc, [bucket]) == acceptance(vpc, [])
    assert acceptance(vpc, [bucket]).accepted
    assert acceptance(bucket, [vpc]).accepted


def test_invalid_schema() -> None:
    verdict = acceptance(make(load("vpc"), spec__application__openAPISchema='{"type": "array"}'), [])
    assert (verdict.accepted, verdict.reason) == (False, "InvalidSchema")


def test_kind_conflict() -> None:
    old = make(load("vpc"), created="2024-01-01T00:00:00Z")
    new = make(load("vpc"), name="vpc-2", created="2024-03-01T00:00:00Z")
    assert acceptance(old, [new]).accepted
    assert acceptance(new, [old]).reason == "KindConflict"


@pytest.mark.parametrize(
    "template",
    ["{{ .name }}-outputs", "{{.name}}-{{ .namespace }}", "{{  .kind  }}-{{ .name }}", "static-outputs"],
)
def test_known_placeholders(template: str) -> None:
    d = make(load("vpc"), spec__terraform__writeOutputsToSecret={"name": template, "outputs": []})
    assert acceptance(d, []).accepted


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("{{ .uid }}-outputs", "{{ .uid }}"),
        ("{{ .Name }}-outputs", "{{ .Name }}"),
        ("{{ name }}-outputs", "{{ name }}"),
        ("{{ .name | lower }}", "{{ .name | lower }}"),
        ("{{ .name }-outputs", "unbalanced"),
        ("{{ .name }}}}", "unbalanced"),
    ],
)
def test_unknown_placeholders(template: str, fragment: str) -> None:
    d = make(load("vpc"), spec__terraform__writeOutputsToSecret={"name": template})
    verdict = acceptance(d, [])
    assert (verdict.accepted, verdict.reason) == (False, "InvalidPlaceholder")
    assert fragment in verdict.message


def test_template_that_can_never_be_a_secret_name() -> None:
    d = make(load("vpc"), spec__terraform__writeOutputsToSecret={"name": "Outputs_{{ .name }}"})
    verdict = acceptance(d, [])
    assert verdict.reason == "InvalidPlaceholder" and "Secret name" in verdict.message


@pytest.mark.parametrize("suffix", ["vpc", "shared-state", "{{ .namespace }}", "{{ .kind }}-{{ .namespace }}",
                                    "Not_A_Name"])
def test_suffix_shared_by_every_instance_is_refused(suffix: str) -> None:
    backend = {"inClusterConfig": True, "secretSuffix": suffix}
    verdict = acceptance(make(load("vpc"), spec__terraform__backendConfig=backend), [])
    assert (verdict.accepted, verdict.reason) == (False, "SharedStateSuffix")
    assert repr(suffix) in verdict.message
    assert "share one OpenTofu state" in verdict.message and "remove secretSuffix" in verdict.message


@pytest.mark.parametrize(
    "backend",
    [
        {"inClusterConfig": True},
        {"inClusterConfig": True, "secretSuffix": ""},
        {"secretSuffix": "{{ .name }}"},
        {"secretSuffix": "{{ .kind }}-{{.name}}-state"},
        {"customConfiguration": 'backend "s3" {}', "secretSuffix": "ignored-by-tofu-controller"},
    ],
)
def test_per_instance_or_custom_state_is_accepted(backend: dict[str, Any]) -> None:
    assert acceptance(make(load("vpc"), spec__terraform__backendConfig=backend), []).accepted


@pytest.mark.parametrize(
    ("suffix", "fragment"),
    [("{{ .uid }}", "{{ .uid }}"), ("{{ .name | lower }}", "{{ .name | lower }}"),
     ("{{ .name }}_state", "cannot make a state Secret name")],
)
def test_unusable_suffix_template(suffix: str, fragment: str) -> None:
    verdict = acceptance(make(load("vpc"), spec__terraform__backendConfig={"secretSuffix": suffix}), [])
    assert (verdict.accepted, verdict.reason) == (False, "InvalidPlaceholder")
    assert "backendConfig.secretSuffix" in verdict.message and fragment in verdict.message


class _StatusWrites:
    def __init__(self, *listed: dict[str, Any]) -> None:
        self.patches: list[dict[str, Any]] = []
        #: What a list of the definitions answers.
        self.listed = list(listed)

    async def list_all(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {"items": self.listed}

    async def patch_merge(self, namespace: str | None, name: str, patch: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.patches.append(patch)
        return {}


class _Events:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, str, str]] = []

    def emit(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.emitted.append((type_, reason, message))


async def test_shared_state_suffix_gets_a_condition_an_event_and_no_kind() -> None:
    """Refused like every other reason: Accepted=False on the status, a Warning Event, the kind not served."""
    async def nothing() -> None:
        return None

    def no_storage(*_: Any) -> Any:
        raise AssertionError("a refused kind must not be served")

    registry = KindRegistry("tofu.apps.cozystack.io", lambda _: None, lambda *_: None, no_storage, nothing)
    status, events = _StatusWrites(), _Events()
    reconciler = DefinitionReconciler(registry, cast(Any, status), cast(Any, None), cast(Any, events))
    await reconciler.resync()  # as the leader does first
    obj = make(load("vpc"), spec__terraform__backendConfig={"secretSuffix": "vpc"}).to_object()
    await reconciler.on_event("ADDED", obj)
    assert registry.served == {} and registry.verdicts["vpc"].reason == "SharedStateSuffix"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status.patches[0]["status"]["conditions"]}
    assert conditions == {"Accepted": ("False", "SharedStateSuffix"), "Ready": ("False", "SharedStateSuffix"),
                          "Reconciling": ("False", "SharedStateSuffix"), "Stalled": ("True", "SharedStateSuffix")}
    assert [(t, r) for t, r, _ in events.emitted] == [("Warning", "SharedStateSuffix")]


async def test_the_leader_writes_nothing_before_it_has_listed_every_definition() -> None:
    """kopf's first events are part of the definitions: a leader that wrote from them would act on an incomplete
    set (shared/service/definitions.py). After its own list, the registry holds exactly what was listed."""
    async def nothing() -> None:
        return None

    def no_storage(*_: Any) -> Any:
        raise AssertionError("a refused kind must not be served")

    registry = KindRegistry("tofu.apps.cozystack.io", lambda _: None, lambda *_: None, no_storage, nothing)
    refused = make(load("vpc"), spec__terraform__backendConfig={"secretSuffix": "vpc"}).to_object()
    gone = make(load("vpc"), name="gone", spec__terraform__backendConfig={"secretSuffix": "x"}).to_object()
    status, events = _StatusWrites(refused), _Events()
    reconciler = DefinitionReconciler(registry, cast(Any, status), cast(Any, None), cast(Any, events))
    await reconciler.on_event(None, gone)  # kopf's first event, of a definition deleted since
    assert status.patches == [] and events.emitted == []
    await reconciler.resync()
    assert set(registry.definitions) == {"vpc"}
    assert [p["status"]["conditions"][0]["reason"] for p in status.patches] == ["SharedStateSuffix"]


def test_render_template() -> None:
    assert render_template("{{.kind}}/{{ .name }}", {"kind": "vpc", "name": "a"}) == "vpc/a"
    assert template_problem("{{ .namespace }}") is None
    with pytest.raises(ValueError):
        render_template("{{ .other }}", {})


def test_prefix_length() -> None:
    assert acceptance(make(load("vpc"), spec__release__prefix="v" * 52), []).accepted
    verdict = acceptance(make(load("vpc"), spec__release__prefix="v" * 53), [])
    assert verdict.reason == "InvalidRelease"


def test_a_final_newline_is_no_part_of_a_name() -> None:
    assert acceptance(make(load("vpc"), spec__release__prefix="vpc-\n"), []).reason == "InvalidRelease"
    assert acceptance(make(load("vpc"), spec__application__kind="VPC\n"), []).reason == "InvalidNames"


def test_variable_names_snake_case_fixture() -> None:
    d = TofuApplicationDefinition.from_object(load("vpc"))
    assert acceptance(d, []).accepted


def test_reserved_variable_name() -> None:
    verdict = acceptance(with_schema({"type": "object", "properties": {"count": {"type": "integer"}}}), [])
    assert (verdict.accepted, verdict.reason) == (False, "InvalidVariableName")
    assert "'count'" in verdict.message and "reserved" in verdict.message


def test_reserved_after_snake_case_conversion() -> None:
    verdict = acceptance(with_schema({"type": "object", "properties": {"dependsOn": {"type": "string"}}}), [])
    assert verdict.reason == "InvalidVariableName" and "'depends_on'" in verdict.message


def test_colliding_keys_named() -> None:
    schema = {
        "type": "object",
        "properties": {"cidrBlock": {"type": "string"}, "cidr_block": {"type": "string"}},
    }
    verdict = acceptance(with_schema(schema), [])
    assert verdict.reason == "InvalidVariableName"
    assert "'cidrBlock'" in verdict.message and "'cidr_block'" in verdict.message
    # verbatim keeps them distinct, and camelCase is a valid OpenTofu identifier
    assert acceptance(with_schema(schema, "verbatim"), []).accepted


def test_colliding_nested_keys() -> None:
    schema = {
        "type": "object",
        "properties": {
            "net": {
                "type": "object",
                "properties": {"zoneId": {"type": "string"}, "zone_id": {"type": "string"}},
            }
        },
    }
    verdict = acceptance(with_schema(schema), [])
    assert verdict.reason == "InvalidVariableName" and "'net'" in verdict.message


def test_free_form_map_keys_are_not_checked() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {
                "type": "object",
                "additionalProperties": {"type": "object", "properties": {"Weird Key": {"type": "string"}}},
            }
        },
    }
    assert acceptance(with_schema(schema), []).accepted


def test_invalid_variable_name_characters() -> None:
    schema = {"type": "object", "properties": {"my.var": {"type": "string"}, "9lives": {"type": "string"}}}
    verdict = acceptance(with_schema(schema, "verbatim"), [])
    assert verdict.reason == "InvalidVariableName"
    assert "'my.var'" in verdict.message and "'9lives'" in verdict.message


def test_bucket_fixture_with_snake_case_naming_still_fine() -> None:
    d = make(load("bucket"), spec__terraform__variableNaming="snake_case")
    assert acceptance(d, []).accepted
