"""The two stacks as the document sees them: their modules, the sibling pairs, and how alike each pair is."""

from __future__ import annotations

import ast
import statistics
from functools import cache

from docs.hybridpath.measure import ROOT, RUN, Likeness, Module, likeness, load_module

STACKS = ("helm_agl", "tofu_agl")
#: Data-path order of the sibling modules (one request, then one rollout); modules not listed follow by name.
ORDER = ("definition", "names", "validate", "build", "project", "rollout", "storage", "registry", "reconciler",
         "app", "__main__")
#: In a stack's package but not part of the serving stack (excluded from the duplication totals).
TOOLING = {"draft2": "the Draft 2 converter of section (d)", "generate": "the definition generator (SPEC §10)"}


def _order(name: str) -> tuple[bool, int, str]:
    return name in TOOLING, ORDER.index(name) if name in ORDER else len(ORDER), name


def module_names(package: str) -> list[str]:
    names = [p.stem for p in (ROOT / package).glob("*.py") if p.name != "__init__.py"]
    return sorted(names, key=_order)


def serving(package: str) -> list[Module]:
    return [load_module(package, n) for n in module_names(package) if n not in TOOLING]


def all_names() -> list[str]:
    return sorted(set(module_names(STACKS[0])) | set(module_names(STACKS[1])), key=_order)


def paired_names() -> list[str]:
    helm, tofu = set(module_names("helm_agl")), set(module_names("tofu_agl"))
    return [n for n in all_names() if n in helm and n in tofu and n not in TOOLING]


def pairs() -> list[Likeness]:
    return [likeness(load_module("helm_agl", n), load_module("tofu_agl", n)) for n in paired_names()]


def combined(selection: list[Likeness], runs: bool = False) -> float:
    lines = sum(p.in_runs if runs else p.alike for p in selection)
    total = sum(p.a.code_lines + p.b.code_lines for p in selection)
    return 2 * lines / total if total else 0.0


@cache
def baseline() -> tuple[float, float]:
    """(median, max) likeness of cross-stack module pairs that are *not* siblings: the noise floor."""
    shares = [
        likeness(a, b).share(likeness(a, b).alike)
        for a in serving("helm_agl") for b in serving("tofu_agl") if a.name != b.name
    ]
    return statistics.median(shares), max(shares)


def _run_scopes(module: Module, start: int, size: int) -> list[str]:
    names: list[str] = []
    for row in module.rows[start : start + size]:
        name = module.scope(row)
        if name not in names:
            names.append(name)
    return names


def _names(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def describe_run(pair: Likeness, block: tuple[int, int, int]) -> str:
    """``N lines in `scope`, ...`` for one matching block; both sides' scopes when they differ."""
    i, j, size = block
    a, b = _run_scopes(pair.a, i, size), _run_scopes(pair.b, j, size)
    return f"{size} lines in {_names(a)}" if a == b else f"{size} lines in {_names(a)} ↔ {_names(b)}"


def longest_runs(pair: Likeness, limit: int = 3) -> list[tuple[int, int, int]]:
    return sorted((b for b in pair.blocks if b[2] >= RUN), key=lambda b: (-b[2], b[0]))[:limit]


def shared_modules() -> list[Module]:
    """Every module of the ``shared`` toolkit, subpackages included (``__init__`` files are docstrings only)."""
    paths = sorted(p for p in (ROOT / "shared").rglob("*.py") if p.name != "__init__.py")
    return [load_module(p.parent.relative_to(ROOT).as_posix(), p.stem) for p in paths]


def shared_imports(package: str) -> set[str]:
    """The ``shared`` subpackages a stack's serving modules import (``shared.api``, ``shared.client`` ...)."""
    found: set[str] = set()
    for module in serving(package):
        for node in ast.walk(ast.parse(module.path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            found.update(".".join(n.split(".")[:2]) for n in names if n.split(".")[0] == "shared" and "." in n)
    return found
