"""Application ⇄ Terraform translation (SPEC §3), field by field."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from shared.api.errors import ApiError
from tofu_agl import translate as t

GROUP = t.DEFAULT_GROUP

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "default": "eu-west-1"},
        "nodeCount": {"type": "integer", "minimum": 1, "default": 3},
        "public": {"type": "boolean", "default": False},
        "cidrBlock": {"type": "string"},
        "ratio": {"type": "number"},
        "zones": {"type": "array", "items": {"type": "string"}},
        "subnets": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "cidrBlock": {"type": "string"},
                    "availabilityZone": {"type": "string", "default": "eu-west-1a"},
                },
            },
        },
        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        "network": {
            "type": "object",
            "default": {},
            "properties": {
                "enableDns": {"type": "boolean", "default": True},
                "natGateway": {"type": "object", "properties": {"perAz": {"type": "boolean"}}},
                "extraRoutes": {"type": "object", "additionalProperties": True},
            },
        },
    },
}


@dataclass(frozen=True)
class Defn:
    """A TofuApplicationDefinition view, as the definitions module exposes it."""

    kind: str = "VPC"
    plural: str = "vpcs"
    singular: str = "vpc"
    prefix: str = "vpc-"
    release_labels: dict[str, str] = field(default_factory=lambda: {"cozystack.io/ui": "true"})
    schema: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(SCHEMA))
    source_ref: dict[str, Any] = field(
        default_factory=lambda: {"kind": "GitRepository", "name": "aws-vpc", "namespace": "cozy-system"}
    )
    path: str | None = "./modules/vpc"
    interval: str = "10m"
    retry_interval: str | None = "1m"
    approve_plan: str = "auto"
    destroy_resources_on_deletion: bool | None = True
    write_outputs_to_secret: dict[str, Any] | None = field(
        default_factory=lambda: {"name": "{{ .name }}-outputs", "outputs": ["vpc_id"]}
    )
    variable_naming: str = "snake_case"
    service_account_name: str | None = "tf-runner"
    allow_service_account_override: bool = False
    runner_pod_template: dict[str, Any] | None = field(
        default_factory=lambda: {
            "metadata": {"labels": {"team": "platform"}},
            "spec": {"env": [{"name": "A"}]},
        }
    )
    backend_config: dict[str, Any] | None = None
    workspace: str | None = None
    store_readable_plan: str | None = "human"
    vars_from: list[Any] | None = None

    def render_outputs_secret_name(self, name: str, namespace: str, kind: str) -> str:
        template = str((self.write_outputs_to_secret or {}).get("name", ""))
        for key, value in (("name", name), ("namespace", namespace), ("kind", kind)):
            template = template.replace("{{ .%s }}" % key, value)  # noqa: UP031
        return template


def _protocol_check(d: Defn) -> t.TofuDefinitionView:
    return d  # mypy proves the dataclass satisfies the protocol


def app(name: str = "net", spec: Any = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "VPC",
        "metadata": {"name": name, "namespace": "team", **meta},
        "spec": {"cidrBlock": "10.0.0.0/16"} if spec is None else spec,
    }


def vars_of(tf: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v["value"] for v in tf["spec"]["vars"]}


# --------------------------------------------------------------------------- names


def test_names() -> None:
    d = Defn()
    assert t.terraform_name(d, "net") == "vpc-net"
    assert t.application_name(d, "vpc-net") == "net"
    assert t.application_name(d, "other-net") is None
    assert t.application_name(d, "vpc-") is None
    assert t.application_name(replace(d, prefix=""), "net") == "net"


# --------------------------------------------------------------------------- variables


def test_vars_keep_json_types_and_are_sorted() -> None:
    d = Defn()
    spec = {"region": "us-east-1", "nodeCount": 5, "public": True, "ratio": 0.5, "zones": ["a", "b"]}
    out = t.marshal_vars(d, spec)
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
    got = {v["name"]: v["value"] for v in t.marshal_vars(d, spec)}
    assert got["cidr_block"] == "10.0.0.0/16"
    assert got["subnets"] == [{"cidr_block": "10.0.1.0/24", "availability_zone": "b"}]
    assert got["tags"] == {"teamName": "x", "cost-center": "y"}
    assert got["network"] == {
        "enable_dns": False,
        "nat_gateway": {"per_az": True},
        "extra_routes": {"someKey": {"innerKey": 1}},
    }
    assert t.unmarshal_vars(d, t.marshal_vars(d, spec)) == spec


def test_verbatim_passes_keys_as_written() -> None:
    schema = {
        "type": "object",
        "properties": {"cidr_block": {"type": "string"}, "net": SCHEMA["properties"]["network"]},
    }
    d = Defn(variable_naming="verbatim", schema=schema)
    spec = {"cidr_block": "x", "net": {"enableDns": True, "natGateway": {"perAz": False}}}
    got = t.marshal_vars(d, spec)
    assert got == [
        {"name": "cidr_block", "value": "x"},
        {"name": "net", "value": {"enableDns": True, "natGateway": {"perAz": False}}},
    ]
    assert t.unmarshal_vars(d, got) == spec


def test_nested_values_are_never_flattened() -> None:
    d = Defn()
    got = t.marshal_vars(d, {"subnets": [{"cidrBlock": "a"}, {"cidrBlock": "b"}]})
    assert got == [{"name": "subnets", "value": [{"cidr_block": "a"}, {"cidr_block": "b"}]}]


def test_unmarshal_skips_value_from_and_keeps_unknown_names() -> None:
    d = Defn()
    spec = t.unmarshal_vars(
        d,
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
        t.marshal_vars(d, {"network": {"natGateway": {"perAz": True, "per_az": False}}})
    with pytest.raises(ApiError) as exc:
        t.validate_application(
            d, app(spec={"network": {"natGateway": {"perAz": True, "per_az": False}}}), GROUP
        )
    assert exc.value.code == 422
    assert exc.value.details["causes"][0]["reason"] == "FieldValueDuplicate"


# --------------------------------------------------------------------------- validation


def causes(exc: pytest.ExceptionInfo[ApiError]) -> dict[str, dict[str, str]]:
    return {c["field"]: c for c in exc.value.details["causes"]}


def test_valid_application_passes() -> None:
    t.validate_application(Defn(), app(), GROUP)
    t.validate_application(Defn(), app(spec=None) | {"spec": None}, GROUP)


@pytest.mark.parametrize("name", ["Net", "1net", "net_", "net-", ""])
def test_name_must_be_dns1035(name: str) -> None:
    with pytest.raises(ApiError) as exc:
        t.validate_application(Defn(), app(name), GROUP)
    assert exc.value.code == 422
    assert "metadata.name" in causes(exc)


def test_name_length_leaves_room_for_prefix_and_runner_suffix() -> None:
    d = Defn()  # prefix "vpc-" (4) -> 49 chars
    t.validate_application(d, app("a" * 49), GROUP)
    with pytest.raises(ApiError) as exc:
        t.validate_application(d, app("a" * 50), GROUP)
    assert exc.value.code == 422
    assert "49" in causes(exc)["metadata.name"]["message"]
    tf = t.to_terraform(d, app("a" * 49), GROUP)
    assert len(tf["metadata"]["name"] + "-tf-runner") <= 63


def test_spec_must_be_object() -> None:
    with pytest.raises(ApiError) as exc:
        t.validate_application(Defn(), app(spec=["x"]), GROUP)
    assert exc.value.code == 400


def test_underscore_keys_rejected() -> None:
    with pytest.raises(ApiError) as exc:
        t.validate_application(Defn(), app(spec={"_internal": 1}), GROUP)
    assert exc.value.code == 400


def test_unknown_keys_rejected_one_cause_each() -> None:
    with pytest.raises(ApiError) as exc:
        t.validate_application(Defn(), app(spec={"cidrBlock": "x", "foo": 1, "barBaz": 2}), GROUP)
    assert exc.value.code == 422
    got = causes(exc)
    assert set(got) == {"spec.foo", "spec.barBaz"}
    assert 'unknown field "foo"' in got["spec.foo"]["message"]


def test_schema_violations_after_defaulting_per_field() -> None:
    spec = {"nodeCount": 0, "public": "yes", "subnets": [{"cidrBlock": 5}]}
    with pytest.raises(ApiError) as exc:
        t.validate_application(Defn(), app(spec=spec), GROUP)
    assert exc.value.code == 422
    assert {"spec.nodeCount", "spec.public", "spec.subnets[0].cidrBlock"} <= set(causes(exc))


def test_default_violating_required_is_reported_after_defaulting() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "required": ["size"],
        "properties": {"size": {"type": "string"}},
    }
    with pytest.raises(ApiError) as exc:
        t.validate_application(Defn(schema=schema), app(spec={}), GROUP)
    assert "spec.size" in causes(exc)
    schema["properties"]["size"]["default"] = "small"
    t.validate_application(Defn(schema=schema), app(spec={}), GROUP)


def test_runner_sa_annotation_rejected_without_override() -> None:
    a = app(annotations={t.RUNNER_SA_ANNOTATION: "tenant-sa"})
    with pytest.raises(ApiError) as exc:
        t.validate_application(Defn(), a, GROUP)
    assert exc.value.code == 422
    field_name = f"metadata.annotations[{t.RUNNER_SA_ANNOTATION}]"
    assert causes(exc)[field_name]["reason"] == "FieldValueForbidden"
    t.validate_application(Defn(allow_service_account_override=True), a, GROUP)


def test_runner_sa_annotation_must_be_a_valid_name() -> None:
    a = app(annotations={t.RUNNER_SA_ANNOTATION: "Bad_SA"})
    with pytest.raises(ApiError) as exc:
        t.validate_application(Defn(allow_service_account_override=True), a, GROUP)
    assert exc.value.code == 422


def test_approve_annotation_is_not_validated_here() -> None:
    t.validate_application(
        Defn(approve_plan="manual"), app(annotations={t.APPROVE_ANNOTATION: "junk"}), GROUP
    )


# --------------------------------------------------------------------------- to_terraform


def test_to_terraform_fields() -> None:
    d = Defn(
        backend_config={"customConfiguration": 'backend "s3" {}'},
        workspace="prod",
        vars_from=[{"kind": "Secret", "name": "creds"}],
    )
    a = app(labels={"team": "a", "cozystack.io/ui": "user"}, annotations={"note": "x"})
    tf = t.to_terraform(d, a, GROUP)
    assert tf["apiVersion"] == "infra.contrib.fluxcd.io/v1alpha2"
    assert tf["kind"] == "Terraform"
    assert tf["metadata"]["name"] == "vpc-net"
    assert tf["metadata"]["namespace"] == "team"
    assert tf["metadata"]["labels"] == {
        "cozystack.io/ui": "true",
        "apps.cozystack.io-team": "a",
        "apps.cozystack.io-cozystack.io/ui": "user",
        "apps.cozystack.io/application.kind": "VPC",
        "apps.cozystack.io/application.group": GROUP,
        "apps.cozystack.io/application.name": "net",
    }
    assert tf["metadata"]["annotations"] == {"apps.cozystack.io-note": "x"}
    spec = tf["spec"]
    assert spec["sourceRef"] == {"kind": "GitRepository", "name": "aws-vpc", "namespace": "cozy-system"}
    assert spec["path"] == "./modules/vpc"
    assert spec["interval"] == "10m"
    assert spec["retryInterval"] == "1m"
    assert spec["workspace"] == "prod"
    assert spec["serviceAccountName"] == "tf-runner"
    assert spec["runnerPodTemplate"] == {
        "metadata": {"labels": {"team": "platform"}},
        "spec": {"env": [{"name": "A"}]},
    }
    assert spec["backendConfig"] == {"customConfiguration": 'backend "s3" {}'}
    assert spec["storeReadablePlan"] == "human"
    assert spec["varsFrom"] == [{"kind": "Secret", "name": "creds"}]
    assert spec["destroyResourcesOnDeletion"] is True
    assert spec["approvePlan"] == "auto"
    assert spec["writeOutputsToSecret"] == {"name": "net-outputs", "outputs": ["vpc_id"]}


def test_group_label_follows_configured_group() -> None:
    tf = t.to_terraform(Defn(), app(), "tofu.example.org")
    assert tf["metadata"]["labels"]["apps.cozystack.io/application.group"] == "tofu.example.org"


def test_unset_optional_fields_are_omitted_not_null() -> None:
    d = Defn(
        path=None,
        retry_interval=None,
        destroy_resources_on_deletion=None,
        write_outputs_to_secret=None,
        service_account_name=None,
        runner_pod_template=None,
        store_readable_plan=None,
    )
    spec = t.to_terraform(d, app(), GROUP)["spec"]
    assert set(spec) == {"sourceRef", "interval", "approvePlan", "vars"}
    assert None not in spec.values()


def test_outputs_template_placeholders() -> None:
    d = Defn(write_outputs_to_secret={"name": "{{ .kind }}-{{ .namespace }}-{{ .name }}"})
    assert t.to_terraform(d, app(), GROUP)["spec"]["writeOutputsToSecret"] == {"name": "VPC-team-net"}


def test_vars_are_the_defaulted_spec() -> None:
    tf = t.to_terraform(
        Defn(), app(spec={"cidrBlock": "10.0.0.0/16", "subnets": [{"cidrBlock": "a"}]}), GROUP
    )
    assert vars_of(tf) == {
        "cidr_block": "10.0.0.0/16",
        "network": {"enable_dns": True},
        "node_count": 3,
        "public": False,
        "region": "eu-west-1",
        "subnets": [{"cidr_block": "a", "availability_zone": "eu-west-1a"}],
    }
    assert [v["name"] for v in tf["spec"]["vars"]] == sorted(vars_of(tf))


def test_approve_plan_modes() -> None:
    manual = Defn(approve_plan="manual")
    assert t.to_terraform(manual, app(), GROUP)["spec"]["approvePlan"] == ""
    assert (
        t.to_terraform(manual, app(), GROUP, approved_plan="plan-main-abc")["spec"]["approvePlan"]
        == "plan-main-abc"
    )
    assert (
        t.to_terraform(Defn(), app(), GROUP, approved_plan="plan-main-abc")["spec"]["approvePlan"] == "auto"
    )


def _live(d: Defn, a: dict[str, Any], approve: str, pending: str | None) -> dict[str, Any]:
    tf = t.to_terraform(d, a, GROUP)
    tf["spec"]["approvePlan"] = approve
    tf["status"] = {"plan": {"pending": pending} if pending else {}}
    return tf


def test_update_keeps_approval_of_pending_plan_only_with_same_vars() -> None:
    d = Defn(approve_plan="manual")
    live = _live(d, app(), "plan-main-abc", "plan-main-abc")
    assert t.to_terraform(d, app(), GROUP, existing=live)["spec"]["approvePlan"] == "plan-main-abc"
    # label-only change keeps it too
    assert (
        t.to_terraform(d, app(labels={"x": "y"}), GROUP, existing=live)["spec"]["approvePlan"]
        == "plan-main-abc"
    )
    # new variables -> the old approval must not apply the next plan (same revision, same id)
    changed = app(spec={"cidrBlock": "10.1.0.0/16"})
    assert t.to_terraform(d, changed, GROUP, existing=live)["spec"]["approvePlan"] == ""
    # an approval of an already applied plan is not kept
    stale = _live(d, app(), "plan-main-abc", None)
    assert t.to_terraform(d, app(), GROUP, existing=stale)["spec"]["approvePlan"] == ""


def test_approving_while_changing_spec_is_rejected() -> None:
    d = Defn(approve_plan="manual")
    live = _live(d, app(), "", "plan-main-abc")
    with pytest.raises(ApiError) as exc:
        t.to_terraform(
            d, app(spec={"cidrBlock": "10.9.0.0/16"}), GROUP, approved_plan="plan-main-abc", existing=live
        )
    assert exc.value.code == 422
    # under auto there is nothing to approve: no error, "auto" is written
    auto = t.to_terraform(
        Defn(), app(spec={"cidrBlock": "x"}), GROUP, approved_plan="plan-main-abc", existing=live
    )
    assert auto["spec"]["approvePlan"] == "auto"
    same = t.to_terraform(d, app(), GROUP, approved_plan="plan-main-abc", existing=live)
    assert same["spec"]["approvePlan"] == "plan-main-abc"


def test_vars_equal_treats_pruned_null_as_null() -> None:
    live = {"spec": {"vars": [{"name": "a"}]}}
    assert t.vars_equal(live, [{"name": "a", "value": None}])


def test_update_keeps_state_location_and_sharding_label() -> None:
    d = Defn(workspace="new", backend_config={"secretSuffix": "new"})
    live = t.to_terraform(Defn(), app(), GROUP)
    live["metadata"]["labels"]["sharding.fluxcd.io/key"] = "shard1"
    live["spec"]["workspace"] = "old"
    live["spec"]["backendConfig"] = {"secretSuffix": "old"}
    tf = t.to_terraform(d, app(), GROUP, existing=live)
    assert tf["spec"]["workspace"] == "old"
    assert tf["spec"]["backendConfig"] == {"secretSuffix": "old"}
    assert tf["metadata"]["labels"]["sharding.fluxcd.io/key"] == "shard1"
    live["spec"].pop("backendConfig")
    assert "backendConfig" not in t.to_terraform(d, app(), GROUP, existing=live)["spec"]


def test_runner_service_account_with_and_without_override() -> None:
    a = app(annotations={t.RUNNER_SA_ANNOTATION: "tenant-sa"})
    allowed = t.to_terraform(Defn(allow_service_account_override=True), a, GROUP)
    assert allowed["spec"]["serviceAccountName"] == "tenant-sa"
    denied = t.to_terraform(Defn(), a, GROUP)
    assert denied["spec"]["serviceAccountName"] == "tf-runner"
    # the annotation itself reads back (kept, prefixed) in both cases
    assert allowed["metadata"]["annotations"] == {f"apps.cozystack.io-{t.RUNNER_SA_ANNOTATION}": "tenant-sa"}


def test_command_annotations_are_kept_prefixed() -> None:
    a = app(annotations={t.APPROVE_ANNOTATION: "plan-main-abc"})
    tf = t.to_terraform(Defn(approve_plan="manual"), a, GROUP)
    assert tf["metadata"]["annotations"] == {f"apps.cozystack.io-{t.APPROVE_ANNOTATION}": "plan-main-abc"}


def test_input_is_not_mutated() -> None:
    a = app(spec={"subnets": [{"cidrBlock": "a"}]})
    before = copy.deepcopy(a)
    t.to_terraform(Defn(), a, GROUP)
    assert a == before


# --------------------------------------------------------------------------- CRD conformance


def _crd_path() -> Path | None:
    mod_cache = os.environ.get("GOMODCACHE")
    if not mod_cache:
        try:
            mod_cache = subprocess.run(
                ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            mod_cache = str(Path.home() / "go" / "pkg" / "mod")
    module = Path(mod_cache) / "github.com/flux-iac/tofu-controller@v0.16.5"
    path = module / "config/crd/bases/infra.contrib.fluxcd.io_terraforms.yaml"
    return path if path.is_file() else None


def _unknown_fields(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """What kube-apiserver's strict field validation would call an unknown field."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if isinstance(props, dict) and key in props:
                out += _unknown_fields(sub, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += _unknown_fields(sub, extra, f"{path}.{key}")
            elif extra is not True:
                out.append(f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += _unknown_fields(item, schema["items"], f"{path}[{i}]")
    return out


def test_output_passes_the_real_terraform_crd_strictly() -> None:
    crd_path = _crd_path()
    if crd_path is None:
        pytest.skip("tofu-controller v0.16.5 CRD not in the Go module cache (go mod download fetches it)")
    crd = yaml.safe_load(crd_path.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")
    spec_schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    d = Defn(
        approve_plan="manual",
        allow_service_account_override=True,
        backend_config={"secretSuffix": "vpc", "labels": {"a": "b"}},
        workspace="default",
        vars_from=[{"kind": "Secret", "name": "creds", "varsKeys": ["db_password"]}],
        runner_pod_template={
            "metadata": {"labels": {"team": "platform"}, "annotations": {"x": "y"}},
            "spec": {
                "env": [{"name": "TF_LOG", "value": "INFO"}],
                "resources": {"limits": {"memory": "1Gi"}},
            },
        },
    )
    a = app(
        spec={
            "cidrBlock": "10.0.0.0/16",
            "subnets": [{"cidrBlock": "a"}],
            "tags": {"k": "v"},
            "zones": ["a"],
        },
        annotations={t.RUNNER_SA_ANNOTATION: "tenant"},
    )
    tf = t.to_terraform(d, a, GROUP, approved_plan="plan-main-b8e362c206")
    jsonschema.validate(tf["spec"], spec_schema)
    assert _unknown_fields(tf["spec"], spec_schema, "spec") == []
    assert set(tf) == {"apiVersion", "kind", "metadata", "spec"}


# --------------------------------------------------------------------------- from_terraform


def test_from_terraform_reads_back_metadata() -> None:
    d = Defn()
    tf = t.to_terraform(d, app(labels={"team": "a"}, annotations={"note": "x"}), GROUP)
    tf["metadata"].update(
        uid="u-1",
        resourceVersion="42",
        creationTimestamp="2026-09-10T09:00:00Z",
        deletionTimestamp="2026-09-10T10:00:00Z",
        generation=3,
        finalizers=["finalizers.tf.contrib.fluxcd.io"],
    )
    tf["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] = "other"
    out = t.from_terraform(d, tf, GROUP)
    assert out is not None
    assert out["apiVersion"] == f"{GROUP}/v1alpha1"
    assert out["kind"] == "VPC"
    assert out["metadata"] == {
        "name": "net",
        "namespace": "team",
        "uid": "u-1",
        "resourceVersion": "42",
        "creationTimestamp": "2026-09-10T09:00:00Z",
        "deletionTimestamp": "2026-09-10T10:00:00Z",
        "labels": {"team": "a"},
        "annotations": {"note": "x"},
    }
    assert out["status"]["phase"] == "Deleting"


def test_from_terraform_ignores_foreign_objects() -> None:
    d = Defn()
    tf = t.to_terraform(d, app(), GROUP)
    assert t.from_terraform(d, tf, "tofu.example.org") is None
    assert t.from_terraform(replace(d, kind="Bucket"), tf, GROUP) is None
    assert t.from_terraform(replace(d, prefix="net-"), tf, GROUP) is None
    bare = copy.deepcopy(tf)
    bare["metadata"]["labels"] = {}
    assert t.from_terraform(d, bare, GROUP) is None


@pytest.mark.parametrize("naming", ["snake_case", "verbatim"])
def test_round_trip_equals_app_plus_defaults(naming: str) -> None:
    d = Defn(variable_naming=naming)
    spec = {
        "cidrBlock": "10.0.0.0/16",
        "nodeCount": 7,
        "ratio": 1.5,
        "zones": ["a", "b"],
        "subnets": [{"cidrBlock": "10.0.1.0/24"}, {"cidrBlock": "10.0.2.0/24", "availabilityZone": "c"}],
        "tags": {"teamName": "x"},
        "network": {"natGateway": {"perAz": True}, "extraRoutes": {"myRoute": {"viaHost": "a"}}},
    }
    a = app(spec=spec, labels={"team": "a"}, annotations={"note": "x"})
    back = t.from_terraform(d, t.to_terraform(d, a, GROUP), GROUP)
    assert back is not None
    expected: dict[str, Any] = copy.deepcopy(spec)
    expected.update(region="eu-west-1", public=False)
    expected["subnets"][0]["availabilityZone"] = "eu-west-1a"
    expected["network"]["enableDns"] = True
    assert back["spec"] == expected
    assert back["metadata"]["labels"] == {"team": "a"}
    assert back["metadata"]["annotations"] == {"note": "x"}
    # idempotent: a second trip changes nothing
    again = t.from_terraform(d, t.to_terraform(d, {**a, "spec": back["spec"]}, GROUP), GROUP)
    assert again is not None and again["spec"] == back["spec"]


def test_from_terraform_status_has_approve_command() -> None:
    d = Defn(approve_plan="manual")
    tf = t.to_terraform(d, app(), GROUP)
    tf["status"] = {"plan": {"pending": "plan-main-b8e362c206"}}
    out = t.from_terraform(d, tf, GROUP)
    assert out is not None
    cond = next(c for c in out["status"]["conditions"] if c["type"] == "AwaitingApproval")
    assert cond["status"] == "True"
    command = "kubectl annotate vpcs net -n team --overwrite tofu.apps.cozystack.io/approve-plan="
    assert f"{command}plan-main-b8e362c206" in cond["message"]


# --------------------------------------------------------------------------- rollout_patch


def test_rollout_nothing_to_do() -> None:
    d = Defn()
    tf = t.to_terraform(d, app(), GROUP)
    assert t.rollout_patch(d, tf) == (None, [])


def test_rollout_nothing_to_do_after_crd_defaulting() -> None:
    d = Defn(service_account_name=None, store_readable_plan=None, destroy_resources_on_deletion=None)
    tf = t.to_terraform(d, app(), GROUP)
    tf["spec"].update(serviceAccountName="tf-runner", storeReadablePlan="none", workspace="default")
    tf["spec"]["destroyResourcesOnDeletion"] = False
    assert t.rollout_patch(d, tf) == (None, [])


def test_rollout_patches_changed_fields() -> None:
    old = Defn()
    tf = t.to_terraform(old, app(), GROUP)
    new = replace(
        old,
        source_ref={"kind": "OCIRepository", "name": "vpc-oci"},
        path="./v2",
        interval="5m",
        retry_interval=None,
        destroy_resources_on_deletion=False,
        write_outputs_to_secret={"name": "{{ .name }}-out"},
        runner_pod_template={"spec": {"env": [{"name": "B"}]}},
        service_account_name="runner2",
        store_readable_plan="json",
        vars_from=[{"kind": "ConfigMap", "name": "cm"}],
        release_labels={"cozystack.io/ui": "false", "extra": "1"},
    )
    patch, pinned = t.rollout_patch(new, tf)
    assert pinned == []
    assert patch == {
        "spec": {
            "sourceRef": {"kind": "OCIRepository", "name": "vpc-oci", "namespace": None},
            "path": "./v2",
            "interval": "5m",
            "retryInterval": None,
            "destroyResourcesOnDeletion": False,
            "writeOutputsToSecret": {"name": "net-out", "outputs": None},
            "runnerPodTemplate": {"metadata": None, "spec": {"env": [{"name": "B"}]}},
            "serviceAccountName": "runner2",
            "storeReadablePlan": "json",
            "varsFrom": [{"kind": "ConfigMap", "name": "cm"}],
        },
        "metadata": {"labels": {"cozystack.io/ui": "false", "extra": "1"}},
    }


def test_rollout_never_touches_workspace_or_backend_config() -> None:
    old = Defn(workspace="a", backend_config={"secretSuffix": "a"})
    tf = t.to_terraform(old, app(), GROUP)
    new = replace(old, workspace="b", backend_config={"secretSuffix": "b"})
    patch, pinned = t.rollout_patch(new, tf)
    assert patch is None
    assert pinned == ["workspace", "backendConfig"]
    patch, pinned = t.rollout_patch(replace(new, interval="1h"), tf)
    assert patch == {"spec": {"interval": "1h"}}
    assert pinned == ["workspace", "backendConfig"]
    # unset in the definition == the CRD default "default"
    tf["spec"]["workspace"] = "default"
    assert t.rollout_patch(replace(new, workspace=None), tf)[1] == ["backendConfig"]


def test_rollout_approve_plan_modes() -> None:
    manual = Defn(approve_plan="manual")
    tf = t.to_terraform(Defn(), app(), GROUP)  # auto
    tf["status"] = {"plan": {"pending": "plan-main-abc"}}
    assert t.rollout_patch(manual, tf)[0] == {"spec": {"approvePlan": ""}}
    # an approval of the plan pending right now is kept
    tf["spec"]["approvePlan"] = "plan-main-abc"
    assert t.rollout_patch(manual, tf)[0] is None
    # a stale one is reset
    tf["status"] = {"plan": {"lastApplied": "plan-main-abc"}}
    assert t.rollout_patch(manual, tf)[0] == {"spec": {"approvePlan": ""}}
    # manual -> auto approves what is pending (that is what auto means)
    tf["spec"]["approvePlan"] = ""
    assert t.rollout_patch(Defn(), tf)[0] == {"spec": {"approvePlan": "auto"}}
    # "" and omitted mean the same
    del tf["spec"]["approvePlan"]
    assert t.rollout_patch(manual, tf)[0] is None


def test_rollout_respects_runner_sa_override_only_while_allowed() -> None:
    allowed = Defn(allow_service_account_override=True)
    tf = t.to_terraform(allowed, app(annotations={t.RUNNER_SA_ANNOTATION: "tenant"}), GROUP)
    assert tf["spec"]["serviceAccountName"] == "tenant"
    assert t.rollout_patch(replace(allowed, service_account_name="other"), tf)[0] is None
    assert t.rollout_patch(replace(allowed, allow_service_account_override=False), tf)[0] == {
        "spec": {"serviceAccountName": "tf-runner"}
    }


def test_rollout_uses_application_name_label_for_outputs_secret() -> None:
    d = Defn()
    tf = t.to_terraform(d, app(), GROUP)
    patch, _ = t.rollout_patch(
        replace(d, prefix="net-", write_outputs_to_secret={"name": "{{ .name }}-o"}), tf
    )
    assert patch == {"spec": {"writeOutputsToSecret": {"name": "net-o", "outputs": None}}}


# --------------------------------------------------------------------------- with the real definition model


def _real_definition(**terraform: Any) -> Any:
    from tofu_agl.definition import TofuApplicationDefinition

    obj = {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "TofuApplicationDefinition",
        "metadata": {"name": "vpc"},
        "spec": {
            "application": {
                "kind": "VPC",
                "plural": "vpcs",
                "singular": "vpc",
                "openAPISchema": json.dumps(SCHEMA),
            },
            "release": {"prefix": "vpc-", "labels": {"cozystack.io/ui": "true"}},
            "terraform": {
                "sourceRef": {"kind": "GitRepository", "name": "aws-vpc", "namespace": "cozy-system"},
                "path": "./modules/vpc",
                **terraform,
            },
        },
    }
    defn = TofuApplicationDefinition.from_object(obj)
    view: t.TofuDefinitionView = defn  # mypy: the model satisfies the protocol
    return view


def test_real_definition_model_round_trip() -> None:
    d = _real_definition(
        approvePlan="manual",
        writeOutputsToSecret={"name": "{{ .name }}-outputs", "outputs": ["vpc_id"], "labels": {"a": "b"}},
        allowServiceAccountOverride=True,
    )
    a = app(spec={"subnets": [{"cidrBlock": "a"}]}, annotations={t.RUNNER_SA_ANNOTATION: "tenant"})
    t.validate_application(d, a, GROUP)
    tf = t.to_terraform(d, a, GROUP)
    assert tf["spec"]["writeOutputsToSecret"] == {
        "name": "net-outputs",
        "outputs": ["vpc_id"],
        "labels": {"a": "b"},
    }
    assert tf["spec"]["approvePlan"] == ""
    assert tf["spec"]["serviceAccountName"] == "tenant"
    assert tf["spec"]["interval"] == "10m"
    back = t.from_terraform(d, tf, GROUP)
    assert back is not None
    assert back["spec"]["subnets"] == [{"cidrBlock": "a", "availabilityZone": "eu-west-1a"}]
    assert t.rollout_patch(d, tf) == (None, [])
