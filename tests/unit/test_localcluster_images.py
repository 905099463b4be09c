"""The local node's images: cache keys that follow the build context and recipes, and the archives' sizes."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from localcluster import images, pauseimage
from localcluster.build import BuildError

REPO = Path(__file__).resolve().parents[2]

DOCKERIGNORE = """# comment
.git
.nox
**/__pycache__
**/*.pyc
*.egg-info
tests
deploy
Dockerfile
.dockerignore
"""


def _tree(root: Path) -> Path:
    files = {
        ".dockerignore": DOCKERIGNORE,
        "Dockerfile": "FROM x\nCOPY pyproject.toml ./\nCOPY shared/ helm_agl/ ./\nCOPY tofu_agl/ tofu_agl/\n"
                      "RUN --mount=type=bind,source=requirements.lock,target=/r.lock true\n",
        "pyproject.toml": "[project]\n",
        "requirements.lock": "a==1\n",
        "helm_agl/__init__.py": "",
        "helm_agl/__pycache__/__init__.cpython-311.pyc": "junk",
        "helm_agl/sub/mod.pyc": "junk",
        "shared/x.py": "X = 1\n",
        "tests/test_x.py": "",
        "deploy/local/localcluster/images.py": "",
        "pkg.egg-info/PKG-INFO": "",
        ".git/HEAD": "ref\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_context_holds_only_what_dockerignore_lets_in(tmp_path: Path) -> None:
    assert images.context_files(_tree(tmp_path)) == ["helm_agl/__init__.py", "pyproject.toml", "requirements.lock",
                                                      "shared/x.py"]


def test_context_hash_follows_context_and_recipe(tmp_path: Path) -> None:
    repo = _tree(tmp_path)
    first = images.context_hash(repo, "base")
    assert images.context_hash(repo, "base") == first
    for outside in ("tests/test_x.py", "deploy/local/localcluster/images.py", "helm_agl/__pycache__/new.pyc"):
        (repo / outside).write_text("changed")
    assert images.context_hash(repo, "base") == first
    assert images.context_hash(repo, "other base") != first
    (repo / "shared/x.py").write_text("X = 2\n")
    second = images.context_hash(repo, "base")
    assert second != first
    (repo / "Dockerfile").write_text((repo / "Dockerfile").read_text() + "USER 1\n")
    assert images.context_hash(repo, "base") != second


def test_files_no_step_reads_leave_the_hash_alone(tmp_path: Path) -> None:
    repo = _tree(tmp_path)
    before = images.context_hash(repo)
    (repo / ".hypothesis").mkdir()
    (repo / ".hypothesis/examples").write_text("churn")
    assert images.context_hash(repo) == before


def test_dockerfile_sources_are_what_copy_and_bind_mounts_read() -> None:
    assert images.dockerfile_sources((REPO / "Dockerfile").read_text()) == [
        "pyproject.toml", "shared", "helm_agl", "tofu_agl", "requirements.lock"]
    text = ("COPY --from=build /w /w\n"
            "RUN --mount=type=bind,from=build,source=/w,target=/w \\\n  --mount=type=cache,target=/c x")
    assert images.dockerfile_sources(text) == []


def test_a_new_file_in_a_package_changes_the_hash(tmp_path: Path) -> None:
    repo = _tree(tmp_path)
    before = images.context_hash(repo)
    (repo / "tofu_agl").mkdir()
    (repo / "tofu_agl/__init__.py").write_text("")
    assert images.context_hash(repo) != before


def test_dockerignore_patterns_as_docker_reads_them() -> None:
    rules = images.dockerignore_rules(REPO)
    assert images.ignored("helm_agl/__pycache__/x.pyc", rules)
    assert images.ignored("deploy/local/localcluster/images.py", rules)
    assert not images.ignored("helm_agl/__main__.py", rules)
    # ``*`` stays within one path element, as in Docker; a ``!`` line re-includes and the last match wins.
    neg = [(True, images._pattern_regex("*.md")), (False, images._pattern_regex("README.md"))]
    assert images.ignored("NOTES.md", neg) and not images.ignored("README.md", neg)
    assert not images.ignored("docs/NOTES.md", neg)


def test_repository_context_has_the_packages_and_no_tests() -> None:
    names = images.context_files(REPO)
    assert {"pyproject.toml", "requirements.lock", "helm_agl/__main__.py"} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "deploy/", ".git/")) or "__pycache__" in n]


def test_recipe_hash_names_the_base_image() -> None:
    assert images.recipe_hash() == images.recipe_hash()
    assert images.base_image_ref() == f"{images.BASE_NAME}:3.11-bookworm-{images.recipe_hash()}"
    command = images.mmdebstrap_command(Path("/out.tar"))
    assert "--include=python3,python3-venv,ca-certificates" in command and "/out.tar" in command


def test_recipe_hash_changes_with_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    before = images.recipe_hash()
    monkeypatch.setattr(images, "BASE_PACKAGES", (*images.BASE_PACKAGES, "curl"))
    assert images.recipe_hash() != before


def test_pause_ref_is_a_hash_of_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = pauseimage.pause_image_ref()
    assert ref.startswith("localhost/agl-pause:")
    monkeypatch.setattr(pauseimage, "_PAUSE_MAIN", pauseimage._PAUSE_MAIN + "// changed\n")
    assert pauseimage.pause_image_ref() != ref


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_a_passwd_entry_for_the_pod_uid_is_refused(tmp_path: Path) -> None:
    tarball = tmp_path / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        _add(tar, "./etc/passwd", b"root:x:0:0:root:/root:/bin/bash\n")
    images.check_no_pod_user(tarball)
    with tarfile.open(tarball, "w") as tar:
        _add(tar, "./etc/passwd", b"root:x:0:0::/root:/bin/sh\nnonroot:x:65532:65532::/home:/bin/sh\n")
    with pytest.raises(BuildError, match="uid 65532"):
        images.check_no_pod_user(tarball)


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    _add(tar, f"blobs/sha256/{digest}", data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def test_image_size_reads_an_oci_archive(tmp_path: Path) -> None:
    path = tmp_path / "x.oci.tar"
    layer = b"a" * 5000
    with tarfile.open(path, "w") as tar:
        config = _blob(tar, b"{}")
        layer_desc = {**_blob(tar, gzip.compress(layer)), "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip"}
        manifest = json.dumps({"config": config, "layers": [layer_desc]}).encode()
        index = {"manifests": [_blob(tar, manifest)]}
        _add(tar, "index.json", json.dumps(index).encode())
    size = images.image_size(images.ImageArchive("localhost/x:1", path))
    assert size.unpacked == 5000 and size.layers == 1
    assert size.compressed == len(manifest) + 2 + int(str(layer_desc["size"]))


def test_host_ca_bundle_follows_pip_cert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("x")
    monkeypatch.setenv("PIP_CERT", str(bundle))
    assert images.host_ca_bundle() == bundle
