"""The module tarballs pushed as Flux OCI artifacts: the same content always gives the same digest."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from localcluster import bucketserver, ociregistry
from localcluster.cluster import ClusterError


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


MODULE = {"main.tf": 'variable "x" {}\n', "modules/inner/main.tf": "# inner\n", "README.md": "doc\n"}


def test_same_content_gives_the_same_bytes_whatever_the_times_and_order(tmp_path: Path) -> None:
    first = _tree(tmp_path / "a", MODULE)
    second = _tree(tmp_path / "b", dict(reversed(MODULE.items())))
    os.utime(second / "main.tf", (1_000_000, 1_000_000))
    os.utime(second / "modules", (2_000_000, 2_000_000))
    (first / "README.md").chmod(0o600)
    assert ociregistry.tarball(first) == ociregistry.tarball(second)
    assert ociregistry.digest(ociregistry.tarball(first)) == ociregistry.digest(ociregistry.tarball(second))


def test_a_changed_file_or_exec_bit_changes_the_digest(tmp_path: Path) -> None:
    base = ociregistry.digest(ociregistry.tarball(_tree(tmp_path / "a", MODULE)))
    edited = _tree(tmp_path / "b", {**MODULE, "main.tf": 'variable "y" {}\n'})
    assert ociregistry.digest(ociregistry.tarball(edited)) != base
    executable = _tree(tmp_path / "c", MODULE)
    (executable / "README.md").chmod(0o755)
    assert ociregistry.digest(ociregistry.tarball(executable)) != base


def test_the_tarball_holds_relative_sorted_entries_owned_by_nobody_at_time_zero(tmp_path: Path) -> None:
    root = _tree(tmp_path / "m", {**MODULE, ".terraform/providers/x": "cache", "terraform.tfstate": "{}"})
    data = ociregistry.tarball(root)
    # gzip header: no flags (so no file name), MTIME zero.
    assert data[:3] == b"\x1f\x8b\x08" and data[3] == 0 and data[4:8] == bytes(4)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert names == ["README.md", "main.tf", "modules", "modules/inner", "modules/inner/main.tf"]
        assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 0)}
        extracted = tar.extractfile("main.tf")
        assert extracted is not None and extracted.read() == b'variable "x" {}\n'


def test_the_sample_module_tarball_is_stable_and_has_main_tf() -> None:
    directory = ociregistry.SAMPLE_ARTIFACTS["modules/s3-bucket"]
    data = ociregistry.tarball(directory)
    assert data == ociregistry.tarball(directory)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert "main.tf" in tar.getnames()


def test_not_a_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="not a directory"):
        ociregistry.tarball(tmp_path / "missing")


def test_the_sample_sources_carry_the_placeholders_their_modules_replace() -> None:
    assert ociregistry.PLACEHOLDER_URL + "modules/s3-bucket" in ociregistry.SAMPLE_SOURCES_FILE.read_text()
    assert f"endpoint: {bucketserver.PLACEHOLDER_ENDPOINT}" in bucketserver.SAMPLE_SOURCES_FILE.read_text()
    assert f"bucketName: {bucketserver.SAMPLE_BUCKET}" in bucketserver.SAMPLE_SOURCES_FILE.read_text()
