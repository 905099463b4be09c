"""The two non-git module sources a Terraform object may name, reconciled by the real source-controller v1.9.6.

``OCIRepository``: the sample S3 bucket module is pushed as a Flux OCI artifact to the CNCF
distribution registry on 127.0.0.1 (:mod:`localcluster.ociregistry`); ``Bucket``: the sample modules
are uploaded to an S3-compatible server on 127.0.0.1 (:mod:`localcluster.bucketserver`). In both
cases source-controller fetches the content itself and serves an artifact tarball from its storage,
which the tests download and open.
"""

from __future__ import annotations

import io
import json
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from localcluster import bucketserver, flux, ociregistry
from localcluster.cluster import Cluster

from tests.kube import get_json, kubectl, wait_for

NS = flux.SOURCES_NAMESPACE
OCI = "ocirepositories.source.toolkit.fluxcd.io"
BUCKETS = "buckets.source.toolkit.fluxcd.io"
#: A pull, or a listing plus downloads, and packing: seconds, but the machine is shared and slow.
SLOW = 180


@pytest.fixture(scope="module")
def registry(control_plane: Cluster, flux_controllers: flux.Controllers) -> Iterator[ociregistry.Registry]:
    running = ociregistry.start(control_plane)
    try:
        yield running
    finally:
        ociregistry.stop(control_plane)


@pytest.fixture(scope="module")
def s3(control_plane: Cluster, flux_controllers: flux.Controllers) -> Iterator[bucketserver.BucketServer]:
    running = bucketserver.start(control_plane)
    try:
        yield running
    finally:
        bucketserver.stop(control_plane)


def ready(obj: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" and c.get("observedGeneration")
               == obj["metadata"]["generation"] for c in obj.get("status", {}).get("conditions", []))


def wait_ready(cluster: Cluster, resource: str, name: str, revision: str | None = None) -> dict[str, Any]:
    """The object once Ready with an artifact (of ``revision``, if given)."""

    def check() -> dict[str, Any] | None:
        obj: dict[str, Any] = get_json(cluster, resource, name, "-n", NS)
        artifact = obj.get("status", {}).get("artifact")
        if ready(obj) and artifact and (revision is None or artifact["revision"] == revision):
            return obj
        return None

    found: dict[str, Any] = wait_for(check, f"{resource}/{name} Ready with an artifact", timeout=SLOW, interval=1)
    return found


def artifact_files(obj: dict[str, Any]) -> dict[str, bytes]:
    """Download the artifact source-controller serves for ``obj`` and return its regular files."""
    with urllib.request.urlopen(obj["status"]["artifact"]["url"], timeout=30) as resp:
        data = resp.read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        out: dict[str, bytes] = {}
        for member in tar.getmembers():
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None:
                out[member.name.removeprefix("./")] = extracted.read()
        return out


def test_the_sample_oci_repository_is_ready_with_the_pushed_digest(control_plane: Cluster,
                                                                  registry: ociregistry.Registry) -> None:
    pushed = ociregistry.apply_sources(control_plane, registry)
    digest = pushed["modules/s3-bucket"]
    obj = wait_ready(control_plane, OCI, "s3-bucket-module")
    assert obj["spec"]["url"] == f"oci://{registry.host}/modules/s3-bucket"
    assert obj["status"]["artifact"]["revision"] == f"0.1.0@{digest}"
    files = artifact_files(obj)
    module = ociregistry.SAMPLE_ARTIFACTS["modules/s3-bucket"]
    assert files["main.tf"] == (module / "main.tf").read_bytes()
    # The manifest source-controller pulled is the one pushed, annotations included.
    stored = ociregistry.manifest(registry, "modules/s3-bucket", digest)
    assert stored["annotations"] == {
        ociregistry.SOURCE_ANNOTATION: "agl-local:deploy/samples/modules/s3-bucket-module",
        ociregistry.REVISION_ANNOTATION: ociregistry.digest(ociregistry.tarball(module)),
    }
    # Pushing the same content again gives the same digest: source-controller keeps its revision.
    assert ociregistry.apply_sources(control_plane, registry) == pushed


def test_a_new_push_to_the_followed_tag_moves_the_oci_repository(control_plane: Cluster,
                                                                registry: ociregistry.Registry,
                                                                tmp_path: Path) -> None:
    module = tmp_path / "module"
    module.mkdir()
    (module / "main.tf").write_text('variable "size" {\n  type = number\n}\n')
    first = ociregistry.push_directory(registry, "modules/updates", "stable", module)
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
        "metadata": {"name": "module-updates", "namespace": NS},
        "spec": {"url": f"oci://{registry.host}/modules/updates", "ref": {"tag": "stable"}, "insecure": True,
                 "interval": "10m"}}))
    wait_ready(control_plane, OCI, "module-updates", f"stable@{first}")
    (module / "outputs.tf").write_text('output "size" {\n  value = var.size\n}\n')
    second = ociregistry.push_directory(registry, "modules/updates", "stable", module)
    assert second != first
    kubectl(control_plane, "annotate", "--overwrite", OCI, "module-updates", "-n", NS,
            "reconcile.fluxcd.io/requestedAt=second-push")
    obj = wait_ready(control_plane, OCI, "module-updates", f"stable@{second}")
    assert set(artifact_files(obj)) == {"main.tf", "outputs.tf"}
    kubectl(control_plane, "delete", OCI, "module-updates", "-n", NS, "--wait=false")


def test_the_sample_bucket_is_ready_with_the_uploaded_modules(control_plane: Cluster,
                                                              s3: bucketserver.BucketServer) -> None:
    uploaded = bucketserver.apply_sources(control_plane, s3)
    assert "s3-bucket-module/main.tf" in uploaded
    obj = wait_ready(control_plane, BUCKETS, "tofu-modules")
    assert obj["spec"]["endpoint"] == s3.endpoint
    assert obj["status"]["artifact"]["revision"].startswith("sha256:")
    files = artifact_files(obj)
    assert set(files) == set(uploaded)
    module = bucketserver.SAMPLE_OBJECTS["s3-bucket-module"]
    assert files["s3-bucket-module/main.tf"] == (module / "main.tf").read_bytes()
