"""An S3-compatible server on 127.0.0.1 that serves OpenTofu modules to Flux ``Bucket`` sources.

A Terraform object may take its module from a ``Bucket``: source-controller lists the bucket through
the S3 API (minio-go, ``provider: generic``) and packs the objects into an artifact. Locally the
S3 endpoint is gofakes3 (built from the Go module proxy by :func:`build.ensure_s3_server`), run as a
detached helper process with its buckets on disk under the cluster's state directory.

Objects are uploaded with plain ``PUT`` requests (path-style, ``Content-MD5`` checked by the
server). They are not signed: gofakes3 does not authenticate requests at all, and boto3 cannot join
the test environment (botocore pins python-dateutil<3, the ``kubernetes`` client needs >=3). So the
access key and secret key of the sample Secret are what source-controller signs its requests with,
not something the server checks.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import build, moduletree
from .build import log
from .cluster import Cluster, ClusterError, free_port
from .processes import Process

REPO_ROOT = Path(__file__).resolve().parents[3]
SAMPLE_MODULES = REPO_ROOT / "deploy" / "samples" / "modules"
#: The ``Bucket`` (and its credentials Secret) applied by :func:`apply_sources`.
SAMPLE_SOURCES_FILE = REPO_ROOT / "deploy" / "samples" / "sources" / "bucket-modules.yaml"
#: The endpoint written in :data:`SAMPLE_SOURCES_FILE`; replaced by the served ``127.0.0.1:PORT`` at apply time.
PLACEHOLDER_ENDPOINT = "127.0.0.1:9000"
#: The sample bucket and what :func:`apply_sources` uploads into it: ``prefix/`` -> module directory.
SAMPLE_BUCKET = "tofu-modules"
SAMPLE_OBJECTS = {"s3-bucket-module": SAMPLE_MODULES / "s3-bucket-module"}
SOURCES_NAMESPACE = "cozy-system"
PROCESS_NAME = "bucket-server"



@dataclass(frozen=True)
class BucketServer:
    """A running server: ``endpoint`` is ``127.0.0.1:PORT`` (a Bucket's ``spec.endpoint``)."""

    endpoint: str
    directory: Path

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"


def _request(server: BucketServer, method: str, path: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"{server.url}/{path.lstrip('/')}", data=body, method=method,
                                     headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def create_bucket(server: BucketServer, bucket: str) -> None:
    """Create ``bucket`` (nothing happens if it exists)."""
    status, body = _request(server, "PUT", bucket, b"")
    if status not in (200, 409) or (status == 409 and b"BucketAlreadyOwnedByYou" not in body
                                    and b"BucketAlreadyExists" not in body):
        raise ClusterError(f"creating bucket {bucket} on {server.endpoint} answered {status}: {body[:300]!r}")


def put_object(server: BucketServer, bucket: str, key: str, data: bytes) -> str:
    """Store ``data`` as ``bucket/key``; returns its ETag (the hex MD5 of ``data``, as for any single-part upload)."""
    md5 = hashlib.md5(data)
    quoted = urllib.parse.quote(key, safe="/")
    status, body = _request(server, "PUT", f"{bucket}/{quoted}", data, {
        "Content-MD5": base64.b64encode(md5.digest()).decode(),
        "Content-Type": "application/octet-stream",
    })
    if status != 200:
        raise ClusterError(f"uploading {bucket}/{key} to {server.endpoint} answered {status}: {body[:300]!r}")
    return md5.hexdigest()


def upload_directory(server: BucketServer, bucket: str, directory: Path, prefix: str = "") -> dict[str, str]:
    """Upload every file under ``directory`` as ``prefix + relative path``; returns key -> ETag."""
    if not directory.is_dir():
        raise ClusterError(f"{directory} is not a directory")
    base = prefix.strip("/") + "/" if prefix.strip("/") else ""
    return {base + path.relative_to(directory).as_posix():
            put_object(server, bucket, base + path.relative_to(directory).as_posix(), path.read_bytes())
            for path in moduletree.entries(directory)}


def start(cluster: Cluster) -> BucketServer:
    """Start gofakes3 for ``cluster`` (unless it runs); buckets live in ``<cluster>/bucket-server/data``."""
    process = Process(cluster, PROCESS_NAME)
    directory = cluster.dir / PROCESS_NAME
    running = process.running()
    if running is not None:
        return BucketServer(f"127.0.0.1:{running.port}", directory)
    binary = build.ensure_s3_server()
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # The service root answers ListBuckets with 200 once the server listens.
    process.spawn([str(binary), "-backend", "fs", "-fs.path", str(data), "-fs.create",
                   "-host", f"127.0.0.1:{port}"],
                  port=port, ready_url=f"http://127.0.0.1:{port}/", cwd=directory)
    log(f"S3 server ({binary.name}) serving on http://127.0.0.1:{port}/, buckets in {data}")
    return BucketServer(f"127.0.0.1:{port}", directory)


def stop(cluster: Cluster) -> None:
    Process(cluster, PROCESS_NAME).stop()


def apply_sources(cluster: Cluster, server: BucketServer) -> dict[str, str]:
    """Create :data:`SAMPLE_BUCKET`, upload the sample modules and apply :data:`SAMPLE_SOURCES_FILE`.

    Returns each uploaded key's ETag.
    """
    create_bucket(server, SAMPLE_BUCKET)
    uploaded: dict[str, str] = {}
    for prefix, directory in sorted(SAMPLE_OBJECTS.items()):
        uploaded |= upload_directory(server, SAMPLE_BUCKET, directory, prefix)
    log(f"uploaded {len(uploaded)} objects to s3://{SAMPLE_BUCKET} on {server.endpoint}")
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SOURCES_NAMESPACE}}))
    cluster.kubectl("apply", "-f", "-",
                    input=SAMPLE_SOURCES_FILE.read_text().replace(PLACEHOLDER_ENDPOINT, server.endpoint))
    return uploaded
