"""Application -> Terraform (SPEC §3), field by field."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.unit.tofu_samples import GROUP, Defn, app, defn, vars_of
from tofu_agl.build import build
from tofu_agl.names import APPROVE_ANNOTATION, RUNNER_SA_ANNOTATION
from tofu_agl.validate import validated_variables


def test_to_terraform_fields() -> None:
    d = defn(
        backend_config={"customConfiguration": 'backend "s3" {}'},
        workspace="prod",
        vars_from=[{"kind": "Secret", "name": "creds"}],
    )
    a = app(labels={"team": "a", "cozystack.io/ui": "user"}, annotations={"note": "x"})
    tf = build(d, a, group=GROUP)
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
    tf = build(Defn(), app(), group="tofu.example.org")
    assert tf["metadata"]["labels"]["apps.cozystack.io/application.group"] == "tofu.example.org"


def test_unset_optional_fields_are_omitted_not_null() -> None:
    d = defn(
        path=None,
        retry_interval=None,
        destroy_resources_on_deletion=False,
        write_outputs_to_secret=None,
        service_account_name=None,
        runner_pod_template=None,
        store_readable_plan=None,
    )
    spec = build(d, app(), group=GROUP)["spec"]
    # destroyResourcesOnDeletion is a boolean of the definition (false unless given), never unset.
    assert set(spec) == {"sourceRef", "interval", "approvePlan", "vars", "destroyResourcesOnDeletion"}
    assert spec["destroyResourcesOnDeletion"] is False
    assert None not in spec.values()


def test_outputs_template_placeholders() -> None:
    d = defn(write_outputs_to_secret={"name": "{{ .kind }}-{{ .namespace }}-{{ .name }}"})
    assert build(d, app(), group=GROUP)["spec"]["writeOutputsToSecret"] == {"name": "VPC-team-net", "outputs": []}


def test_vars_are_the_defaulted_spec() -> None:
    tf = build(
        Defn(), app(spec={"cidrBlock": "10.0.0.0/16", "subnets": [{"cidrBlock": "a"}]}), group=GROUP
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


@pytest.mark.parametrize("spec", [
    {},
    {"cidrBlock": "10.0.0.0/16", "subnets": [{"cidrBlock": "a"}]},
    {"region": "us-east-1", "nodeCount": 5, "network": {"enableDns": False, "natGateway": {"perAz": True}}},
])
def test_the_variables_validation_returns_are_the_ones_build_makes(spec: dict[str, Any]) -> None:
    """A write builds from the variables validation marshalled (storage passes them on): they must be exactly
    the ones build would make from the same Application, defaults included."""
    a = app(spec=spec)
    validated = validated_variables(Defn(), a, group=GROUP)
    assert validated == build(Defn(), a, group=GROUP)["spec"]["vars"]
    assert build(Defn(), a, group=GROUP, tf_vars=validated) == build(Defn(), a, group=GROUP)


def test_approve_plan_is_what_approval_decides() -> None:
    manual = defn(approve_plan="manual")
    assert build(manual, app(), group=GROUP)["spec"]["approvePlan"] == ""
    assert build(Defn(), app(), group=GROUP)["spec"]["approvePlan"] == "auto"
    live = build(manual, app(), group=GROUP)
    live["status"] = {"plan": {"pending": "plan-main-abc"}}
    approving = app(annotations={APPROVE_ANNOTATION: "plan-main-abc"})
    assert build(manual, approving, group=GROUP, live=live)["spec"]["approvePlan"] == "plan-main-abc"


def test_update_keeps_state_location_and_sharding_label() -> None:
    d = defn(workspace="new", backend_config={"secretSuffix": "new"})
    live = build(Defn(), app(), group=GROUP)
    live["metadata"]["labels"]["sharding.fluxcd.io/key"] = "shard1"
    live["spec"]["workspace"] = "old"
    live["spec"]["backendConfig"] = {"secretSuffix": "old"}
    tf = build(d, app(), group=GROUP, live=live)
    assert tf["spec"]["workspace"] == "old"
    assert tf["spec"]["backendConfig"] == {"secretSuffix": "old"}
    assert tf["metadata"]["labels"]["sharding.fluxcd.io/key"] == "shard1"
    live["spec"].pop("backendConfig")
    assert "backendConfig" not in build(d, app(), group=GROUP, live=live)["spec"]


def test_backend_config_without_suffix_gets_the_terraform_name() -> None:
    """State is per instance: tofu-controller's own default suffix, not ``""`` (tofu init fails on it)."""
    given = {"inClusterConfig": True, "labels": {"a": "b"}}
    d = defn(backend_config=given)
    assert build(d, app(), group=GROUP)["spec"]["backendConfig"] == {**given, "secretSuffix": "vpc-net"}
    assert build(d, app("other"), group=GROUP)["spec"]["backendConfig"]["secretSuffix"] == "vpc-other"
    empty = defn(backend_config={**given, "secretSuffix": ""})
    assert build(empty, app(), group=GROUP)["spec"]["backendConfig"]["secretSuffix"] == "vpc-net"
    assert d.terraform.backend_config == given  # the definition is not changed


def test_custom_backend_configuration_is_passed_through_untouched() -> None:
    for given in ({"customConfiguration": 'backend "s3" {}'},
                  {"customConfiguration": 'backend "s3" {}', "secretSuffix": "{{ .name }}", "labels": {"a": "b"}}):
        assert build(defn(backend_config=given), app(), group=GROUP)["spec"]["backendConfig"] == given


def test_no_backend_config_emits_none() -> None:
    """tofu-controller's default without a backendConfig already is per instance (the Terraform's name)."""
    assert "backendConfig" not in build(defn(backend_config=None), app(), group=GROUP)["spec"]


def test_templated_suffix_is_rendered_per_instance() -> None:
    d = defn(backend_config={"secretSuffix": "{{ .kind }}-{{ .namespace }}-{{ .name }}"})
    assert build(d, app(), group=GROUP)["spec"]["backendConfig"] == {"secretSuffix": "vpc-team-net"}
    assert build(d, app("b"), group=GROUP)["spec"]["backendConfig"] == {"secretSuffix": "vpc-team-b"}


def test_runner_service_account_with_and_without_override() -> None:
    a = app(annotations={RUNNER_SA_ANNOTATION: "tenant-sa"})
    allowed = build(defn(allow_service_account_override=True), a, group=GROUP)
    assert allowed["spec"]["serviceAccountName"] == "tenant-sa"
    denied = build(Defn(), a, group=GROUP)
    assert denied["spec"]["serviceAccountName"] == "tf-runner"
    # the annotation itself reads back (kept, prefixed) in both cases
    assert allowed["metadata"]["annotations"] == {f"apps.cozystack.io-{RUNNER_SA_ANNOTATION}": "tenant-sa"}


def test_command_annotations_are_kept_prefixed() -> None:
    a = app(annotations={APPROVE_ANNOTATION: "plan-main-abc"})
    tf = build(defn(approve_plan="manual"), a, group=GROUP)
    assert tf["metadata"]["annotations"] == {f"apps.cozystack.io-{APPROVE_ANNOTATION}": "plan-main-abc"}


def test_input_is_not_mutated() -> None:
    a = app(spec={"subnets": [{"cidrBlock": "a"}]})
    before = copy.deepcopy(a)
    build(Defn(), a, group=GROUP)
    assert a == before


def test_update_keeps_what_controllers_and_operators_own() -> None:
    d = Defn()
    live = build(d, app(), group=GROUP)
    live["metadata"].update(
        resourceVersion="7",
        finalizers=["finalizers.tf.contrib.fluxcd.io"],
        ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u"}],
        annotations={"reconcile.fluxcd.io/requestedAt": "now", "apps.cozystack.io-old": "gone"},
    )
    live["spec"]["suspend"] = True
    tf = build(d, app(annotations={"note": "x"}), group=GROUP, live=live)
    meta = tf["metadata"]
    assert meta["resourceVersion"] == "7"
    assert meta["finalizers"] == ["finalizers.tf.contrib.fluxcd.io"]
    # ownerReferences are the Application's: an update without them removes them, as on a CRD
    assert "ownerReferences" not in meta
    # foreign annotations stay, the user's are replaced by what the Application says now
    assert meta["annotations"] == {"reconcile.fluxcd.io/requestedAt": "now", "apps.cozystack.io-note": "x"}
    assert tf["spec"]["suspend"] is True
    assert "suspend" not in build(d, app(), group=GROUP)["spec"]


def test_update_carries_the_applications_resource_version() -> None:
    """A stale Application resourceVersion reaches kube-apiserver, which answers 409."""
    d = Defn()
    live = build(d, app(), group=GROUP)
    live["metadata"]["resourceVersion"] = "7"
    assert build(d, app(resourceVersion="5"), group=GROUP, live=live)["metadata"]["resourceVersion"] == "5"
    assert "resourceVersion" not in build(d, app(resourceVersion="5"), group=GROUP)["metadata"]


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
    d = defn(
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
        annotations={RUNNER_SA_ANNOTATION: "tenant"},
    )
    live = build(d, a, group=GROUP)
    live["status"] = {"plan": {"pending": "plan-main-b8e362c206"}}
    approving = {**a, "metadata": {**a["metadata"], "annotations": {
        RUNNER_SA_ANNOTATION: "tenant", APPROVE_ANNOTATION: "plan-main-b8e362c206"}}}
    tf = build(d, approving, group=GROUP, live=live)
    assert tf["spec"]["approvePlan"] == "plan-main-b8e362c206"
    jsonschema.validate(tf["spec"], spec_schema)
    assert _unknown_fields(tf["spec"], spec_schema, "spec") == []
    assert set(tf) == {"apiVersion", "kind", "metadata", "spec"}
