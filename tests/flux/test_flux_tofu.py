"""Real OpenTofu as the oracle of what tofu_agl emits.

For each Tofu kind (the samples and the edge-case definition of this tier) an Application is
created through kubectl, the Terraform tofu_agl wrote is read back from kube-apiserver, and its
``vars`` are handed to ``tofu`` the way tofu-controller v0.16.5's runner does it
(``runner/server_generate_tf_vars.go``, ``GenerateVarsForTF``, read from the module
``github.com/flux-iac/tofu-controller@v0.16.5`` that ``go mod download`` puts in the module cache):
a map of ``spec.vars[].name`` to the raw JSON ``value`` (``varsFrom`` entries merged over it),
marshalled as JSON into ``generated.auto.tfvars.json`` in the module's working directory. Then
``tofu init``, ``plan`` and ``apply`` with local state, and the module's ``received`` output must
be exactly the Application's values, typed as the module declares them (the runner's step is
reproduced in ``localcluster.tofurunner``, shared with ``nox -s demo``).

tofu-controller itself does not build here (its ``api`` module is not on the module proxy), so
what happens around this step (plan ids, approval, outputs Secret) stays covered by the played
statuses of the integration tier.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import build, services, tofurunner
from localcluster.cluster import Cluster

from tests.kube import FIXTURES, ROOT, get_json, kubectl, load_fixture, wait_for

GROUP = "tofu.apps.cozystack.io"
NS = "tenant-oracle"
TF = "terraforms.infra.contrib.fluxcd.io"
FLUX_FIXTURES = ROOT / "tests" / "fixtures" / "flux"
#: Where the tree of each source a definition names lives in this repository.
SOURCE_TREES = (tofurunner.SAMPLE_MODULES, FLUX_FIXTURES / "modules")
#: kind -> (plural, release prefix of its definition)
KINDS = {"VPC": ("vpcs", "vpc-"), "S3Bucket": ("s3buckets", "s3bucket-"), "EdgeCase": ("edgecases", "edge-")}


def edge_definition() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((FLUX_FIXTURES / "definitions" / "edge-cases.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def tofu_kinds(control_plane: Cluster, tofu_service: services.Running) -> Iterator[Cluster]:
    kubectl(control_plane, "create", "namespace", NS, check=False)
    for definition in (load_fixture("vpc.yaml"), load_fixture("bucket.yaml"), edge_definition()):
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(definition))
    wait_for(lambda: all(p in served(control_plane) for p in ("vpcs", "s3buckets", "edgecases")),
             "the vpc, s3bucket and edgecase kinds", timeout=90)
    yield control_plane


@pytest.fixture(scope="session")
def tofu() -> Path:
    return build.ensure_tofu()


def served(cluster: Cluster) -> str:
    return kubectl(cluster, "api-resources", f"--api-group={GROUP}", "--cached=false", check=False).stdout


def create(cluster: Cluster, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Create the Application and return the Terraform tofu_agl wrote for it, as kube-apiserver stores it."""
    manifest = {"apiVersion": f"{GROUP}/v1alpha1", "kind": kind, "metadata": {"name": name, "namespace": NS},
                "spec": spec}
    kubectl(cluster, "create", "-f", "-", input=json.dumps(manifest))  # apply would drop explicit nulls
    plural, prefix = KINDS[kind]
    assert get_json(cluster, plural, name, "-n", NS)["metadata"]["name"] == name
    terraform: dict[str, Any] = get_json(cluster, TF, prefix + name, "-n", NS)
    return terraform


def apply_with_tofu(tofu: Path, terraform: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """The runner's var file next to a copy of the module, then init/plan/apply with local state; the outputs."""
    workdir = tofurunner.prepare(terraform, tmp_path / terraform["metadata"]["name"], SOURCE_TREES)
    planned = tofurunner.plan(tofu, workdir)
    assert "Plan:" in planned and "to add" in planned, planned
    return tofurunner.apply(tofu, workdir)


def sample_outputs(cluster: Cluster, tofu: Path, tmp_path: Path, kind: str, sample: str) -> dict[str, Any]:
    """Create the sample Application, apply its Terraform's vars with OpenTofu; every output the definition
    publishes must exist in the module."""
    spec = yaml.safe_load((FIXTURES / "applications" / sample).read_text())["spec"]
    terraform = create(cluster, kind, "oracle", spec)
    outputs = apply_with_tofu(tofu, terraform, tmp_path)
    declared = set(terraform["spec"]["writeOutputsToSecret"]["outputs"])
    assert declared <= set(outputs), f"outputs the definition publishes but the module lacks: {declared - set(outputs)}"
    return outputs


def test_vpc_sample_reaches_the_module_intact(tofu_kinds: Cluster, tofu: Path, tmp_path: Path) -> None:
    outputs = sample_outputs(tofu_kinds, tofu, tmp_path, "VPC", "vpc-network.yaml")
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


def test_bucket_sample_reaches_the_module_intact(tofu_kinds: Cluster, tofu: Path, tmp_path: Path) -> None:
    outputs = sample_outputs(tofu_kinds, tofu, tmp_path, "S3Bucket", "s3bucket-assets.yaml")
    assert outputs["received"] == {
        "region": "eu-central-1",
        "versioning": True,
        "force_destroy": False,
        "storage_class": "STANDARD",
        "lifecycle_rules": [{"id": "expire-tmp", "prefix": "tmp/", "expirationDays": 7}],
        "tags": {},
    }


BIG = 2**53 + 1


@pytest.mark.parametrize(("name", "spec", "received"), [
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
def test_edge_cases_reach_the_module_intact(tofu_kinds: Cluster, tofu: Path, tmp_path: Path, name: str,
                                            spec: dict[str, Any], received: dict[str, Any]) -> None:
    terraform = create(tofu_kinds, "EdgeCase", name, spec)
    outputs = apply_with_tofu(tofu, terraform, tmp_path)
    assert outputs["received"] == received, json.dumps(terraform["spec"]["vars"], indent=1)
