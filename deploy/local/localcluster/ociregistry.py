"""An OCI registry on 127.0.0.1 that serves OpenTofu modules as Flux OCI artifacts.

A Terraform object may take its module from an ``OCIRepository``; the sample S3 bucket definition
does. To have the real source-controller pull it the way it does in a cluster, the CNCF
distribution registry (built from the Go module proxy by :func:`build.ensure_registry`) runs as a
detached helper process with filesystem storage under the cluster's state directory, plain HTTP and
no authentication, and a module directory is pushed to it in the layout ``flux push artifact``
produces: one gzip'd tarball layer of media type :data:`CONTENT_MEDIA_TYPE`, an empty JSON config of
:data:`CONFIG_MEDIA_TYPE`, and an OCI image manifest annotated with where the content came from and
its revision.

The push goes through oras-py (the ``oras`` package, maintained by the ORAS project), which speaks
the distribution HTTP API and takes the layer and config media types as given; the tarball itself is
made here (:func:`tarball`) rather than by oras-py, so that the same files always give the same bytes
and hence the same layer and manifest digests (the OCIRepository's revision).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import secrets
import stat
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import oras.provider
import yaml

from . import build, moduletree
from .build import log
from .cluster import Cluster, ClusterError, free_port
from .processes import Process

#: Media types of a Flux OCI artifact (what source-controller unpacks without a layerSelector).
CONTENT_MEDIA_TYPE = "application/vnd.cncf.flux.content.v1.tar+gzip"
CONFIG_MEDIA_TYPE = "application/vnd.cncf.flux.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
SOURCE_ANNOTATION = "org.opencontainers.image.source"
REVISION_ANNOTATION = "org.opencontainers.image.revision"

REPO_ROOT = Path(__file__).resolve().parents[3]
SAMPLE_MODULES = REPO_ROOT / "deploy" / "samples" / "modules"
#: The ``OCIRepository`` objects for the pushed modules, applied by :func:`apply_sources`.
SAMPLE_SOURCES_FILE = REPO_ROOT / "deploy" / "samples" / "sources" / "oci-modules.yaml"
#: The registry written in :data:`SAMPLE_SOURCES_FILE`; replaced by the served ``oci://HOST/`` at apply time.
PLACEHOLDER_URL = "oci://127.0.0.1:5000/"
#: Repository in the registry -> the module directory pushed there by :func:`apply_sources`.
SAMPLE_ARTIFACTS = {"modules/s3-bucket": SAMPLE_MODULES / "s3-bucket-module"}
#: The tags every sample module is pushed under; the sample OCIRepository follows the version tag.
SAMPLE_TAGS = ("0.1.0", "latest")
SOURCES_NAMESPACE = "cozy-system"
PROCESS_NAME = "oci-registry"



@dataclass(frozen=True)
class Registry:
    """A running registry: ``host`` is ``127.0.0.1:PORT`` (as in ``oci://`` URLs), ``url`` its HTTP base."""

    host: str
    directory: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    @property
    def oci_url(self) -> str:
        return f"oci://{self.host}/"


# ------------------------------------------------------------------------------------------ content


def _entries(directory: Path) -> list[Path]:
    """Every directory and regular file under ``directory`` that is published, sorted."""
    return moduletree.entries(directory, with_directories=True)


def tarball(directory: Path) -> bytes:
    """A gzip'd tar of ``directory``'s content whose bytes depend on file names, contents and the exec bit only.

    Entries are sorted, paths are relative (no leading ``./``), owner is 0:0 without names, every
    mtime is 0, modes are 0755/0644, and the gzip header carries neither a file name nor a time.
    """
    if not directory.is_dir():
        raise ClusterError(f"{directory} is not a directory")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _entries(directory):
            info = tarfile.TarInfo(path.relative_to(directory).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_dir():
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
                continue
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _source_of(directory: Path) -> str:
    """What the source annotation says: the directory relative to the repository (same on every machine)."""
    resolved = directory.resolve()
    if resolved.is_relative_to(REPO_ROOT):
        return f"agl-local:{resolved.relative_to(REPO_ROOT).as_posix()}"
    return f"file://{resolved}"


# ------------------------------------------------------------------------------------------ pushing


def _client() -> oras.provider.Registry:
    client = oras.provider.Registry(insecure=True)
    # The registry is on loopback: never send its requests through a proxy from the environment.
    client.session.trust_env = False
    return client


def push_directory(registry: Registry, repository: str, tag: str, directory: Path, *,
                   source: str | None = None) -> str:
    """Push ``directory`` as a Flux OCI artifact to ``repository:tag``; returns the manifest digest.

    The revision annotation is the tarball's digest, so pushing unchanged content again (under any
    tag) yields the same manifest and digest.
    """
    content = tarball(directory)
    annotations = {SOURCE_ANNOTATION: source or _source_of(directory), REVISION_ANNOTATION: digest(content)}
    with tempfile.TemporaryDirectory(prefix="agl-oci-") as tmp:
        layer = Path(tmp) / f"{repository.rsplit('/', 1)[-1]}.tar.gz"
        layer.write_bytes(content)
        config = Path(tmp) / "config.json"
        config.write_bytes(b"{}")
        try:
            response = _client().push(
                f"{registry.host}/{repository}:{tag}",
                files=[f"{layer}:{CONTENT_MEDIA_TYPE}"],
                manifest_config=f"{config}:{CONFIG_MEDIA_TYPE}",
                manifest_annotations=annotations,
                disable_path_validation=True,
                quiet=True,
            )
        except (ValueError, OSError) as exc:
            raise ClusterError(f"pushing {directory} to {registry.host}/{repository}:{tag} failed: {exc}") from exc
    if response.status_code not in (200, 201):
        raise ClusterError(f"pushing {directory} to {registry.host}/{repository}:{tag}: manifest PUT answered "
                           f"{response.status_code}: {response.text[:500]}")
    pushed = str(response.headers.get("Docker-Content-Digest", ""))
    sent = response.request.body
    if isinstance(sent, str):
        sent = sent.encode()
    if not pushed or (isinstance(sent, bytes) and digest(sent) != pushed):
        raise ClusterError(f"{registry.host}/{repository}:{tag}: registry answered digest {pushed!r} for the "
                           "manifest, which is not the digest of what was sent")
    return pushed


def manifest(registry: Registry, repository: str, reference: str) -> dict[str, object]:
    """The manifest stored under ``repository:reference`` (a tag or digest), as JSON."""
    request = urllib.request.Request(f"{registry.url}/v2/{repository}/manifests/{reference}",
                                     headers={"Accept": MANIFEST_MEDIA_TYPE})
    with urllib.request.urlopen(request, timeout=10) as resp:
        loaded: dict[str, object] = json.loads(resp.read())
    return loaded


# ------------------------------------------------------------------------------------------ process


def _config(root: Path, port: int) -> dict[str, object]:
    """The registry's configuration: loopback only, plain HTTP, no auth, storage on disk, no access log."""
    return {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(root)}, "delete": {"enabled": True},
                    "maintenance": {"uploadpurging": {"enabled": False}}},
        # The secret signs upload-session state; one registry instance, so any value of its own will do.
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16),
                 "headers": {"X-Content-Type-Options": ["nosniff"]}},
        "health": {"storagedriver": {"enabled": False}},
    }


def start(cluster: Cluster) -> Registry:
    """Start the registry for ``cluster`` (unless it runs); storage lives in ``<cluster>/oci-registry/data``."""
    process = Process(cluster, PROCESS_NAME)
    directory = cluster.dir / PROCESS_NAME
    running = process.running()
    if running is not None:
        return Registry(f"127.0.0.1:{running.port}", directory)
    binary = build.ensure_registry()
    data = directory / "data"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = directory / "config.yml"
    config.write_text(yaml.safe_dump(_config(data, port), sort_keys=False))
    config.chmod(0o600)
    # No tracing exporter: by default the registry would send its spans to an OTLP collector.
    process.spawn([str(binary), "serve", str(config)], port=port, ready_url=f"http://127.0.0.1:{port}/v2/",
                  env={"OTEL_TRACES_EXPORTER": "none"}, cwd=directory)
    log(f"OCI registry ({binary.name}) serving on http://127.0.0.1:{port}/, storage {data}")
    return Registry(f"127.0.0.1:{port}", directory)


def stop(cluster: Cluster) -> None:
    Process(cluster, PROCESS_NAME).stop()


def apply_sources(cluster: Cluster, registry: Registry) -> dict[str, str]:
    """Push the sample modules under :data:`SAMPLE_TAGS` and apply :data:`SAMPLE_SOURCES_FILE` for this registry.

    Returns each pushed repository's manifest digest.
    """
    pushed: dict[str, str] = {}
    for repository, directory in sorted(SAMPLE_ARTIFACTS.items()):
        digests = {push_directory(registry, repository, tag, directory) for tag in SAMPLE_TAGS}
        if len(digests) != 1:
            raise ClusterError(f"{repository}: the tags {SAMPLE_TAGS} got different manifests {sorted(digests)}")
        pushed[repository] = digests.pop()
        log(f"pushed {directory.name} to {registry.host}/{repository} ({', '.join(SAMPLE_TAGS)}) "
            f"as {pushed[repository]}")
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SOURCES_NAMESPACE}}))
    cluster.kubectl("apply", "-f", "-",
                    input=SAMPLE_SOURCES_FILE.read_text().replace(PLACEHOLDER_URL, registry.oci_url))
    return pushed
