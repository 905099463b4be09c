"""What tofu_agl emits, checked by the real tofu-controller v0.16.5 and OpenTofu.

For each Tofu kind (the samples and the edge-case definition of this tier) an Application is created
through kubectl; tofu-controller fetches the module (source-controller, from the local stack's git
server or OCI registry), writes the runner's variables, plans and applies with real OpenTofu, and
writes the outputs Secret. The module's ``received`` output, read from that Secret, must be exactly
the Application's values, typed as the module declares them.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from localcluster import bucketserver, flux, samples, services
from localcluster.cluster import Cluster

from tests.flux import tofu
from tests.kube import FIXTURES, ROOT, get_json, kubectl, load_fixture, wait_for

GROUP = "tofu.apps.cozystack.io"
NS = "tenant-oracle"
TF = "terraforms.infra.contrib.fluxcd.io"
FLUX_FIXTURES = ROOT / "tests" / "data" / "flux"
#: kind -> (plural, release prefix of its definition)
KINDS = {"VPC": ("vpcs", "vpc-"), "S3Bucket": ("s3buckets", "s3bucket-"), "EdgeCase": ("edgecases", "edge-"),
         "S3Store": ("s3stores", "s3store-")}


def bucket_sourced_definition() -> dict[str, Any]:
    """The sample S3 bucket kind again, its module fetched from the S3-compatible Bucket source instead of the
    OCI registry: every source kind tofu_agl allows (GitRepository: vpc, OCIRepository: s3bucket, Bucket: this)
    is reconciled for real."""
    definition = copy.deepcopy(load_fixture("bucket.yaml"))
    definition["metadata"]["name"] = "s3store"
    definition["spec"]["application"].update(kind="S3Store", plural="s3stores", singular="s3store")
    definition["spec"]["release"]["prefix"] = "s3store-"
    definition["spec"]["terraform"].update(
        sourceRef={"kind": "Bucket", "name": bucketserver.SAMPLE_BUCKET, "namespace": flux.SOURCES_NAMESPACE},
        path="./s3-bucket-module")
    return definition


def edge_definition() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((FLUX_FIXTURES / "definitions" / "edge-cases.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def tofu_kinds(control_plane: Cluster, tofu_service: services.Running,
               flux_controllers: flux.Controllers) -> Iterator[Cluster]:
    cluster = control_plane
    tofu.serve_module(cluster, "edge-cases", FLUX_FIXTURES / "modules" / "edge-cases")
    kubectl(cluster, "create", "namespace", NS, check=False)
    state = flux.state_kubeconfig(cluster)
    for definition in (load_fixture("vpc.yaml"), load_fixture("bucket.yaml"), edge_definition(),
                       bucket_sourced_definition()):
        local = samples.localize(definition, state)
        # These tests read what the module received: applied at once, and the echo output published.
        terraform = local["spec"]["terraform"]
        terraform["approvePlan"] = "auto"
        outputs = terraform.setdefault("writeOutputsToSecret", {"name": "{{ .name }}-outputs", "outputs": []})
        outputs["outputs"] = [*outputs.get("outputs", []), "received"]
        kubectl(cluster, "apply", "-f", "-", input=json.dumps(local))
    wait_for(lambda: all(p in served(cluster) for p in ("vpcs", "s3buckets", "edgecases", "s3stores")),
             "the vpc, s3bucket, edgecase and s3store kinds", timeout=90)
    yield cluster


def served(cluster: Cluster) -> str:
    return kubectl(cluster, "api-resources", f"--api-group={GROUP}", "--cached=false", check=False).stdout


def ready(cluster: Cluster, plural: str, name: str) -> bool:
    app = get_json(cluster, plural, name, "-n", NS)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in app.get("status", {}).get("conditions", []))


def create(cluster: Cluster, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Create the Application, wait until tofu-controller applied it; the Terraform and its outputs."""
    manifest = {"apiVersion": f"{GROUP}/v1alpha1", "kind": kind, "metadata": {"name": name, "namespace": NS},
                "spec": spec}
    kubectl(cluster, "create", "-f", "-", input=json.dumps(manifest))  # apply would drop explicit nulls
    plural, prefix = KINDS[kind]
    wait_for(lambda: ready(cluster, plural, name), f"{plural}/{name} applied by tofu-controller", timeout=300,
             interval=1)
    terraform: dict[str, Any] = get_json(cluster, TF, prefix + name, "-n", NS)
    secret = get_json(cluster, "secret", terraform["spec"]["writeOutputsToSecret"]["name"], "-n", NS)
    terraform["outputs"] = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    return terraform


def received(terraform: dict[str, Any]) -> Any:
    return json.loads(terraform["outputs"]["received"])


def sample_outputs(cluster: Cluster, kind: str, sample: str) -> dict[str, Any]:
    """Create the sample Application and let tofu-controller apply it; every output the definition publishes
    is in the outputs Secret."""
    spec = yaml.safe_load((FIXTURES / "applications" / sample).read_text())["spec"]
    terraform = create(cluster, kind, "oracle", spec)
    declared = set(terraform["spec"]["writeOutputsToSecret"]["outputs"])
    missing = declared - set(terraform["outputs"])
    assert not missing, f"outputs missing from the Secret: {missing}"
    return {name: decoded(value) for name, value in terraform["outputs"].items()}


def decoded(value: str) -> Any:
    """An outputs Secret value: tofu-controller writes string outputs as they are and others as JSON."""
    try:
        return json.loads(value)
    except ValueError:
        return value


def test_vpc_sample_reaches_the_module_intact(tofu_kinds: Cluster) -> None:
    outputs = sample_outputs(tofu_kinds, "VPC", "vpc-network.yaml")
    assert outputs["received"] == {
        "region": "eu-west-1",
        "cidr_block": "10.20.0.0/16",
        "enable_dns_hostnames": True,
        "subnets": [
            {"cidr_block": "10.20.1.0/24", "availability_zone": "eu-west-1a", "public": True},
            {"cidr_block": "10.20.2.0/24", "availability_zone": "eu-west-1b", "public": False},
        ],
        "nat_gateway": {"enabled": True, "single_nat_gateway": True},
        "flow_logs": False,
        "tags": {"CostCenter": "cc-42"},
    }
    assert len(outputs["public_subnet_ids"]) == 1 and len(outputs["private_subnet_ids"]) == 1


def test_bucket_sample_reaches_the_module_intact(tofu_kinds: Cluster) -> None:
    outputs = sample_outputs(tofu_kinds, "S3Bucket", "s3bucket-assets.yaml")
    assert outputs["received"] == {
        "region": "eu-central-1",
        "versioning": True,
        "force_destroy": False,
        "storage_class": "STANDARD",
        "lifecycle_rules": [{"id": "expire-tmp", "prefix": "tmp/", "expirationDays": 7}],
        "tags": {},
    }


def test_bucket_sample_from_an_s3_bucket_source(tofu_kinds: Cluster) -> None:
    terraform = get_json(tofu_kinds, "tofuapplicationdefinition", "s3store")
    assert terraform["spec"]["terraform"]["sourceRef"]["kind"] == "Bucket"
    outputs = sample_outputs(tofu_kinds, "S3Store", "s3bucket-assets.yaml")
    assert outputs["received"]["lifecycle_rules"] == [{"id": "expire-tmp", "prefix": "tmp/", "expirationDays": 7}]
    assert outputs["bucket_arn"].startswith("arn:aws:s3:::")


BIG = 2**53 + 1


@pytest.mark.parametrize(("name", "spec", "expected"), [
    pytest.param("full", {
        "labels": {"app.kubernetes.io/name": "edge", "Cost Center": "42", "1st": "yes", "kebab-key": ""},
        "limits": {"maxConnections": BIG, "ratio": 0.25},
        "enabled": False,
        "zones": ["a", "b"],
        "network": {"cidrBlock": "10.0.0.0/8", "natGateway": {"enabled": True, "perAz": False}},
        "note": "set",
    }, {
        "labels": {"app.kubernetes.io/name": "edge", "Cost Center": "42", "1st": "yes", "kebab-key": ""},
        "limits": {"max_connections": BIG, "ratio": 0.25},
        "enabled": False,
        "zones": ["a", "b"],
        "network": {"cidr_block": "10.0.0.0/8", "nat_gateway": {"enabled": True, "per_az": False}},
        "note": "set",
    }, id="non-identifier-map-keys-large-int-false-nested"),
    pytest.param("sparse", {
        "network": {"cidrBlock": "192.168.0.0/16"},
    }, {
        "labels": {},
        "limits": {"max_connections": 100, "ratio": 0.5},
        "enabled": True,
        "zones": [],
        "network": {"cidr_block": "192.168.0.0/16", "nat_gateway": None},
        "note": "unset",
    }, id="defaults-empty-list-optional-object-left-out"),
    pytest.param("optional-attr", {
        "network": {"cidrBlock": "10.1.0.0/16", "natGateway": {"enabled": False}},
        "note": None,
    }, {
        "labels": {},
        "limits": {"max_connections": 100, "ratio": 0.5},
        "enabled": True,
        "zones": [],
        "network": {"cidr_block": "10.1.0.0/16", "nat_gateway": {"enabled": False, "per_az": True}},
        "note": None,
    }, id="optional-attribute-default-and-explicit-null"),
])
def test_edge_cases_reach_the_module_intact(tofu_kinds: Cluster, name: str, spec: dict[str, Any],
                                            expected: dict[str, Any]) -> None:
    terraform = create(tofu_kinds, "EdgeCase", name, spec)
    assert received(terraform) == expected, json.dumps(terraform["spec"]["vars"], indent=1)
