"""The chart carries its own copy of the definition CRDs (deploy/chart/files/crds), not a link to crds/.

A packaged chart cannot follow a symlink out of its directory, so the chart holds the files; crds/ at the top of
the repository stays the source. This test catches the copy drifting from it (re-sync:
``cp crds/*.yaml deploy/chart/files/crds/``).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCE = ROOT / "crds"
COPY = ROOT / "deploy" / "chart" / "files" / "crds"
RESYNC = "cp crds/*.yaml deploy/chart/files/crds/"


def test_chart_crds_are_real_files_not_links() -> None:
    assert COPY.is_dir() and not COPY.is_symlink(), f"{COPY} must be a directory of files; re-sync: {RESYNC}"
    assert all(not path.is_symlink() for path in COPY.iterdir())


def test_chart_crds_equal_the_repository_crds_byte_for_byte() -> None:
    source = {path.name: path.read_bytes() for path in SOURCE.glob("*.yaml")}
    copy = {path.name: path.read_bytes() for path in COPY.glob("*.yaml")}
    assert source, "crds/ holds no CRDs"
    assert sorted(copy) == sorted(source), f"the chart's CRD files differ from crds/; re-sync: {RESYNC}"
    for name, text in source.items():
        assert copy[name] == text, f"deploy/chart/files/crds/{name} differs from crds/{name}; re-sync: {RESYNC}"
