"""The local control plane's build step: pinned module versions and clear failures."""

from __future__ import annotations

import pytest
from localcluster import build, versions


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
