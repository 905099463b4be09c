"""Build kube-apiserver, kubectl, etcd (and helm) with the installed Go from the module proxy.

A cold build takes a long while on two cores, so it shows progress and resumes: the Go module and
build caches keep everything already downloaded and compiled, and a binary only appears in the
cache under its final name once it linked completely.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import paths, versions

_REPLACE_LINE = re.compile(r"^\s*(?:replace\s+)?(\S+)(?:\s+\S+)?\s+=>\s+(\S+)(?:\s+(\S+))?\s*(?://.*)?$")
_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[A-Za-z0-9._-]+)\s+=>\s+\./staging/src/\1\s*$")


class BuildError(RuntimeError):
    """A step of the build failed; the message names the step and the tool."""


def log(message: str) -> None:
    print(f"[localcluster] {message}", file=sys.stderr, flush=True)


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "Go is not installed (or not on PATH): the local control plane builds kube-apiserver, kubectl and "
            "etcd from the Go module proxy and needs Go 1.24 or newer. Install Go and run again."
        )
    return go


def _run(cmd: Sequence[str], cwd: Path, step: str, *, progress: bool = False, static: bool = False) -> str:
    """Run a Go command; with ``progress`` print a line every few compiled packages; ``static`` links without cgo."""
    env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    if static:
        env["CGO_ENABLED"] = "0"
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines: list[str] = []
    started = time.monotonic()
    last = started
    for line in proc.stdout:
        lines.append(line.rstrip())
        now = time.monotonic()
        if progress and now - last >= 15:
            last = now
            log(f"{step}: {len(lines)} packages compiled, {int(now - started)}s elapsed")
    code = proc.wait()
    if code != 0:
        tail = "\n".join(lines[-40:])
        raise BuildError(f"{step} failed (exit {code}) running {' '.join(cmd)} in {cwd}:\n{tail}")
    return "\n".join(lines)


@dataclass(frozen=True)
class GoTarget:
    """One binary: the module it comes from and the package path of its main."""

    name: str
    module: str
    version: str
    package: str
    ldflags: tuple[str, ...] = ()
    #: Extra source files for a wrapper main package (etcd ships its main outside the server module).
    main_source: str | None = None
    #: ``module => replacement``: a bare version keeps the module path, ``path version`` swaps it.
    replaces: dict[str, str] = field(default_factory=dict)
    #: Modules raised above what the target's go.mod asks for (``go get module@version`` before the build).
    raises: dict[str, str] = field(default_factory=dict)
    #: Linked without cgo (``CGO_ENABLED=0``).
    static: bool = False

    @property
    def binary(self) -> Path:
        return paths.bin_dir() / f"{self.name}-{self.version}"


def staging_replaces(kubernetes_version: str, go_mod_text: str) -> dict[str, str]:
    """Map each ``./staging`` replace of k8s.io/kubernetes' go.mod onto the published v0.X.Y module."""
    staging_version = "v0." + kubernetes_version.removeprefix("v").split(".", 1)[1]
    out: dict[str, str] = {}
    for line in go_mod_text.splitlines():
        match = _STAGING_REPLACE.match(line)
        if match:
            out[match.group(1)] = staging_version
    if not out:
        raise BuildError("the go.mod served for k8s.io/kubernetes has no ./staging replace lines; cannot pin modules")
    return out


def carried_replaces(module: str, version: str, go_mod_text: str) -> dict[str, str]:
    """The ``replace`` directives of a module's go.mod, rewritten for a build that requires the module.

    Go ignores a dependency's replaces, so they are carried over into our wrapper module. A local
    path (``X => ./api``) names a nested module of the same repository: it becomes that nested module
    as published at the same tag (``X => X version``), so the build uses exactly the released API.
    """
    out: dict[str, str] = {}
    for line in go_mod_text.splitlines():
        match = _REPLACE_LINE.match(line)
        if match is None or line.strip().startswith("//"):
            continue
        old, new, new_version = match.groups()
        if new.startswith("."):
            nested = module + "/" + new.removeprefix("./").strip("/")
            if nested != old:
                raise BuildError(f"{module}@{version} replaces {old} with {new}, not a nested module of its own")
            out[old] = version
        elif new_version is not None:
            out[old] = f"{new} {new_version}"
    return out


def _module_go_mod(module: str, version: str, workdir: Path) -> str:
    out = _run([go_binary(), "mod", "download", "-json", f"{module}@{version}"], workdir, f"download {module}")
    info = json.loads(out)
    if info.get("Error"):
        raise BuildError(f"go mod download {module}@{version}: {info['Error']}")
    return Path(info["GoMod"]).read_text()


def _replacement(module: str, to: str) -> str:
    """``to`` as the right-hand side of a replace: a path or ``module version`` as is, a bare version
    for ``module`` itself."""
    return to if " " in to or to.startswith("/") else f"{module} {to}"


def _write_module(target: GoTarget, workdir: Path) -> None:
    lines = [f"module agl.local/build/{target.name}", "", "go 1.24", "", f"require {target.module} {target.version}"]
    if target.replaces:
        lines += ["", "replace ("]
        lines += [f"\t{mod} => {_replacement(mod, to)}" for mod, to in sorted(target.replaces.items())]
        lines.append(")")
    (workdir / "go.mod").write_text("\n".join(lines) + "\n")
    if target.main_source is not None:
        (workdir / "main.go").write_text(target.main_source)


def build(target: GoTarget) -> Path:
    """Build one target unless the cache already has it; returns the binary's path."""
    if target.binary.exists():
        return target.binary
    workdir = paths.cache_dir() / "build" / f"{target.name}-{target.version}"
    workdir.mkdir(parents=True, exist_ok=True)
    go = go_binary()
    started = time.monotonic()
    log(f"building {target.name} {target.version} from the Go module proxy (cold builds take several minutes)")
    _write_module(target, workdir)
    package = "." if target.main_source is not None else target.package
    wanted = f"{target.package}@{target.version}" if package != "." else f"{target.module}@{target.version}"
    # Raised modules go into the same ``go get``: resolving the target alone would already try to
    # download the versions its go.mod names, which is what a raise is there to avoid.
    raised = [f"{module}@{version}" for module, version in sorted(target.raises.items())]
    _run([go, "get", wanted, *raised], workdir, f"resolve {target.name}")
    # Named for this process: two builds at once (CI and a developer's shell on one cache) each write their own
    # file and the last rename wins, both with a whole binary.
    tmp = target.binary.with_name(f"{target.binary.name}.partial-{os.getpid()}")
    ldflags = " ".join(("-s", "-w", *target.ldflags))
    _run([go, "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), package],
         workdir, f"compile {target.name}", progress=True, static=target.static)
    tmp.replace(target.binary)
    log(f"built {target.name} in {int(time.monotonic() - started)}s -> {target.binary}")
    return target.binary


def kubernetes_targets() -> list[GoTarget]:
    version = versions.KUBERNETES
    workdir = paths.cache_dir() / "build" / "kubernetes-gomod"
    workdir.mkdir(parents=True, exist_ok=True)
    replaces_file = workdir / f"replaces-{version}.json"
    if replaces_file.exists():
        replaces = json.loads(replaces_file.read_text())
    else:
        (workdir / "go.mod").write_text("module agl.local/build/probe\n\ngo 1.24\n")
        replaces = staging_replaces(version, _module_go_mod("k8s.io/kubernetes", version, workdir))
        replaces_file.write_text(json.dumps(replaces, indent=1))
    major, minor = version.removeprefix("v").split(".")[:2]
    stamp = tuple(
        f"-X {pkg}.{var}={val}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for var, val in (("gitVersion", version), ("gitMajor", major), ("gitMinor", minor),
                         ("gitTreeState", "clean"), ("buildDate", "1970-01-01T00:00:00Z"))
    )
    return [
        GoTarget(name, "k8s.io/kubernetes", version, f"k8s.io/kubernetes/cmd/{name}", ldflags=stamp, replaces=replaces,
                 static=name in NODE_COMPONENTS)
        for name in ("kube-apiserver", "kubectl", *NODE_COMPONENTS)
    ]


#: What a real node adds to the control plane, built from the same wrapper module as kube-apiserver (same staging
#: replaces, same version stamp, sharing its build cache: about 8 more minutes cold on two cores, kubelet the most).
NODE_COMPONENTS = ("kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy")


# Our own three-line entry point: etcd's server module exposes etcdmain.Main but no main package.
_ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def etcd_target() -> GoTarget:
    return GoTarget("etcd", "go.etcd.io/etcd/server/v3", versions.ETCD, "go.etcd.io/etcd/server/v3/etcdmain",
                    main_source=_ETCD_MAIN)


def helm_target() -> GoTarget:
    """helm, stamped like its release builds: its own version, and the control plane's Kubernetes
    version as the default ``.Capabilities.KubeVersion`` of ``helm template`` (so rendering offline
    targets the same API the chart checks apply to)."""
    major, minor = versions.KUBERNETES.removeprefix("v").split(".")[:2]
    stamp = (
        f"-X helm.sh/helm/v3/internal/version.version={versions.HELM}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
        *(f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={value}"
          for pkg in ("chartutil", "lint/rules") for part, value in (("Major", major), ("Minor", minor))),
    )
    return GoTarget("helm", "helm.sh/helm/v3", versions.HELM, "helm.sh/helm/v3/cmd/helm", ldflags=stamp)


def _cached_replaces(module: str, version: str, derive: Callable[[str], dict[str, str]]) -> dict[str, str]:
    """Replaces derived from the go.mod the proxy serves for ``module@version``, kept in the cache."""
    name = module.rsplit("/", 1)[-1]
    workdir = paths.cache_dir() / "build" / f"{name}-gomod"
    workdir.mkdir(parents=True, exist_ok=True)
    replaces_file = workdir / f"replaces-{version}.json"
    if replaces_file.exists():
        cached: dict[str, str] = json.loads(replaces_file.read_text())
        return cached
    (workdir / "go.mod").write_text("module agl.local/build/probe\n\ngo 1.24\n")
    replaces = derive(_module_go_mod(module, version, workdir))
    replaces_file.write_text(json.dumps(replaces, indent=1))
    return replaces


def flux_controller_target(name: str, version: str, raises: dict[str, str] | None = None) -> GoTarget:
    """A Flux controller: its main package is the module root; its go.mod's replaces are carried over."""
    module = f"github.com/fluxcd/{name}"
    replaces = _cached_replaces(module, version, lambda text: carried_replaces(module, version, text))
    return GoTarget(name, module, version, module, replaces=replaces, raises=dict(raises or {}))


def flux_targets() -> list[GoTarget]:
    return [
        flux_controller_target("helm-controller", versions.HELM_CONTROLLER),
        flux_controller_target("source-controller", versions.SOURCE_CONTROLLER, versions.SOURCE_CONTROLLER_RAISES),
        flux_controller_target("kustomize-controller", versions.KUSTOMIZE_CONTROLLER),
    ]


def tofu_target() -> GoTarget:
    module = "github.com/opentofu/opentofu"
    replaces = _cached_replaces(module, versions.OPENTOFU,
                                lambda text: carried_replaces(module, versions.OPENTOFU, text))
    # As OpenTofu's release builds do: without it the binary calls itself "<version>-dev".
    stamp = (f"-X {module}/version.dev=no",)
    return GoTarget("tofu", module, versions.OPENTOFU, f"{module}/cmd/tofu", ldflags=stamp, replaces=replaces)


#: Where the nested modules of tofu-controller (``/api``, ``/tfctl``) come from when neither the
#: override nor the module proxy provides them: the project owner's copy beside the repository,
#: exactly as tagged upstream and checked against its ``SHA256SUMS`` before every build.
TOFU_CONTROLLER_MODULES_DEFAULT = Path(__file__).resolve().parents[3].parent / "shared" / "third_party" / (
    f"tofu-controller-{versions.TOFU_CONTROLLER}")
TOFU_CONTROLLER_NESTED = ("api", "tfctl")


def verify_checksums(directory: Path) -> None:
    """Check every file ``directory/SHA256SUMS`` lists; a missing or changed file stops the build."""
    sums = directory / "SHA256SUMS"
    if not sums.is_file():
        raise BuildError(f"{sums} is missing: cannot check the tofu-controller modules in {directory}")
    for line in sums.read_text().splitlines():
        if not line.strip():
            continue
        digest, name = line.split(None, 1)
        path = directory / name.strip().lstrip("*")
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise BuildError(f"{path} does not match {sums}: refusing to build tofu-controller from it")


def tofu_controller_modules() -> tuple[dict[str, str], str]:
    """The replaces for tofu-controller's nested modules, and a sentence saying where they come from.

    In order: the directory ``AGL_TOFU_CONTROLLER_MODULES`` names; the owner's checked copy beside the
    repository; the module proxy, for a machine whose proxy serves the pseudo-versions that
    tofu-controller's go.mod requires (this one answers 404 for them).
    """
    module = "github.com/flux-iac/tofu-controller"
    override = os.environ.get("AGL_TOFU_CONTROLLER_MODULES")
    candidates = [(Path(override), "AGL_TOFU_CONTROLLER_MODULES")] if override else []
    candidates.append((TOFU_CONTROLLER_MODULES_DEFAULT, "the checked copy beside the repository"))
    for directory, origin in candidates:
        if all((directory / nested / "go.mod").is_file() for nested in TOFU_CONTROLLER_NESTED):
            if (directory / "SHA256SUMS").exists() or origin != "AGL_TOFU_CONTROLLER_MODULES":
                verify_checksums(directory)
            replaces = {f"{module}/{nested}": str((directory / nested).resolve()) for nested in TOFU_CONTROLLER_NESTED}
            return replaces, f"nested modules from {origin} ({directory})"
        if origin == "AGL_TOFU_CONTROLLER_MODULES":
            raise BuildError(f"AGL_TOFU_CONTROLLER_MODULES={directory} holds no api/go.mod and tfctl/go.mod")
    return {}, "nested modules from the Go module proxy"


def tofu_controller_target() -> tuple[GoTarget, str]:
    """tofu-controller's manager, with its go.mod's other replaces carried over."""
    module = "github.com/flux-iac/tofu-controller"
    version = versions.TOFU_CONTROLLER
    nested, origin = tofu_controller_modules()

    def derive(text: str) -> dict[str, str]:
        # The nested ``./api`` / ``./tfctl`` replaces are supplied by ``nested``; keep the others.
        kept = [line for line in text.splitlines() if "=> ./" not in line]
        return carried_replaces(module, version, "\n".join(kept))

    replaces = {**_cached_replaces(module, version, derive), **nested}
    stamp = (f"-X main.BuildVersion={version}",)
    return GoTarget("tofu-controller", module, version, f"{module}/cmd/manager", ldflags=stamp,
                    replaces=replaces), origin


def ensure_tofu_controller() -> Path:
    """Build (or reuse) tofu-controller (about 10 minutes cold on two cores) and say where its modules came from."""
    target, origin = tofu_controller_target()
    if not target.binary.exists():
        log(f"tofu-controller {target.version}: {origin}")
    return build(target)


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    kubectl: Path
    etcd: Path


def ensure_binaries() -> Binaries:
    """Build (or reuse) everything the control plane runs."""
    kube = {t.name: build(t) for t in kubernetes_targets() if t.name not in NODE_COMPONENTS}
    etcd = build(etcd_target())
    link_dir = paths.bin_dir() / "current"
    link_dir.mkdir(exist_ok=True)
    for name, path in (*kube.items(), ("etcd", etcd)):
        link = link_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path)
    return Binaries(kube["kube-apiserver"], kube["kubectl"], etcd)


def ensure_node_binaries() -> dict[str, Path]:
    """Build (or reuse) kubelet, kube-controller-manager, kube-scheduler and kube-proxy (:data:`NODE_COMPONENTS`).

    Linked statically (``CGO_ENABLED=0``), as Kubernetes' own release builds of these are: no libc of the build
    machine is assumed where they run."""
    return {t.name: build(t) for t in kubernetes_targets() if t.name in NODE_COMPONENTS}


def link_current(name: str, binary: Path) -> None:
    link = paths.bin_dir() / "current" / name
    link.parent.mkdir(exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(binary)


def ensure_helm() -> Path:
    """Build (or reuse) the pinned helm and put it next to kubectl in :func:`kubectl_dir`."""
    helm = build(helm_target())
    link_current("helm", helm)
    return helm


def kubectl_dir() -> Path:
    """The directory to put on PATH: it holds ``kubectl`` (and ``helm`` and ``tofu`` once built)."""
    return paths.bin_dir() / "current"


@dataclass(frozen=True)
class FluxBinaries:
    helm_controller: Path
    source_controller: Path
    tofu_controller: Path
    kustomize_controller: Path


def ensure_flux() -> FluxBinaries:
    """Build (or reuse) helm-controller, source-controller, kustomize-controller, tofu-controller and the servers
    of the module sources (several minutes each when cold)."""
    built = {t.name: build(t) for t in flux_targets()}
    controllers = FluxBinaries(built["helm-controller"], built["source-controller"], ensure_tofu_controller(),
                               built["kustomize-controller"])
    ensure_registry()
    ensure_s3_server()
    return controllers


def ensure_tofu() -> Path:
    """Build (or reuse) OpenTofu's ``tofu``: ``<cache>/bin/tofu-<version>``, also linked into :func:`kubectl_dir`."""
    tofu = build(tofu_target())
    link_current("tofu", tofu)
    return tofu


def registry_target() -> GoTarget:
    """The CNCF distribution registry (``registry serve CONFIG``), stamped with its release version."""
    module = "github.com/distribution/distribution/v3"
    stamp = (f"-X {module}/version.version={versions.DISTRIBUTION}",)
    return GoTarget("registry", module, versions.DISTRIBUTION, f"{module}/cmd/registry", ldflags=stamp)


def ensure_registry() -> Path:
    """Build (or reuse) the OCI registry: ``<cache>/bin/registry-<version>`` (a few minutes when cold)."""
    return build(registry_target())


def s3_server_target() -> GoTarget:
    """gofakes3, a small S3-compatible server (path-style buckets, no request authentication)."""
    module = "github.com/johannesboyne/gofakes3"
    return GoTarget("gofakes3", module, versions.GOFAKES3, f"{module}/cmd/gofakes3")


def ensure_s3_server() -> Path:
    """Build (or reuse) gofakes3: ``<cache>/bin/gofakes3-<version>`` (a minute or two when cold)."""
    return build(s3_server_target())
