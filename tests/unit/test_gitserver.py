"""The git server of the local stack: reproducible commits, and smart HTTP that the real git client speaks.

source-controller fetches the sample modules from :mod:`localcluster.gitserver` through GitRepository
objects; these tests need no cluster. They publish trees into temporary directories, serve them on a
free 127.0.0.1 port (in-process, and once as the detached helper process ``up`` runs) and clone them
with the real ``git``: both protocol versions, a gzipped request body as git sends for larger
fetches, a chunked one, and a push, which must be refused.
"""

from __future__ import annotations

import gzip
import http.client
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from localcluster import gitserver
from localcluster.cluster import Cluster, free_port

SAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "samples"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

#: The commit :func:`gitserver.publish` makes of :func:`_tree` on every machine; it changes only if
#: the fixed identity, date, message or tree normalisation does (which changes every plan id). Plain
#: `git add -A && git commit` of the same files with IDENTITY and PUBLISH_MESSAGE gives the same SHA.
GOLDEN_SHA = "2c1b95ac00ac06e428c6f835463d2042f0c890da"


def _tree(directory: Path) -> Path:
    (directory / "modules" / "vpc").mkdir(parents=True)
    (directory / "modules" / "vpc" / "main.tf").write_text('variable "region" {\n  type = string\n}\n')
    (directory / "README.md").write_text("a module\n")
    (directory / "run.sh").write_text("#!/bin/sh\n")
    (directory / "run.sh").chmod(0o755)
    return directory


def _client_env(home: Path) -> dict[str, str]:
    """The git client without the user's or system's config, prompts, or any proxy."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    return env


def _git(home: Path, *args: str, check: bool = True, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["git", *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                            env={**_client_env(home), **(env or {})})
    if check:
        assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result


def _files(directory: Path) -> dict[str, tuple[bytes, bool]]:
    return {str(p.relative_to(directory)): (p.read_bytes(), os.access(p, os.X_OK))
            for p in sorted(directory.rglob("*")) if p.is_file() and ".git" not in p.relative_to(directory).parts}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "repositories"


@pytest.fixture
def served(root: Path) -> Iterator[str]:
    """The server on a free 127.0.0.1 port in this process; yields its base URL (ending in a slash)."""
    server = gitserver.make_server(root)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        assert not thread.is_alive()


def _request(url: str, path: str, method: str = "GET", body: Any = None,
             headers: dict[str, str] | None = None, chunked: bool = False) -> tuple[int, dict[str, str], bytes]:
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=chunked)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _pkt(line: str) -> bytes:
    data = line.encode()
    return f"{len(data) + 4:04x}".encode() + data


def _upload_pack_request(sha: str) -> bytes:
    """A protocol v0 fetch of ``sha`` (no capabilities: the pack follows ``NAK`` unframed)."""
    return _pkt(f"want {sha}\n") + b"0000" + _pkt("done\n")


# ------------------------------------------------------------------------------------ reproducible commits


def test_publish_is_idempotent_and_depends_on_content_only(tmp_path: Path, root: Path) -> None:
    source = _tree(tmp_path / "module")
    first = gitserver.publish(root, "mod", source)
    assert gitserver.publish(root, "mod", source) == first
    assert gitserver.head(root, "mod") == first
    # Another machine, another repository name, a copy of the same files: the same commit.
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    assert gitserver.publish(tmp_path / "elsewhere", "other-name", copy) == first
    assert first == GOLDEN_SHA
    # tofu's working state in the directory is not published.
    (copy / ".terraform" / "providers").mkdir(parents=True)
    (copy / ".terraform" / "providers" / "x").write_text("x")
    (copy / "terraform.tfstate").write_text("{}")
    (copy / "terraform.tfstate.backup").write_text("{}")
    (copy / ".terraform.lock.hcl").write_text("# lock\n")
    assert gitserver.publish(tmp_path / "elsewhere", "other-name", copy) == first
    # Changed content replaces the history with a new single commit, again content-addressed.
    (copy / "README.md").write_text("changed\n")
    changed = gitserver.publish(root, "mod", copy)
    assert changed != first
    assert gitserver.head(root, "mod") == changed


def test_commit_adds_a_new_reproducible_revision(tmp_path: Path, root: Path) -> None:
    source = _tree(tmp_path / "v1")
    first = gitserver.publish(root, "mod", source)
    newer = tmp_path / "v2"
    shutil.copytree(source, newer)
    (newer / "modules" / "vpc" / "outputs.tf").write_text('output "x" {\n  value = 1\n}\n')
    second = gitserver.commit(root, "mod", newer)
    assert second not in (first, None)
    assert gitserver.head(root, "mod") == second
    parents = _git(tmp_path, f"--git-dir={root / 'mod'}", "rev-list", "--parents", "-n1", second).stdout.split()
    assert parents == [second, first]
    # The same tree again makes no commit; the same steps elsewhere make the same SHAs.
    assert gitserver.commit(root, "mod", newer) == second
    again = tmp_path / "again"
    assert gitserver.publish(again, "mod", source) == first
    assert gitserver.commit(again, "mod", newer) == second
    assert gitserver.commit(again, "mod", source, message="back to v1\n") not in (first, second)


def test_commit_needs_a_published_repository_and_names_are_one_segment(tmp_path: Path, root: Path) -> None:
    source = _tree(tmp_path / "module")
    with pytest.raises(gitserver.GitServerError, match="publish it first"):
        gitserver.commit(root, "missing", source)
    for bad in ("", "../escape", "a/b", ".hidden"):
        with pytest.raises(gitserver.GitServerError, match="invalid repository name"):
            gitserver.publish(root, bad, source)
    (tmp_path / "empty" / ".terraform").mkdir(parents=True)
    with pytest.raises(gitserver.GitServerError, match="no files"):
        gitserver.publish(root, "empty", tmp_path / "empty")


def test_every_sample_module_is_published_under_its_directory_name(tmp_path: Path, root: Path) -> None:
    published = gitserver.publish_samples(root)
    modules = sorted(p.name for p in (SAMPLES / "modules").iterdir() if p.is_dir())
    assert sorted(published) == modules
    assert {"aws-vpc", "s3-bucket-module"} <= set(published)
    assert gitserver.publish_samples(root) == published
    files = _git(tmp_path, f"--git-dir={root / 'aws-vpc'}", "ls-tree", "-r", "--name-only", "main").stdout.split()
    assert files == ["modules/vpc/main.tf"]
    assert _git(tmp_path, f"--git-dir={root / 'aws-vpc'}", "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/main"


# -------------------------------------------------------------------------------------------- smart HTTP


@pytest.mark.parametrize("protocol", ["0", "2"])
def test_clone_and_ls_remote_over_smart_http(tmp_path: Path, root: Path, served: str, protocol: str) -> None:
    source = _tree(tmp_path / "module")
    sha = gitserver.publish(root, "mod", source)
    url = served + "mod"
    trace = tmp_path / "packet.trace"
    refs = _git(tmp_path, "-c", f"protocol.version={protocol}", "ls-remote", url,
                env={"GIT_TRACE_PACKET": str(trace)}).stdout.splitlines()
    assert f"{sha}\trefs/heads/main" in refs
    # The server speaks the version asked for (v2 is negotiated through the Git-Protocol header).
    assert ("git< version 2" in trace.read_text()) == (protocol == "2")
    clone = tmp_path / "clone"
    _git(tmp_path, "-c", f"protocol.version={protocol}", "clone", "--branch", "main", url, str(clone))
    assert _git(tmp_path, "rev-parse", "HEAD", cwd=clone).stdout.strip() == sha
    assert _files(clone) == _files(source)
    # A shallow fetch (what source-controller does for a branch) of a new revision.
    newer = tmp_path / "v2"
    shutil.copytree(source, newer)
    (newer / "README.md").write_text("v2\n")
    second = gitserver.commit(root, "mod", newer)
    shallow = tmp_path / "shallow"
    _git(tmp_path, "-c", f"protocol.version={protocol}", "clone", "--depth=1", "--single-branch",
         "--branch", "main", url, str(shallow))
    assert _git(tmp_path, "rev-parse", "HEAD", cwd=shallow).stdout.strip() == second
    assert (shallow / "README.md").read_text() == "v2\n"


def test_a_fetch_git_sends_gzipped_is_served(tmp_path: Path, root: Path, served: str) -> None:
    """git gzips an upload-pack request over 1 KiB; many branches make the clone's request that large."""
    source = _tree(tmp_path / "module")
    sha = gitserver.publish(root, "many", source)
    repo = root / "many"
    tree = _git(tmp_path, f"--git-dir={repo}", "rev-parse", f"{sha}^{{tree}}").stdout.strip()
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t"}
    for n in range(60):
        branch_sha = _git(tmp_path, f"--git-dir={repo}", "commit-tree", tree, "-p", sha, "-m", f"b{n}",
                          env=identity).stdout.strip()
        _git(tmp_path, f"--git-dir={repo}", "update-ref", f"refs/heads/b{n}", branch_sha)
    trace = tmp_path / "curl.trace"
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "--no-checkout", served + "many", str(clone),
         env={"GIT_TRACE_CURL": str(trace), "GIT_TRACE_CURL_NO_DATA": "1"})
    assert "Content-Encoding: gzip" in trace.read_text(), "git did not gzip the request: the test proves nothing"
    branches = _git(tmp_path, "branch", "-r", cwd=clone).stdout
    assert all(f"origin/b{n}\n" in branches for n in range(60))


def test_gzipped_and_chunked_request_bodies(root: Path, tmp_path: Path, served: str) -> None:
    sha = gitserver.publish(root, "mod", _tree(tmp_path / "module"))
    headers = {"Content-Type": "application/x-git-upload-pack-request"}
    request = _upload_pack_request(sha)
    for body, extra, chunked in [
        (request, {}, False),
        (gzip.compress(request), {"Content-Encoding": "gzip"}, False),
        (iter([request[:7], request[7:]]), {}, True),
        (iter([gzip.compress(request)]), {"Content-Encoding": "gzip"}, True),
    ]:
        status, got_headers, data = _request(served, "/mod/git-upload-pack", "POST", body, {**headers, **extra},
                                             chunked)
        assert status == 200, (extra, chunked, data[:200])
        assert got_headers["content-type"] == "application/x-git-upload-pack-result"
        assert data.startswith(b"0008NAK\nPACK"), (extra, chunked, data[:200])
    status, _, data = _request(served, "/mod/git-upload-pack", "POST", b"not gzip", {
        **headers, "Content-Encoding": "gzip"})
    assert status == 400


def test_pushes_are_refused(tmp_path: Path, root: Path, served: str) -> None:
    sha = gitserver.publish(root, "mod", _tree(tmp_path / "module"))
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", served + "mod", str(clone))
    (clone / "new.tf").write_text("# pushed\n")
    _git(tmp_path, "add", "new.tf", cwd=clone)
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "push me", cwd=clone)
    pushed = _git(tmp_path, "push", "origin", "HEAD:main", cwd=clone, check=False)
    assert pushed.returncode != 0
    assert "403" in pushed.stderr and "read-only" in pushed.stderr
    assert gitserver.head(root, "mod") == sha
    assert _request(served, "/mod/info/refs?service=git-receive-pack")[0] == 403
    assert _request(served, "/mod/git-receive-pack", "POST", b"0000",
                    {"Content-Type": "application/x-git-receive-pack-request"})[0] == 403


def test_health_unknown_repositories_and_paths_outside_the_root(tmp_path: Path, root: Path, served: str) -> None:
    gitserver.publish(root, "mod", _tree(tmp_path / "module"))
    assert _request(served, "/healthz")[:3:2] == (200, b"ok\n")
    assert _request(served, "/nope/info/refs?service=git-upload-pack")[0] == 404
    assert _request(served, "/../repositories/mod/info/refs?service=git-upload-pack")[0] == 404
    assert _request(served, "/mod/info/refs?service=git-upload-pack")[0] == 200


# ------------------------------------------------------------------------------- the launcher's helper


def _wait_healthy(port: int, proc: subprocess.Popen[bytes] | None = None, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            if _request(f"http://127.0.0.1:{port}/", "/healthz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no answer on 127.0.0.1:{port}/healthz within {limit}s")


def test_the_command_line_server_binds_loopback_and_serves(tmp_path: Path, root: Path) -> None:
    sha = gitserver.publish(root, "mod", _tree(tmp_path / "module"))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "localcluster.gitserver", "serve", "--root", str(root),
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(port, proc)
        listening = Path("/proc/net/tcp").read_text()
        assert f"0100007F:{port:04X}" in listening  # 127.0.0.1, not 0.0.0.0
        assert f"00000000:{port:04X}" not in listening
        assert _git(tmp_path, "ls-remote", f"http://127.0.0.1:{port}/mod").stdout.split() == [
            sha, "HEAD", sha, "refs/heads/main"]
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_start_publishes_the_samples_serves_them_and_stop_ends_it(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_LOCAL_STATE", str(tmp_path / "state"))
    cluster = Cluster("unit-gitserver")
    try:
        server = gitserver.start(cluster)
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/")
        assert server.root == cluster.dir / "git-repositories"
        again = gitserver.start(cluster)
        assert again == server
        url = gitserver.url_of(server, "aws-vpc")
        assert url == server.url + "aws-vpc"
        refs = _git(tmp_path, "ls-remote", url).stdout
        assert f"{gitserver.head(server.root, 'aws-vpc')}\trefs/heads/main" in refs
        extra = gitserver.publish(server.root, "extra", _tree(tmp_path / "module"))
        assert extra in _git(tmp_path, "ls-remote", gitserver.url_of(server, "extra")).stdout
    finally:
        gitserver.stop(cluster)
    with pytest.raises(OSError):
        _request(server.url, "/healthz")


# ---------------------------------------------------------------------------------------- Flux sources


class _RecordingCluster:
    def __init__(self) -> None:
        self.applied: list[Any] = []

    def kubectl(self, *args: str, input: str | None = None, **_: Any) -> None:
        assert args == ("apply", "-f", "-")
        self.applied.extend(yaml.safe_load_all(input or ""))


def test_apply_sources_points_the_git_repositories_at_the_served_url(tmp_path: Path) -> None:
    cluster = _RecordingCluster()
    server = gitserver.GitServer("http://127.0.0.1:40123/", tmp_path)
    gitserver.apply_sources(cluster, server)  # type: ignore[arg-type]
    assert cluster.applied[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cozy-system"}}
    repositories = {doc["metadata"]["name"]: doc for doc in cluster.applied[1:] if doc}
    assert set(repositories) == {"aws-vpc"}
    vpc = repositories["aws-vpc"]
    assert vpc["apiVersion"] == "source.toolkit.fluxcd.io/v1" and vpc["kind"] == "GitRepository"
    assert vpc["metadata"]["namespace"] == "cozy-system"
    assert vpc["spec"] == {"url": gitserver.url_of(server, "aws-vpc"), "ref": {"branch": "main"}, "interval": "10m"}
    # Each GitRepository is a published sample, and the definition that names it finds it.
    for name in repositories:
        assert (SAMPLES / "modules" / name).is_dir()
    definition = yaml.safe_load((SAMPLES / "definitions" / "vpc.yaml").read_text())
    ref = definition["spec"]["terraform"]["sourceRef"]
    assert ref["kind"] == "GitRepository" and ref["name"] in repositories
    assert ref["namespace"] == repositories[ref["name"]]["metadata"]["namespace"]
    assert gitserver.PLACEHOLDER_URL in (SAMPLES / "sources" / "modules.yaml").read_text()
