"""Git repositories whose commits are a function of their content: what the local git server serves.

Commits are made with a fixed author, committer, date and message, and the tree is built from the
files alone (mode normalised, no checkout attributes applied), so the same content yields the same
commit SHA on every run and machine: tofu-controller derives plan ids from the source revision, and
stable ids keep the docs reproducible.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

from . import moduletree
from .cluster import ClusterError

#: The sample module trees; each directory becomes one repository of the same name.
SAMPLE_MODULES = Path(__file__).resolve().parents[2] / "samples" / "modules"
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


class GitServerError(ClusterError):
    """Publishing or serving a repository failed; the message says which git step."""



def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
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
                            env=git_env(IDENTITY), timeout=120)
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
                                env=git_env(), timeout=60)
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
