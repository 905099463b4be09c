"""What of a module directory the local source servers publish: one rule for git, OCI and S3.

OpenTofu leaves working state next to a module (``.terraform/``, lock and state files) when someone
runs it by hand; none of that belongs in a source, and symlinks are not followed.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

#: Names left out of every published tree.
EXCLUDED = (".git", ".terraform", ".terraform.lock.hcl", "*.tfstate*")


def excluded(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in EXCLUDED)


def entries(directory: Path, *, with_directories: bool = False) -> list[Path]:
    """The regular files (and, with ``with_directories``, the directories) under ``directory`` that a source
    publishes, sorted by their path relative to it."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not excluded(d) and not (Path(root) / d).is_symlink())
        if with_directories:
            found += [Path(root) / d for d in dirs]
        found += [Path(root) / f for f in files if not excluded(f) and (Path(root) / f).is_file()
                  and not (Path(root) / f).is_symlink()]
    return sorted(found, key=lambda p: p.relative_to(directory).as_posix())
