"""OpenTofu module sources as real git repositories, served over git's smart HTTP protocol on 127.0.0.1.

tofu-controller takes a module from a Flux source; the sample VPC definition names a GitRepository.
To have the real source-controller (go-git) fetch it the way it does in a cluster, each directory of
``deploy/samples/modules/`` becomes a bare repository under the cluster's state directory, and
``git http-backend`` serves them read-only behind a small HTTP server on a free loopback port, run as
a detached helper process like :mod:`chartrepo`'s chart repository.

Commits are made with a fixed author, committer, date and message, and the tree is built from the
files alone (mode normalised, no checkout attributes applied), so the same content yields the same
commit SHA on every run and machine: tofu-controller derives plan ids from the source revision, and
stable ids keep the docs reproducible.

The server also runs without a cluster (:func:`make_server`, or ``python -m localcluster.gitserver
serve --root DIR --port N``), which is how the unit tests exercise it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import urllib.parse
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

from . import moduletree
from .build import log
from .cluster import Cluster, ClusterError, free_port
from .processes import Process

#: The sample module trees; each directory becomes one repository of the same name.
SAMPLE_MODULES = Path(__file__).resolve().parents[2] / "samples" / "modules"
#: The Flux sources for those repositories (``GitRepository`` objects), applied by :func:`apply_sources`.
SAMPLE_SOURCES_FILE = Path(__file__).resolve().parents[2] / "samples" / "sources" / "modules.yaml"
#: The server URL written in :data:`SAMPLE_SOURCES_FILE`; replaced by the served URL at apply time
#: (like ``http://127.0.0.1:8879/`` in ``charts.yaml``). Repository ``R`` is ``PLACEHOLDER_URL + R``.
PLACEHOLDER_URL = "http://127.0.0.1:8878/"
#: Where cozystack keeps its sources (the same namespace :mod:`flux` uses; not imported from there
#: so that :mod:`flux` may import this module).
SOURCES_NAMESPACE = "cozy-system"
#: Directory under the cluster's state directory that holds the bare repositories.
REPOSITORIES_DIR = "git-repositories"
#: The helper process's name (its record in ``processes/`` and its log in ``logs/``).
PROCESS_NAME = "git-server"
BRANCH = "main"

#: The one identity every commit is made with. Fixed values (date included) are what makes a
#: commit's SHA a function of its tree and parent alone.
IDENTITY: Mapping[str, str] = {
    "GIT_AUTHOR_NAME": "Cozystack AGL local stack",
    "GIT_AUTHOR_EMAIL": "agl-local@cozystack.invalid",
    "GIT_AUTHOR_DATE": "1735689600 +0000",  # 2025-01-01T00:00:00Z, git's internal date format
    "GIT_COMMITTER_NAME": "Cozystack AGL local stack",
    "GIT_COMMITTER_EMAIL": "agl-local@cozystack.invalid",
    "GIT_COMMITTER_DATE": "1735689600 +0000",
}
PUBLISH_MESSAGE = "Publish module tree\n"
COMMIT_MESSAGE = "New module revision\n"

#: Names left out of a published tree: tofu's working state, and any repository metadata.

#: Largest request body accepted (after decompression); upload-pack requests of these small
#: repositories are a few kilobytes.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: Longest one ``git http-backend`` run may take before it is killed, so no request hangs forever.
CGI_TIMEOUT = 300.0


@dataclass(frozen=True)
class GitServer:
    """A running server: ``url`` ends with ``/``; repository ``R`` is at ``url + R``."""

    url: str
    root: Path


class GitServerError(ClusterError):
    """Publishing or serving a repository failed; the message says which git step."""


# ------------------------------------------------------------------------------------------ repositories


def _git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without any ``GIT_*`` variable and without user or system config.

    A ``GIT_DIR`` or ``GIT_INDEX_FILE`` inherited from a hook, or a user's ``init.defaultBranch``
    or ``core.*`` settings, must not change what is committed.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    env.update(extra or {})
    return env


def _git(repo: Path, *args: str, input: bytes | None = None, check: bool = True) -> str:
    result = subprocess.run(["git", f"--git-dir={repo}", *args], input=input, capture_output=True,
                            env=_git_env(IDENTITY), timeout=120)
    if check and result.returncode != 0:
        raise GitServerError(f"git {' '.join(args)} in {repo} failed ({result.returncode}): "
                             f"{result.stderr.decode(errors='replace').strip()}")
    return result.stdout.decode().strip()


def _hash_blobs(repo: Path, files: list[Path]) -> list[str]:
    """Write the files' contents as blobs, as they are on disk (``--no-filters``: no eol or attribute filters)."""
    if not files:
        return []
    listing = "".join(f"{path}\n" for path in files).encode()
    shas = _git(repo, "hash-object", "-w", "--no-filters", "--stdin-paths", input=listing).split()
    if len(shas) != len(files):
        raise GitServerError(f"git hash-object returned {len(shas)} ids for {len(files)} files")
    return shas


def _write_tree(repo: Path, directory: Path) -> str | None:
    """Write ``directory`` (minus :data:`moduletree.EXCLUDED`) as a tree object; ``None`` if nothing is left in it.

    Only a file's content and whether its owner may execute it are recorded (modes 100755/100644),
    symlinks as links; empty directories cannot be represented in git and are skipped.
    """
    entries: list[str] = []
    files: list[tuple[str, str, Path]] = []
    for child in sorted(directory.iterdir()):
        if moduletree.excluded(child.name):
            continue
        mode = child.lstat().st_mode
        if stat.S_ISLNK(mode):
            sha = _git(repo, "hash-object", "-w", "--stdin", input=os.fsencode(os.readlink(child)))
            entries.append(f"120000 blob {sha}\t{child.name}")
        elif stat.S_ISDIR(mode):
            tree = _write_tree(repo, child)
            if tree is not None:
                entries.append(f"040000 tree {tree}\t{child.name}")
        elif stat.S_ISREG(mode):
            files.append(("100755" if mode & stat.S_IXUSR else "100644", child.name, child))
    for (file_mode, name, _), sha in zip(files, _hash_blobs(repo, [path for _, _, path in files]), strict=True):
        entries.append(f"{file_mode} blob {sha}\t{name}")
    if not entries:
        return None
    return _git(repo, "mktree", input="".join(f"{entry}\n" for entry in entries).encode())


def _repository(root: Path, name: str) -> Path:
    if not name or name.startswith(".") or "/" in name or "\\" in name:
        raise GitServerError(f"invalid repository name {name!r}: one path segment, not starting with a dot")
    return root / name


def _init(repo: Path) -> None:
    """Create the bare repository (if missing) with ``HEAD`` on :data:`BRANCH` and pushes refused."""
    if not (repo / "HEAD").exists():
        repo.parent.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(["git", "init", "--quiet", "--bare", str(repo)], capture_output=True,
                                env=_git_env(), timeout=60)
        if result.returncode != 0:
            raise GitServerError(f"git init {repo} failed: {result.stderr.decode(errors='replace').strip()}")
    _git(repo, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
    # The server refuses receive-pack itself; this also keeps http-backend from ever accepting one.
    _git(repo, "config", "http.receivepack", "false")


def head(root: Path, name: str) -> str | None:
    """The commit :data:`BRANCH` of repository ``name`` points at, or ``None`` if it has none."""
    repo = _repository(root, name)
    if not (repo / "HEAD").exists():
        return None
    sha = _git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{BRANCH}^{{commit}}", check=False)
    return sha or None


def _tree_of(source: Path, repo: Path) -> str:
    if not source.is_dir():
        raise GitServerError(f"{source} is not a directory")
    tree = _write_tree(repo, source)
    if tree is None:
        raise GitServerError(f"{source} has no files to publish")
    return tree


def publish(root: Path, name: str, source: Path) -> str:
    """Publish directory ``source`` as repository ``name`` under ``root``; returns the commit SHA.

    The branch is set to a single root commit of the tree, so the SHA depends on the content alone:
    publishing the same content again (on any machine) gives the same SHA, and publishing changed
    content replaces the history (use :func:`commit` for a new revision on top of the current one).
    """
    repo = _repository(root, name)
    _init(repo)
    tree = _tree_of(source, repo)
    sha = _git(repo, "commit-tree", tree, input=PUBLISH_MESSAGE.encode())
    _git(repo, "update-ref", f"refs/heads/{BRANCH}", sha)
    return sha


def commit(root: Path, name: str, source: Path, message: str = COMMIT_MESSAGE) -> str:
    """Add a commit with the tree of ``source`` on top of repository ``name``; returns its SHA.

    This is a new source revision for a repository already published. If ``source`` has the tree
    of the current commit, no commit is made and the current SHA is returned (so repeating a call
    is harmless); the new SHA is a function of the parent, the tree and ``message``.
    """
    repo = _repository(root, name)
    parent = head(root, name)
    if parent is None:
        raise GitServerError(f"repository {name!r} under {root} has no {BRANCH} branch; publish it first")
    tree = _tree_of(source, repo)
    if tree == _git(repo, "rev-parse", f"{parent}^{{tree}}"):
        return parent
    sha = _git(repo, "commit-tree", tree, "-p", parent, input=message.encode())
    # Compare-and-swap on the old value: a concurrent change of the branch fails loudly.
    _git(repo, "update-ref", f"refs/heads/{BRANCH}", sha, parent)
    return sha


def publish_samples(root: Path, modules: Path = SAMPLE_MODULES) -> dict[str, str]:
    """Publish every directory of ``modules`` as the repository of the same name; name -> commit SHA."""
    return {child.name: publish(root, child.name, child)
            for child in sorted(modules.iterdir()) if child.is_dir() and not moduletree.excluded(child.name)}


# ---------------------------------------------------------------------------------------------- server


def http_backend() -> Path:
    """Where ``git http-backend`` is: in git's exec path (``git --exec-path``), else the Debian location."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, timeout=30,
                                   env=_git_env(), check=True).stdout.strip()
        candidate = Path(exec_path) / "git-http-backend"
        if candidate.is_file():
            return candidate
    fallback = Path("/usr/lib/git-core/git-http-backend")
    if fallback.is_file():
        return fallback
    raise GitServerError("git http-backend not found (is git installed? `git --exec-path` names its directory)")


class _RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class GitHTTPServer(ThreadingHTTPServer):
    """The HTTP side: one thread per connection, each request handed to ``git http-backend``."""

    daemon_threads = True

    def __init__(self, root: Path, port: int) -> None:
        self.root = root.resolve()
        self.backend = http_backend()
        # Loopback only: these repositories are exported without authentication.
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    """A minimal CGI/1.1 bridge to ``git http-backend``.

    Python's ``http.server`` has no maintained CGI support (``CGIHTTPRequestHandler`` is deprecated
    since 3.13 and due for removal), so this small bridge is hand-written: it builds the CGI
    environment, passes the (decompressed) request body on stdin, and turns the CGI response
    (``Status:`` and other headers, a blank line, the body) into an HTTP response whose body is
    streamed as http-backend writes it. HTTP/1.0: the body ends when the connection closes.
    """

    server: GitHTTPServer
    protocol_version = "HTTP/1.0"
    server_version = "agl-gitserver"
    #: Seconds a client may stay silent before its connection is dropped.
    timeout = 60

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(split.path)
        if path == "/healthz":
            self._reply(200, "ok\n")
            return
        # Read-only: pushes are refused before git sees them (http-backend is also told so per repository).
        if path.endswith("/git-receive-pack") or "git-receive-pack" in urllib.parse.parse_qs(split.query).get(
                "service", []):
            self._reply(403, "pushing is not allowed: this server is read-only\n")
            return
        if ".." in path.split("/") or "\x00" in path:
            self._reply(404, "not found\n")
            return
        try:
            body = self._body()
        except _RequestError as exc:
            self._reply(exc.status, f"{exc}\n")
            return
        self._run_backend(path, split.query, body)

    def _body(self) -> bytes:
        """The request body, de-chunked and, when the client gzipped it (git does), decompressed."""
        if self.command != "POST":
            return b""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raw = self._read_chunked()
        else:
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                raise _RequestError(400, "invalid Content-Length") from None
            if length < 0 or length > MAX_REQUEST_BYTES:
                raise _RequestError(413, "request body too large")
            raw = self.rfile.read(length)
            if len(raw) != length:
                raise _RequestError(400, "request body shorter than its Content-Length")
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            return _gunzip(raw)
        if encoding not in ("", "identity"):
            raise _RequestError(415, f"unsupported Content-Encoding {encoding!r}")
        return raw

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _RequestError(400, "invalid chunk size") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            total += size
            if total > MAX_REQUEST_BYTES:
                raise _RequestError(413, "request body too large")
            chunk = self.rfile.read(size)
            if len(chunk) != size:
                raise _RequestError(400, "truncated chunk")
            chunks.append(chunk)
            self.rfile.readline(8)  # the CRLF after the chunk

    def _cgi_env(self, path: str, query: str, body: bytes) -> dict[str, str]:
        env = _git_env({
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "HOME": str(self.server.root),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_SOFTWARE": self.server_version,
            "SERVER_PROTOCOL": self.request_version,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": str(self.server.server_address[1]),
            "REMOTE_ADDR": self.client_address[0],
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            # The body handed over is already decompressed, so its own length, and no
            # HTTP_CONTENT_ENCODING (http-backend would try to inflate it again).
            "CONTENT_LENGTH": str(len(body)),
        })
        # Protocol v2 is negotiated through this header; http-backend reads it from the CGI variable.
        if protocol := self.headers.get("Git-Protocol"):
            env["HTTP_GIT_PROTOCOL"] = protocol
        return env

    def _run_backend(self, path: str, query: str, body: bytes) -> None:
        proc = subprocess.Popen([str(self.server.backend)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=None, env=self._cgi_env(path, query, body), cwd=self.server.root)
        assert proc.stdin is not None and isinstance(proc.stdout, io.BufferedReader)
        watchdog = threading.Timer(CGI_TIMEOUT, proc.kill)
        watchdog.daemon = True
        watchdog.start()
        # Feed stdin from another thread: http-backend may start answering before it has read everything.
        feeder = threading.Thread(target=_feed, args=(proc.stdin, body), daemon=True)
        feeder.start()
        try:
            status, reason, headers = _cgi_headers(proc.stdout)
            if status == 0:
                self._reply(502, "git http-backend gave no response\n")
                return
            self.send_response(status, reason)
            for key, value in headers:
                self.send_header(key, value)
            self.end_headers()
            while chunk := proc.stdout.read1(65536):
                self.wfile.write(chunk)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away; the finally below ends http-backend
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            feeder.join(timeout=5)

    def _reply(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _gunzip(data: bytes) -> bytes:
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(data, MAX_REQUEST_BYTES)
    except zlib.error as exc:
        raise _RequestError(400, f"invalid gzip request body: {exc}") from None
    if decompressor.unconsumed_tail:
        raise _RequestError(413, "request body too large")
    if not decompressor.eof:
        raise _RequestError(400, "truncated gzip request body")
    return out


def _feed(stdin: IO[bytes], body: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        stdin.write(body)
    with contextlib.suppress(BrokenPipeError, OSError):
        stdin.close()


def _cgi_headers(stdout: IO[bytes]) -> tuple[int, str, list[tuple[str, str]]]:
    """Read the CGI response header block; ``(0, "", [])`` if the program wrote none."""
    status, reason = 200, "OK"
    headers: list[tuple[str, str]] = []
    seen_any = False
    while True:
        line = stdout.readline(8192)
        if not line:
            return (status, reason, headers) if seen_any else (0, "", [])
        text = line.decode("latin-1").rstrip("\r\n")
        if not text:
            return status, reason, headers
        seen_any = True
        key, _, value = text.partition(":")
        value = value.strip()
        if key.strip().lower() == "status":
            code, _, reason = value.partition(" ")
            status = int(code) if code.isdigit() else 502
        else:
            headers.append((key.strip(), value))


def make_server(root: Path, port: int = 0) -> GitHTTPServer:
    """A server on 127.0.0.1 for the repositories under ``root`` (not yet serving: call ``serve_forever``).

    ``port`` 0 picks a free one (read it from ``server_address``). Needs no cluster, so tests can run
    it in-process.
    """
    root.mkdir(parents=True, exist_ok=True)
    return GitHTTPServer(root, port)


# ------------------------------------------------------------------------------------ the cluster helper


def repositories_root(cluster: Cluster) -> Path:
    return cluster.dir / REPOSITORIES_DIR


def start(cluster: Cluster) -> GitServer:
    """Publish the sample modules and serve every repository (unless already served); the URL ends with a slash.

    The samples are re-published on every call: it is idempotent, and keeps the served trees equal
    to ``deploy/samples/modules/`` when a later ``up`` finds the server running.
    """
    process = Process(cluster, PROCESS_NAME)
    root = repositories_root(cluster)
    published = publish_samples(root)
    running = process.running()
    if running is not None:
        return GitServer(f"http://127.0.0.1:{running.port}/", root)
    port = free_port()
    process.spawn([sys.executable, "-m", "localcluster.gitserver", "serve", "--root", str(root), "--port", str(port)],
                  port=port, ready_url=f"http://127.0.0.1:{port}/healthz")
    log(f"git server serving {', '.join(f'{name}@{sha[:12]}' for name, sha in published.items())} "
        f"from {root} on http://127.0.0.1:{port}/")
    return GitServer(f"http://127.0.0.1:{port}/", root)


def stop(cluster: Cluster) -> None:
    """Stop the server; the repositories stay (the next :func:`start` re-publishes over them)."""
    Process(cluster, PROCESS_NAME).stop()


def url_of(server: GitServer, repo_name: str) -> str:
    """The clone URL of repository ``repo_name`` on ``server``."""
    return server.url + urllib.parse.quote(repo_name)


def apply_sources(cluster: Cluster, server: GitServer) -> None:
    """Apply :data:`SAMPLE_SOURCES_FILE` with this server's URL in place of :data:`PLACEHOLDER_URL`."""
    cluster.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SOURCES_NAMESPACE}}))
    cluster.kubectl("apply", "-f", "-", input=SAMPLE_SOURCES_FILE.read_text().replace(PLACEHOLDER_URL, server.url))


# ------------------------------------------------------------------------------------------ entry point


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster.gitserver",
                                     description="Serve or publish git repositories for the local stack.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the repositories under --root on 127.0.0.1:--port until killed")
    serve.add_argument("--root", type=Path, required=True)
    serve.add_argument("--port", type=int, required=True)
    publish_cmd = sub.add_parser("publish", help="publish a directory as a repository under --root; prints the SHA")
    publish_cmd.add_argument("--root", type=Path, required=True)
    publish_cmd.add_argument("name")
    publish_cmd.add_argument("source", type=Path)
    args = parser.parse_args(argv)
    if shutil.which("git") is None:
        print("git is not on PATH", file=sys.stderr)
        return 1
    try:
        if args.command == "serve":
            server = make_server(args.root, args.port)
            print(f"serving {server.root} on http://127.0.0.1:{server.server_address[1]}/ with {server.backend}",
                  file=sys.stderr, flush=True)
            with server:
                server.serve_forever()
        else:
            print(publish(args.root, args.name, args.source))
    except GitServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
