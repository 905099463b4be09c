"""Container images for a real kubelet node, built on this machine with neither Docker nor a registry.

Nothing can be pulled here, so every image starts from scratch: a stand-in for ``python:3.11-slim`` made
from Debian packages with mmdebstrap, and the project's own ``Dockerfile`` built on it with ``buildah bud``
(the pause image is :mod:`pauseimage`'s). Each is saved as an OCI archive in the cache under a content hash,
so an unchanged recipe or tree costs nothing, and :func:`import_images` hands the archives to containerd
under the exact names kubelet asks for (with ``imagePullPolicy: Never``).
"""

from __future__ import annotations

import configparser
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import paths
from .build import BuildError, log

BASE_NAME = "localhost/agl-python-base"
PROJECT_NAME = "localhost/agl-parallel"
#: The project's pods run as this uid; python:3.11-slim has no passwd entry for it, and neither may our base.
POD_UID = 65532
#: Where the Dockerfile's RUN steps find the CA bundle: Debian's pip (hence the base's venv) reads this path.
CA_TARGET = "/etc/ssl/certs/ca-certificates.crt"

SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
#: The venv sits at /usr/local, as python:3.11-slim's interpreter does: ``python`` and ``pip`` are on the
#: default PATH and ``pip install`` lands in /usr/local/lib/python3.11/site-packages.
BASE_CONFIG = ("--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "--env", "LANG=C.UTF-8",
               "--cmd", '["python3"]')
_MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    # Sets up merged-/usr itself and installs usr-is-merged, so usrmerge and the full perl stay out (~50 MB).
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--skip=output/dev",
    # The host's mirror serves Release files past their Valid-Until (it is a dated snapshot).
    '--aptopt=Acquire::Check-Valid-Until "false"',
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    '--customize-hook=chroot "$1" python3 -m venv /usr/local',
)

_BUD_PROGRESS = re.compile(r"(\[\d+/\d+\] )?STEP |COMMIT|Successfully")


@dataclass(frozen=True)
class ImageArchive:
    """An image saved as an OCI archive; ``ref`` is the name it carries inside and gets in containerd."""

    ref: str
    path: Path


@dataclass(frozen=True)
class ImageSize:
    """Bytes of an image as shipped (compressed layers, config and manifest) and as unpacked on a node."""

    compressed: int
    unpacked: int
    layers: int


def images_dir() -> Path:
    path = paths.cache_dir() / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def short_hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def run_step(cmd: Sequence[str], step: str, *, env: dict[str, str] | None = None, cwd: Path | None = None,
         show: re.Pattern[str] | None = None) -> str:
    """Run a tool, logging the lines ``show`` matches; on failure raise with the tail of its output."""
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
    except FileNotFoundError as exc:
        raise BuildError(f"{step}: {cmd[0]} is not installed (apt-get install {cmd[0]})") from exc
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line.rstrip())
        if show is not None and show.match(lines[-1]):
            log(f"{step}: {lines[-1]}")
    if (code := proc.wait()) != 0:
        raise BuildError(f"{step} failed (exit {code}) running {' '.join(cmd)}:\n" + "\n".join(lines[-40:]))
    return "\n".join(lines)


def buildah(*args: str) -> list[str]:
    """A buildah command on the project's own storage in the cache: the host's default store is never touched.

    overlay works here (native diff on ext4, as root); ``AGL_BUILDAH_DRIVER=vfs`` is the fallback elsewhere."""
    root, driver = paths.cache_dir() / "buildah", os.environ.get("AGL_BUILDAH_DRIVER", "overlay")
    return ["buildah", "--root", str(root / "storage"), "--runroot", str(root / "run"), "--storage-driver", driver,
            *args]


def image_exists(ref: str) -> bool:
    return subprocess.run(buildah("inspect", "--type", "image", ref), capture_output=True).returncode == 0


def mmdebstrap_command(output: Path) -> list[str]:
    return ["mmdebstrap", *_MMDEBSTRAP_OPTIONS, f"--include={','.join(BASE_PACKAGES)}", SUITE, str(output),
            *MIRRORS]


def recipe_hash() -> str:
    """What the base image is made of; any change to it yields a new tag and so a rebuild."""
    return short_hash("base-v1", *mmdebstrap_command(Path("OUT")), *BASE_CONFIG)


def base_image_ref() -> str:
    return f"{BASE_NAME}:3.11-{SUITE}-{recipe_hash()}"


def check_no_pod_user(tarball: Path) -> None:
    """python:3.11-slim has no passwd entry for :data:`POD_UID`; a base with one would hide a bug of the app."""
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("./etc/passwd") if "./etc/passwd" in tar.getnames() else None
        if member is None:
            raise BuildError(f"{tarball} has no /etc/passwd: mmdebstrap did not make a Debian root file system")
        for line in member.read().decode().splitlines():
            fields = line.split(":")
            if len(fields) > 2 and fields[2] == str(POD_UID):
                raise BuildError(f"the base image would have a passwd entry for uid {POD_UID} ({fields[0]}); "
                                 "python:3.11-slim has none: remove the package that adds it")


def commit_from_scratch(ref: str, additions: Sequence[tuple[Path, str]], config: Sequence[str]) -> None:
    """An image of one layer: ``additions`` (a tarball added to ``/`` is unpacked) and image ``config``."""
    container = run_step(buildah("from", "--pull=never", "scratch"), f"new container for {ref}").splitlines()[-1]
    try:
        for source, dest in additions:
            run_step(buildah("add", container, str(source), dest), f"add {source.name} to {ref}")
        run_step(buildah("config", *config, container), f"configure {ref}")
        run_step(buildah("commit", "--rm", container, ref), f"commit {ref}")
    except BuildError:
        subprocess.run(buildah("rm", container), capture_output=True)
        raise


def ensure_base_image() -> str:
    """Build (or reuse) the stand-in for python:3.11-slim in the project's buildah storage; returns its ref.

    45 to 90 s cold: mmdebstrap downloads and installs about 80 Debian packages."""
    ref = base_image_ref()
    if image_exists(ref):
        return ref
    started = time.monotonic()
    log(f"making {ref} from Debian {SUITE} packages with mmdebstrap (about a minute)")
    with tempfile.TemporaryDirectory(dir=paths.cache_dir()) as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        run_step(mmdebstrap_command(tarball), "mmdebstrap", show=re.compile("I: "))
        check_no_pod_user(tarball)
        commit_from_scratch(ref, [(tarball, "/")], BASE_CONFIG)
    log(f"made {ref} in {int(time.monotonic() - started)}s")
    return ref


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker reads it: ``*`` and ``?`` stay within one path element, ``**`` spans any."""
    out = ""
    for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
        out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
    return re.compile(out)


def dockerignore_rules(repo: Path) -> list[tuple[bool, re.Pattern[str]]]:
    """``(excludes, regex)`` per line of ``.dockerignore``; a ``!`` line re-includes, the last match wins."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    ignore = repo / ".dockerignore"
    for raw in ignore.read_text().splitlines() if ignore.is_file() else ():
        if (line := raw.strip()) and not line.startswith("#"):
            pattern = os.path.normpath(line.removeprefix("!").strip().lstrip("/")).rstrip("/")
            rules.append((not line.startswith("!"), _pattern_regex(pattern)))
    return rules


def ignored(rel: str, rules: Sequence[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the build context leaves ``rel`` out: a pattern matching the path or one of its parents counts."""
    prefixes = [rel[:i] for i in range(len(rel)) if rel[i] == "/"] + [rel]
    verdict = False
    for excludes, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            verdict = excludes
    return verdict


def context_files(repo: Path) -> list[str]:
    """The files (relative, sorted) that ``buildah bud`` sends as the build context of ``repo``."""
    rules = dockerignore_rules(repo)
    prune = all(excludes for excludes, _ in rules)  # without ``!`` lines nothing under an ignored dir comes back
    found: list[str] = []
    for top, dirs, files in os.walk(repo):
        base = Path(top).relative_to(repo)
        if prune:
            dirs[:] = [d for d in dirs if not ignored((base / d).as_posix(), rules)]
        found += [rel for rel in ((base / name).as_posix() for name in files) if not ignored(rel, rules)]
    return sorted(found)


def _file_digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    mode = "x" if os.access(path, os.X_OK) else "-"
    return mode + hashlib.sha256(path.read_bytes()).hexdigest()


def dockerfile_sources(text: str) -> list[str]:
    """The context paths a Dockerfile reads: COPY/ADD sources and ``RUN --mount`` binds not taken from a stage.

    The cache key only follows these, so files the context carries but no step reads (a test run's
    ``.hypothesis``, say) do not force a rebuild."""
    sources: list[str] = []
    for line in text.replace("\\\n", " ").splitlines():
        words = line.split()
        if len(words) > 2 and words[0].upper() in ("COPY", "ADD") and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
        for mount in re.findall(r"--mount=(\S+)", line):
            options = {key: value for key, _, value in (item.partition("=") for item in mount.split(","))}
            if options.get("type") == "bind" and "from" not in options:
                sources.append(options.get("source", options.get("src", ".")))
    return [os.path.normpath(src).strip("/") for src in sources]


def context_hash(repo: Path, *extra: str) -> str:
    """A content hash of the context files the Dockerfile reads, of the Dockerfile and .dockerignore (the recipe)
    and of ``extra``."""
    recipe = [n for n in ("Dockerfile", ".dockerignore") if (repo / n).is_file()]
    roots = dockerfile_sources((repo / "Dockerfile").read_text()) if "Dockerfile" in recipe else ["."]
    used = [n for n in context_files(repo) if any(r == "." or n == r or n.startswith(r + "/") for r in roots)]
    files = sorted({*used, *recipe})
    return short_hash("context-v2", *extra, *(f"{name}={_file_digest(repo / name)}" for name in files))


def _pip_config_cert() -> str | None:
    for config in (Path("/etc/xdg/pip/pip.conf"), Path("/etc/pip.conf"), Path.home() / ".config/pip/pip.conf",
                   Path.home() / ".pip/pip.conf"):
        parser = configparser.ConfigParser()
        if config.is_file() and parser.read(config) and parser.has_option("global", "cert"):
            return parser.get("global", "cert")
    return None


def host_ca_bundle() -> Path:
    """The CA bundle pip trusts on this machine (it may hold a proxy's CA that the image must not keep)."""
    candidates = [os.environ.get("PIP_CERT"), _pip_config_cert(), os.environ.get("REQUESTS_CA_BUNDLE"),
                  os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise BuildError("no CA bundle for pip found (PIP_CERT, pip.conf's cert, /etc/ssl/certs/ca-certificates.crt): "
                     "install ca-certificates or set PIP_CERT")


def save(ref: str, name: str) -> ImageArchive:
    """Push ``ref`` from buildah's storage into ``<cache>/images/NAME.oci.tar``, whole or not at all."""
    archive = images_dir() / f"{name}.oci.tar"
    (partial := archive.with_name(f"{archive.name}.partial-{os.getpid()}")).unlink(missing_ok=True)
    run_step(buildah("push", "--quiet", ref, f"oci-archive:{partial}:{ref}"), f"save {ref}")
    partial.replace(archive)
    return ImageArchive(ref, archive)


def _prune(prefix: str, keep: int = 3) -> None:
    """Archives of older trees: the newest ``keep`` stay (another clone may share the cache), the rest go."""
    old = sorted(images_dir().glob(f"{prefix}-*.oci.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in old[keep:]:
        path.unlink(missing_ok=True)


def ensure_project_image(repo: Path) -> ImageArchive:
    """Build (or reuse) the repository's own Dockerfile, unchanged, on :func:`ensure_base_image`.

    RUN steps use the host network to reach PyPI and get the host's CA bundle bind-mounted read-only over the
    image's own for the duration of each step only, so the image keeps Debian's bundle and nothing of ours."""
    base = ensure_base_image()
    tag = context_hash(repo, base)
    ref = f"{PROJECT_NAME}:{tag}"
    archive = images_dir() / f"agl-parallel-{tag}.oci.tar"
    if archive.is_file():
        return ImageArchive(ref, archive)
    started = time.monotonic()
    log(f"building {ref} from {repo / 'Dockerfile'} with buildah (about a minute: pip installs the lock from PyPI)")
    run_step(buildah("bud", "--pull=never", "--network=host", "--layers=false", "--build-arg", f"PYTHON_IMAGE={base}",
                 "--volume", f"{host_ca_bundle()}:{CA_TARGET}:ro", "--file", str(repo / "Dockerfile"),
                 "--tag", ref, str(repo)), "buildah bud", cwd=repo, show=_BUD_PROGRESS)
    saved = save(ref, f"agl-parallel-{tag}")
    subprocess.run(buildah("rmi", ref), capture_output=True)  # the archive is the copy that counts
    _prune("agl-parallel")
    log(f"built {ref} in {int(time.monotonic() - started)}s -> {saved.path}")
    return saved


def _ctr(address: str, *args: str) -> list[str]:
    if shutil.which("ctr") is None:
        raise BuildError("ctr is not installed: it comes with containerd (apt-get install containerd)")
    return ["ctr", "--address", address, "--namespace", "k8s.io", *args]


def import_images(archives: Sequence[ImageArchive], containerd_address: str, *,
                  snapshotter: str = "overlayfs") -> None:
    """Import OCI archives into containerd's ``k8s.io`` namespace (the one kubelet's CRI uses), unpacked for
    ``snapshotter``, and check each ended up under exactly its ``ref`` (ctr takes the archive's ref.name)."""
    for archive in archives:
        started = time.monotonic()
        run_step(_ctr(containerd_address, "images", "import", "--snapshotter", snapshotter, str(archive.path)),
             f"import {archive.ref}")
        log(f"imported {archive.ref} into containerd at {containerd_address} in {time.monotonic() - started:.1f}s")
    have = set(run_step(_ctr(containerd_address, "images", "list", "--quiet"), "ctr images list").split())
    missing = [a.ref for a in archives if a.ref not in have]
    if missing:
        raise BuildError(f"containerd at {containerd_address} has no image named {', '.join(missing)} after the "
                         f"import; it lists {', '.join(sorted(have)) or 'nothing'}")


def _open(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    member = tar.extractfile(name) if name in tar.getnames() else None
    if member is None:
        raise BuildError(f"{tar.name!r} has no {name}: not an OCI archive (as buildah push oci-archive:... writes)")
    return member


def image_size(archive: ImageArchive) -> ImageSize:
    """Sizes of an OCI archive's image, read from its manifest; the unpacked size decompresses every layer."""
    with tarfile.open(archive.path) as tar:
        def blob(digest: str) -> IO[bytes]:
            return _open(tar, "blobs/" + digest.replace(":", "/"))

        top: Any = json.load(_open(tar, "index.json"))["manifests"][0]
        manifest: Any = json.load(blob(top["digest"]))
        layers = manifest["layers"]
        compressed = int(top["size"]) + int(manifest["config"]["size"]) + sum(int(la["size"]) for la in layers)
        unpacked = 0
        for layer in layers:
            stream: IO[bytes] | gzip.GzipFile = blob(layer["digest"])
            if "gzip" in layer["mediaType"]:
                stream = gzip.GzipFile(fileobj=stream)
            while chunk := stream.read(1 << 20):
                unpacked += len(chunk)
    return ImageSize(compressed, unpacked, len(layers))
