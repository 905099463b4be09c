"""OpenTofu module sources as real git repositories, served over git's smart HTTP protocol on 127.0.0.1.

tofu-controller takes a module from a Flux source; the sample VPC definition names a GitRepository.
To have the real source-controller (go-git) fetch it the way it does in a cluster, each directory of
``deploy/samples/modules/`` becomes a bare repository under the cluster's state directory, and
``git http-backend`` serves them read-only behind a small HTTP server on a free loopback port, run as
a detached helper process like :mod:`chartrepo`'s chart repository.

The repositories' commits are a function of their content (:mod:`gitrepos`); the HTTP side is
:mod:`githttp`. This module runs them for a cluster.

The server also runs without a cluster (:func:`make_server`, or ``python -m localcluster.gitserver
serve --root DIR --port N``), which is how the unit tests exercise it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from .build import log
from .cluster import Cluster, free_port
from .githttp import GitHTTPServer, make_server
from .gitrepos import BRANCH, SAMPLE_MODULES, GitServerError, commit, head, publish, publish_samples
from .processes import Process

__all__ = ["BRANCH", "SAMPLE_MODULES", "GitHTTPServer", "GitServer", "GitServerError", "apply_sources", "commit",
           "head", "make_server", "publish", "publish_samples", "repositories_root", "start", "stop", "url_of"]

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


@dataclass(frozen=True)
class GitServer:
    """A running server: ``url`` ends with ``/``; repository ``R`` is at ``url + R``."""

    url: str
    root: Path


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
