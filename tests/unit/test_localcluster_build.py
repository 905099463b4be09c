"""The local control plane's build step: pinned module versions and clear failures."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from localcluster import build, kstatus, versions


def test_missing_go_names_the_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(build.BuildError, match="Go is not installed"):
        build.go_binary()


def test_staging_replaces_are_derived_from_the_served_go_mod() -> None:
    go_mod = "\n".join([
        "module k8s.io/kubernetes",
        "replace (",
        "\tk8s.io/api => ./staging/src/k8s.io/api",
        "\tk8s.io/client-go => ./staging/src/k8s.io/client-go",
        "\tgithub.com/x/y => github.com/x/y v1.0.0",
        ")",
    ])
    assert build.staging_replaces("v1.35.4", go_mod) == {"k8s.io/api": "v0.35.4", "k8s.io/client-go": "v0.35.4"}


def test_go_mod_without_staging_lines_is_an_error() -> None:
    with pytest.raises(build.BuildError, match=r"no \./staging replace lines"):
        build.staging_replaces("v1.35.4", "module k8s.io/kubernetes\n")


def test_pins() -> None:
    major, minor = (int(p) for p in versions.KUBERNETES.removeprefix("v").split(".")[:2])
    assert (major, minor) >= (1, 35)
    assert all(len(crd.sha256) == 64 for crd in versions.UPSTREAM_CRDS)


def test_a_controllers_replaces_are_carried_into_the_wrapper_module() -> None:
    """Go ignores a dependency's replaces: the local ``./api`` one becomes the published nested module at
    the same tag, the others are kept as written, comments and requires are not replaces."""
    go_mod = "\n".join([
        "module github.com/fluxcd/helm-controller",
        "replace github.com/fluxcd/helm-controller/api => ./api",
        "// replace github.com/commented/out => github.com/x v1.0.0",
        "replace github.com/opencontainers/go-digest => github.com/opencontainers/go-digest v1.0.1-0.2023",
        "replace (",
        "\tsigs.k8s.io/kustomize/api => sigs.k8s.io/kustomize/api v0.21.1",
        ")",
        "require helm.sh/helm/v4 v4.2.2",
    ])
    assert build.carried_replaces("github.com/fluxcd/helm-controller", "v1.6.2", go_mod) == {
        "github.com/fluxcd/helm-controller/api": "v1.6.2",
        "github.com/opencontainers/go-digest": "github.com/opencontainers/go-digest v1.0.1-0.2023",
        "sigs.k8s.io/kustomize/api": "sigs.k8s.io/kustomize/api v0.21.1",
    }


def test_a_local_replace_outside_the_module_is_refused() -> None:
    go_mod = "module github.com/x/y\nreplace github.com/other/api => ./api\n"
    with pytest.raises(build.BuildError, match="not a nested module"):
        build.carried_replaces("github.com/x/y", "v1.0.0", go_mod)


def test_flux_and_tofu_pins_match_the_crds_they_install() -> None:
    assert versions.HELMRELEASE_CRD.version == versions.HELM_CONTROLLER
    assert {crd.version for crd in versions.SOURCE_CRDS} == {versions.SOURCE_CONTROLLER}
    assert versions.KUSTOMIZATION_CRD.version == versions.KUSTOMIZE_CONTROLLER
    assert versions.OPENTOFU.startswith("v1.10.")


def _nested_modules(root: Path) -> Path:
    """A directory shaped like the owner's copy of tofu-controller's nested modules, with its SHA256SUMS."""
    for nested in build.TOFU_CONTROLLER_NESTED:
        (root / nested).mkdir(parents=True)
        (root / nested / "go.mod").write_text(f"module github.com/flux-iac/tofu-controller/{nested}\n")
    lines = [f"{hashlib.sha256((root / n / 'go.mod').read_bytes()).hexdigest()}  {n}/go.mod"
             for n in build.TOFU_CONTROLLER_NESTED]
    (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return root


def test_tofu_controller_modules_come_from_the_override_checked(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    modules = _nested_modules(tmp_path / "modules")
    monkeypatch.setenv("AGL_TOFU_CONTROLLER_MODULES", str(modules))
    replaces, origin = build.tofu_controller_modules()
    assert replaces == {f"github.com/flux-iac/tofu-controller/{n}": str((modules / n).resolve())
                        for n in build.TOFU_CONTROLLER_NESTED}
    assert "AGL_TOFU_CONTROLLER_MODULES" in origin and str(modules) in origin
    (modules / "api" / "go.mod").write_text("module changed\n")
    with pytest.raises(build.BuildError, match="does not match"):
        build.tofu_controller_modules()


def test_an_override_without_the_modules_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_TOFU_CONTROLLER_MODULES", str(tmp_path))
    with pytest.raises(build.BuildError, match=r"holds no api/go\.mod"):
        build.tofu_controller_modules()


def test_without_a_copy_the_proxy_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_TOFU_CONTROLLER_MODULES", raising=False)
    monkeypatch.setattr(build, "TOFU_CONTROLLER_MODULES_DEFAULT", tmp_path / "absent")
    assert build.tofu_controller_modules() == ({}, "nested modules from the Go module proxy")


def test_the_wrapper_module_replaces_by_path() -> None:
    assert build._replacement("github.com/flux-iac/tofu-controller/api", "/abs/api") == "/abs/api"
    assert build._replacement("x.io/m", "v1.2.3") == "x.io/m v1.2.3"


def test_the_kstatus_tool_is_built_from_its_own_main_against_the_pinned_kstatus(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    target = kstatus.kstatus_target()
    assert (target.module, target.version) == (versions.KSTATUS_MODULE, versions.KSTATUS)
    assert target.main_source == kstatus.KSTATUS_MAIN.read_text()
    assert '"github.com/fluxcd/cli-utils/pkg/kstatus/status"' in target.main_source
    changed = tmp_path / "kstatus_verdict.go"
    changed.write_text(target.main_source + "\n// changed\n")
    monkeypatch.setattr(kstatus, "KSTATUS_MAIN", changed)
    assert kstatus.kstatus_target().binary != target.binary  # a changed main is never a stale cached binary
