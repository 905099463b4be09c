"""``Packer``: how a cache keeps its objects -- compressed against the first object it packed, exactly
round-tripped, at their compressed size, with the plain JSON encoding still readable."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from shared.bodies import JSON, dumps
from shared.client.informer import Packer


def terraform(name: str, region: str = "eu-west-1") -> JSON:
    """A cached backing object as tofu_agl keeps one: most of it is the same for every object of its kind."""
    return {
        "apiVersion": "infra.contrib.fluxcd.io/v1alpha2", "kind": "Terraform",
        "metadata": {"name": f"vpc-{name}", "namespace": "scale", "uid": f"{hash(name) & 0xFFFFFFFF:08x}-0000",
                     "resourceVersion": str(1000 + len(name)), "generation": 1,
                     "creationTimestamp": "2026-11-27T00:22:31Z",
                     "labels": {"apps.cozystack.io/application.kind": "VPC",
                                "apps.cozystack.io/application.name": name, "sharding.fluxcd.io/key": "tenants"}},
        "spec": {"approvePlan": "auto", "interval": "10m", "path": "./modules/vpc", "retryInterval": "1m",
                 "backendConfig": {"secretSuffix": f"vpc-{name}", "inClusterConfig": False},
                 "sourceRef": {"kind": "GitRepository", "name": "vpc-module", "namespace": "cozy-system"},
                 "vars": [{"name": "region", "value": region}, {"name": "cidr_block", "value": "10.0.0.0/16"}],
                 "writeOutputsToSecret": {"name": f"{name}-outputs", "outputs": ["vpc_id", "subnet_ids"]}},
    }


def test_objects_like_the_first_pack_to_a_small_fraction_of_their_encoding_and_round_trip() -> None:
    packer = Packer()
    packer.pack(terraform("seed"))
    for name in ("a", "tenant-db-7", "s-49999"):
        obj = terraform(name, region="us-east-2")
        packed = packer.pack(obj)
        assert len(packed) * 5 < len(dumps(obj)), f"{len(packed)} bytes kept of {len(dumps(obj))}"
        assert packer.unpack(packed) == obj
        assert packer.unpack_encoded(packed) == dumps(obj)


@pytest.mark.parametrize("obj", [
    {"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"k": "v" * 5000}},
    {"spec": {"big": 2**70, "unicode": "é ✓ 𝄞", "nested": [[[]], {}], "null": None, "float": 1.5}},
    {},
], ids=["larger", "unusual values", "empty"])
def test_an_object_unlike_the_first_still_round_trips_exactly(obj: JSON) -> None:
    packer = Packer()
    packer.pack(terraform("seed"))
    assert packer.unpack(packer.pack(obj)) == obj


def test_the_plain_encoding_reads_as_it_is_before_and_after_the_first_pack() -> None:
    packer = Packer()
    plain = dumps({"metadata": {"name": "x"}})
    assert packer.unpack_encoded(plain) == plain
    packer.pack(terraform("seed"))
    assert packer.unpack(plain) == {"metadata": {"name": "x"}}


def test_each_reader_gets_its_own_copy() -> None:
    packer = Packer()
    packed = packer.pack(terraform("a"))
    first = packer.unpacked(packed)
    first["spec"]["vars"].clear()
    assert packer.unpacked(packed) == terraform("a")
    bookmark = {"metadata": {"resourceVersion": "7"}}
    copy = packer.unpacked(bookmark)
    copy["metadata"]["resourceVersion"] = "8"
    assert bookmark["metadata"]["resourceVersion"] == "7"


def test_a_packed_object_costs_its_compressed_size() -> None:
    """What the cache keeps of an object is its compressed bytes at their exact size, not a buffer the
    compressor grew while writing."""
    packer = Packer()
    packer.pack(terraform("seed"))
    objects = [terraform(f"s-{i}") for i in range(100)]
    sizes = [len(packer.pack(obj)) for obj in objects]
    gc.collect()
    tracemalloc.start()
    try:
        kept = [packer.pack(obj) for obj in objects]
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(kept) == 100
    assert used / 100 < sum(sizes) / 100 + 64, f"{used / 100:.0f} bytes kept per {sum(sizes) / 100:.0f}-byte object"
