"""Generate ``docs/hybrid-path.md``: the hybrid-path evidence of SPEC §9, computed from the code.

Run from the repository root: ``python docs/hybrid_path.py`` (or ``nox -s docs``).  Every number in
the document is measured here and every function it names is resolved by import, so the document
cannot drift from the code silently: a rename breaks generation, and
``tests/unit/test_hybrid_path_doc.py`` fails when the committed document differs from what this
script writes.  The output depends only on the source tree (no clock, no environment), so two runs
give the same bytes.

``render()`` returns the document; ``main()`` writes it.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import io
import keyword
import statistics
import sys
import tokenize
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script, the repository root is not on the path
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

import helm_agl.build  # noqa: E402
import helm_agl.definition  # noqa: E402
import helm_agl.names  # noqa: E402
import helm_agl.project  # noqa: E402
import helm_agl.reconciler  # noqa: E402
import helm_agl.registry  # noqa: E402
import helm_agl.rollout  # noqa: E402
import helm_agl.storage  # noqa: E402
import helm_agl.validate  # noqa: E402
import tofu_agl.app  # noqa: E402
import tofu_agl.approval  # noqa: E402
import tofu_agl.build  # noqa: E402
import tofu_agl.definition  # noqa: E402
import tofu_agl.draft2  # noqa: E402
import tofu_agl.names  # noqa: E402
import tofu_agl.project  # noqa: E402
import tofu_agl.reconciler  # noqa: E402
import tofu_agl.registry  # noqa: E402
import tofu_agl.rollout  # noqa: E402
import tofu_agl.storage  # noqa: E402
import tofu_agl.validate  # noqa: E402
import tofu_agl.variables  # noqa: E402

OUTPUT = ROOT / "docs" / "hybrid-path.md"
SAMPLES = ROOT / "deploy" / "samples" / "definitions"
STACKS = ("helm_agl", "tofu_agl")
#: Pipeline order of the sibling modules; modules not listed follow in name order.
ORDER = ("definition", "translate", "storage", "registry", "reconciler", "app", "__main__")
#: In a stack's package but not part of the serving stack (excluded from the duplication totals).
TOOLING = {"draft2": "the Draft 2 converter of section (d)"}
#: Matching runs at least this long count as copied code (shorter ones are mostly ``)``/``return``).
RUN = 4
#: What the proposal's deck estimated for Draft 1, and the parts it named (seed 000, "Draft 1 — Trade-offs":
#: REST, reconciler, dynamic-type registration).
CLAIMED_DUPLICATION = "~80%"
CLAIMED_PARTS = ("storage", "reconciler", "registry")
#: Pairs at least this alike are "the same code"; below LOW they are where the backends differ.
HIGH, LOW = 0.6, 0.4
#: Pairs smaller than this (code lines per side) are too small to rank in the summary.
RANKED_MIN_LINES = 50

_SKIPPED_TOKENS = {
    tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
    tokenize.ENCODING, tokenize.ENDMARKER,
}
# Python 3.12 splits f-strings into several tokens; 3.11 has one STRING token (getattr keeps both).
_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)
_FSTRING_END = getattr(tokenize, "FSTRING_END", -1)


# ============================================================================ source measurement


@dataclass(frozen=True)
class Module:
    """One source file: its size, its role, and its lines normalized to their shape."""

    package: str
    name: str
    path: Path
    role: str
    doc_lines: int
    #: Normalized code lines and the physical row each came from (same length).
    shapes: tuple[str, ...]
    rows: tuple[int, ...]
    #: (first row, last row, qualified name) of every def and class, for naming matched runs.
    scopes: tuple[tuple[int, int, str], ...] = field(repr=False)

    @property
    def code_lines(self) -> int:
        return len(self.shapes)

    @property
    def rel(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    def scope(self, row: int) -> str:
        """Innermost def/class holding ``row``; ``<module>`` for top-level code."""
        best = (0, "<module>")
        for first, last, name in self.scopes:
            if first <= row <= last and first >= best[0]:
                best = (first, name)
        return best[1]


def _docstring_rows(tree: ast.Module) -> set[int]:
    rows: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                rows.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return rows


def _scopes(tree: ast.Module) -> tuple[tuple[int, int, str], ...]:
    out: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(out)


def _shape(tok: tokenize.TokenInfo) -> str:
    """A token with its names, strings and numbers abstracted away (keywords and operators kept)."""
    if tok.type == tokenize.NAME:
        return tok.string if keyword.iskeyword(tok.string) else "N"
    if tok.type == tokenize.STRING:
        return "S"
    if tok.type == tokenize.NUMBER:
        return "0"
    return tok.string


def shape_lines(source: str) -> tuple[list[str], list[int], int]:
    """(normalized code lines, their rows, docstring line count) of Python ``source``."""
    tree = ast.parse(source)
    doc_rows = _docstring_rows(tree)
    by_row: dict[int, list[str]] = {}
    fstring_depth = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        row = tok.start[0]
        if tok.type in _SKIPPED_TOKENS or row in doc_rows:
            continue
        if tok.type == _FSTRING_START:
            if fstring_depth == 0:
                by_row.setdefault(row, []).append("S")
            fstring_depth += 1
            continue
        if tok.type == _FSTRING_END:
            fstring_depth -= 1
            continue
        if fstring_depth:
            continue
        by_row.setdefault(row, []).append(_shape(tok))
    rows = sorted(by_row)
    return [" ".join(by_row[r]) for r in rows], rows, len(doc_rows)


@cache
def load_module(package: str, name: str) -> Module:
    path = ROOT / package / f"{name}.py"
    source = path.read_text()
    tree = ast.parse(source)
    doc = ast.get_docstring(tree) or ""
    shapes, rows, doc_lines = shape_lines(source)
    return Module(package, name, path, doc.strip().splitlines()[0] if doc else "", doc_lines,
                  tuple(shapes), tuple(rows), _scopes(tree))


def module_names(package: str) -> list[str]:
    names = [p.stem for p in (ROOT / package).glob("*.py") if p.name != "__init__.py"]
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def serving(package: str) -> list[Module]:
    return [load_module(package, n) for n in module_names(package) if n not in TOOLING]


def all_names() -> list[str]:
    names = set(module_names(STACKS[0])) | set(module_names(STACKS[1]))
    return sorted(names, key=lambda n: (n in TOOLING, ORDER.index(n) if n in ORDER else len(ORDER), n))


# ============================================================================ likeness


@dataclass(frozen=True)
class Likeness:
    a: Module
    b: Module
    blocks: tuple[tuple[int, int, int], ...]  # (index in a, index in b, size), size > 0

    @property
    def alike(self) -> int:
        return sum(size for _, _, size in self.blocks)

    @property
    def in_runs(self) -> int:
        return sum(size for _, _, size in self.blocks if size >= RUN)

    def share(self, lines: int) -> float:
        total = self.a.code_lines + self.b.code_lines
        return 2 * lines / total if total else 0.0


@cache
def likeness(a: Module, b: Module) -> Likeness:
    """Lines alike by shape: SequenceMatcher's matching blocks over the normalized lines."""
    matcher = difflib.SequenceMatcher(None, a.shapes, b.shapes, autojunk=False)
    blocks = tuple((m.a, m.b, m.size) for m in matcher.get_matching_blocks() if m.size)
    return Likeness(a, b, blocks)


def pct(value: float) -> str:
    return f"{100 * value:.0f}%"


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


def pairs() -> list[Likeness]:
    return [likeness(load_module("helm_agl", n), load_module("tofu_agl", n)) for n in paired_names()]


def combined(selection: list[Likeness], runs: bool = False) -> float:
    lines = sum(p.in_runs if runs else p.alike for p in selection)
    total = sum(p.a.code_lines + p.b.code_lines for p in selection)
    return 2 * lines / total if total else 0.0


# ============================================================================ references


def where(obj: Any) -> str:
    """```path:qualname``` of a live function, method or class (a rename breaks generation)."""
    target = inspect.unwrap(obj)
    source = inspect.getsourcefile(target)
    if source is None:
        raise TypeError(f"{obj!r} has no source file")
    return f"`{Path(source).resolve().relative_to(ROOT).as_posix()}:{target.__qualname__}`"


def const(module: ModuleType, name: str) -> str:
    """```path:NAME``` of a module constant, resolved now (raises AttributeError on a rename)."""
    getattr(module, name)
    path = Path(module.__file__ or "").resolve().relative_to(ROOT).as_posix()
    return f"`{path}:{name}`"


def value(module: ModuleType, name: str) -> str:
    return f"`{getattr(module, name)!r}`"


def sig(obj: Callable[..., Any]) -> str:
    """``name(params) -> return`` with annotations of parameters left out, to fit a line."""
    signature = inspect.signature(obj)
    parts: list[str] = []
    star = False
    for param in signature.parameters.values():
        if param.name in ("self", "cls"):
            continue
        if param.kind is param.VAR_POSITIONAL:
            parts.append(f"*{param.name}")
            star = True
        elif param.kind is param.VAR_KEYWORD:
            parts.append(f"**{param.name}")
        else:
            if param.kind is param.KEYWORD_ONLY and not star:
                parts.append("*")
                star = True
            parts.append(param.name if param.default is param.empty else f"{param.name}={param.default!r}")
    ret = signature.return_annotation
    arrow = "" if ret is signature.empty else f" -> {ret if isinstance(ret, str) else ret.__name__}"
    return f"`{obj.__name__}({', '.join(parts)}){arrow}`"


def ref(obj: Callable[..., Any]) -> str:
    return f"{where(obj)} {sig(obj)}"


# ============================================================================ samples


def sample(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((SAMPLES / f"{name}.yaml").read_text())
    return obj


def shared_imports(package: str) -> set[str]:
    """The ``shared.*`` modules a package's serving modules import."""
    found: set[str] = set()
    for module in serving(package):
        for node in ast.walk(ast.parse(module.path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "shared":
                if node.module == "shared":
                    found.update(f"shared.{a.name}" for a in node.names if (ROOT / "shared" / f"{a.name}.py").exists())
                else:
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("shared."))
    return found


def codes(names: Iterable[str]) -> str:
    return ", ".join(f"`{n}`" for n in sorted(names)) or "none"


# ============================================================================ sections


def section_summary() -> list[str]:
    helm, tofu = serving("helm_agl"), serving("tofu_agl")
    every = pairs()
    paired_total = sum(p.a.code_lines + p.b.code_lines for p in every)
    alike = sum(p.alike for p in every)
    runs = sum(p.in_runs for p in every)
    stacks_total = sum(m.code_lines for m in helm + tofu)
    claimed = [p for p in every if p.a.name in CLAIMED_PARTS]
    ranked = sorted((p for p in every if min(p.a.code_lines, p.b.code_lines) >= RANKED_MIN_LINES),
                    key=lambda p: (-p.share(p.alike), p.a.name))
    floor = baseline()
    return [
        "## Summary",
        "",
        f"- **Measured duplication.** Of the {paired_total} code lines in the {len(every)} sibling module pairs, "
        f"{2 * alike} ({pct(2 * alike / paired_total)}) are alike by shape, {2 * runs} "
        f"({pct(2 * runs / paired_total)}) in runs of {RUN} or more lines. Over both serving stacks "
        f"({stacks_total} code lines, Tofu-only modules included) that is {pct(2 * alike / stacks_total)} alike, "
        f"{pct(2 * runs / stacks_total)} in runs. For scale, unrelated module pairs across the stacks score a "
        f"median of {pct(floor[0])} (at most {pct(floor[1])}).",
        f"- **Against the proposal.** The deck estimated {CLAIMED_DUPLICATION} duplication for REST, reconciler "
        f"and dynamic-type registration; for those pairs ({', '.join(f'`{p.a.name}`' for p in claimed)}) the "
        f"measure gives {pct(combined(claimed))} alike, {pct(combined(claimed, runs=True))} in runs. "
        + ("The estimate roughly holds for that plumbing" if combined(claimed) >= HIGH
           else "The estimate is high even for that plumbing")
        + ", not for the stack as a whole: the translation and the Tofu-only modules are new code, not copies.",
        f"- **Where.** Ranked among pairs of at least {RANKED_MIN_LINES} code lines a side: "
        + ", ".join(f"`{p.a.name}` {pct(p.share(p.alike))}" for p in ranked) + ".",
        f"- **The interface.** Every method of Draft 2's `Backend` has a counterpart in both packages (section c), "
        f"but the code needs {len(LEAKS)} things the interface does not have: "
        + "; ".join(leak.title.lower() for leak in LEAKS) + ".",
        "- **Migration.** `tofu_agl.draft2.to_draft2` turns a TofuApplicationDefinition into a Draft 2 "
        "ApplicationDefinition with `spec.backend.type: Terraform` without losing a field (section d).",
        "",
    ]


def paired_names() -> list[str]:
    helm, tofu = set(module_names("helm_agl")), set(module_names("tofu_agl"))
    return [n for n in all_names() if n in helm and n in tofu and n not in TOOLING]


@cache
def baseline() -> tuple[float, float]:
    """(median, max) likeness of cross-stack module pairs that are *not* siblings: the noise floor."""
    shares = [
        likeness(a, b).share(likeness(a, b).alike)
        for a in serving("helm_agl") for b in serving("tofu_agl") if a.name != b.name
    ]
    return statistics.median(shares), max(shares)


def section_modules() -> list[str]:
    out = [
        "## (a) The two stacks side by side",
        "",
        "Sizes are **code lines**: physical lines that carry at least one Python token other than a comment or a "
        "docstring (blank lines, comments and docstrings excluded). **doc** counts docstring lines. The role is "
        "the first line of the module's docstring. `__init__.py` files (docstring only) are left out.",
        "",
        "| module | helm_agl code | helm_agl doc | tofu_agl code | tofu_agl doc | helm_agl role | tofu_agl role |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    totals = {"helm_agl": [0, 0], "tofu_agl": [0, 0]}
    for name in all_names():
        cells: list[str] = []
        roles: list[str] = []
        for package in STACKS:
            if name in module_names(package):
                module = load_module(package, name)
                cells += [str(module.code_lines), str(module.doc_lines)]
                roles.append(module.role.replace("|", "\\|"))
                if name not in TOOLING:
                    totals[package][0] += module.code_lines
                    totals[package][1] += module.doc_lines
            else:
                cells += ["—", "—"]
                roles.append("—")
        label = f"`{name}`" + (f" (tooling: {TOOLING[name]})" if name in TOOLING else "")
        out.append(f"| {label} | {' | '.join(cells)} | {' | '.join(roles)} |")
    h, t = totals["helm_agl"], totals["tofu_agl"]
    out.append(f"| **serving stack** | **{h[0]}** | **{h[1]}** | **{t[0]}** | **{t[1]}** | | |")
    shared = [p for p in sorted((ROOT / "shared").glob("*.py")) if p.name != "__init__.py"]
    shared_code = sum(load_module("shared", p.stem).code_lines for p in shared)
    helm_uses, tofu_uses = shared_imports("helm_agl"), shared_imports("tofu_agl")
    out += [
        "",
        f"Both stacks stand on `shared/` ({len(shared)} modules, {shared_code} code lines), the backend-agnostic "
        "toolkit that Draft 2 keeps as it is. Imported directly by both: "
        f"{codes(helm_uses & tofu_uses)}; only by helm_agl: {codes(helm_uses - tofu_uses)}; only by tofu_agl: "
        f"{codes(tofu_uses - helm_uses)}.",
        "",
    ]
    return out


def section_duplication() -> list[str]:
    out = [
        "## (b) Duplicated code between helm_agl and tofu_agl",
        "",
        "**Method.** Each module is tokenized (Python's `tokenize`); comments, docstrings and blank lines are "
        "dropped; every identifier becomes `N`, every string (f-strings included) `S`, every number `0`; keywords "
        "and operators are kept. Tokens are joined per physical line, so `release_name(defn, name)` and "
        "`terraform_name(defn, name)` are the same line. The two modules of a sibling pair are then compared as "
        "sequences of such lines with `difflib.SequenceMatcher` (no junk heuristic): **alike** is the number of "
        "lines in its matching blocks, counted on each side, so the share is `2 * alike / (lines_helm + lines_tofu)` "
        f"(SequenceMatcher's ratio). Single matching lines are often just `)` or `return N`; **in runs** counts only "
        f"matching blocks of at least {RUN} consecutive lines, the part that is plainly copied. The measure is "
        "order-sensitive (code moved to another place in the file does not count), so it is a lower bound. "
        "The noise floor is the same measure between modules that are *not* siblings.",
        "",
        f"| pair | helm_agl lines | tofu_agl lines | alike | share alike | in runs ≥ {RUN} | share in runs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    every = pairs()
    for p in every:
        out.append(
            f"| `{p.a.name}` | {p.a.code_lines} | {p.b.code_lines} | {p.alike} | {pct(p.share(p.alike))} | "
            f"{p.in_runs} | {pct(p.share(p.in_runs))} |"
        )
    a_total = sum(p.a.code_lines for p in every)
    b_total = sum(p.b.code_lines for p in every)
    out.append(f"| **all pairs** | **{a_total}** | **{b_total}** | **{sum(p.alike for p in every)}** | "
               f"**{pct(combined(every))}** | **{sum(p.in_runs for p in every)}** | "
               f"**{pct(combined(every, runs=True))}** |")
    only = [m for m in serving("tofu_agl") if m.name not in paired_names()]
    only_helm = [m for m in serving("helm_agl") if m.name not in paired_names()]
    high = ", ".join(f"`{p.a.name}`" for p in every if p.share(p.alike) >= HIGH) or "none"
    low = ", ".join(f"`{p.a.name}`" for p in every if p.share(p.alike) < LOW) or "none"
    median, top = baseline()
    out += [
        "",
        f"Modules without a sibling (all of their lines are backend-specific): tofu_agl "
        f"{', '.join(f'`{m.name}` ({m.code_lines})' for m in only) or 'none'}; helm_agl "
        f"{', '.join(f'`{m.name}` ({m.code_lines})' for m in only_helm) or 'none'}.",
        f"Noise floor: non-sibling pairs across the stacks score a median of {pct(median)}, at most {pct(top)}.",
        "",
        f"Reading: the pairs at least {pct(HIGH)} alike ({high}) are mostly the same code with the "
        "backing object's name changed — a Draft 2 refactor writes them once, and their remainder becomes "
        "`Backend` hooks (section c). The pairs below "
        f"{pct(LOW)} ({low}) and the modules without a sibling are where the backends really differ: the "
        "code a `Backend` implementation holds.",
        "",
        f"Longest runs per pair (at most three of {RUN} lines or more; the refactor's shopping list). Each names "
        "the innermost def or class of the lines it covers, on both sides when they differ:",
        "",
    ]
    for p in every:
        runs_list = sorted((b for b in p.blocks if b[2] >= RUN), key=lambda b: (-b[2], b[0]))[:3]
        out.append(f"- `{p.a.name}`: {'; '.join(describe_run(p, b) for b in runs_list) or 'none'}")
    out.append("")
    return out


@dataclass(frozen=True)
class Method:
    name: str
    go: str
    helm: list[str]
    tofu: list[str]
    fit: str


def methods() -> list[Method]:
    hn, tt = helm_agl.names, tofu_agl.names
    hr, tr = helm_agl.reconciler, tofu_agl.reconciler
    return [
        Method(
            "Type",
            "Type() Type  // \"Helm\" | \"Terraform\"",
            [f"{const(helm_agl.definition, 'KIND')} = {value(helm_agl.definition, 'KIND')}"],
            [f"{const(tofu_agl.definition, 'KIND')} = {value(tofu_agl.definition, 'KIND')}"],
            "Implicit in Draft 1: the definition's CRD kind picks the process. The converter (d) makes it "
            "explicit as `spec.backend.type`.",
        ),
        Method(
            "TargetGVK",
            "TargetGVK() schema.GroupVersionKind",
            [f"{const(hn, 'HR_GVR')} = {value(hn, 'HR_GVR')}, {const(hn, 'HR_KIND')} = {value(hn, 'HR_KIND')}"],
            [f"{const(tofu_agl.app, 'TERRAFORMS')} from {const(tt, 'TF_GROUP')} = {value(tt, 'TF_GROUP')}, "
             f"{const(tt, 'TF_VERSION')} = {value(tt, 'TF_VERSION')}, {const(tt, 'TF_PLURAL')} = "
             f"{value(tt, 'TF_PLURAL')}; {const(tt, 'TF_KIND')} = {value(tt, 'TF_KIND')}"],
            "Fits. Both stacks need the plural (a resource, not a kind) for their clients, so a GVR or GVK plus "
            "plural.",
        ),
        Method(
            "TargetName",
            "TargetName(appName string, def *ApplicationDefinition) string",
            [ref(hn.backing_name), f"inverse {ref(hn.application_name)}"],
            [ref(tt.backing_name), f"inverse {ref(tt.application_name)}"],
            "Fits, but reads need the inverse (backing name → Application name) and the interface has none. Both "
            "stacks also select their objects by labels: "
            f"{where(hn.backing_selector)} / {where(tt.backing_selector)}, and test ownership with "
            f"{where(hn.is_application)} / {where(tt.is_application)}.",
        ),
        Method(
            "Build",
            "Build(ctx, app *Application, def *ApplicationDefinition) (client.Object, error)",
            [ref(helm_agl.build.build), f"after {ref(helm_agl.validate.validate_application)}"],
            [ref(tofu_agl.build.build), f"after {ref(tofu_agl.validate.validate_application)}"],
            "Fits in the middle, leaks at both ends. Both builders take the *live* object (`live`) on "
            "update to keep controller-owned fields and the served `group`; tofu_agl's asks `approval` for "
            "`spec.approvePlan`. Validation is per backend (Terraform variable names, unknown keys, the runner "
            "annotation) and the interface has no `Validate`.",
        ),
        Method(
            "ProjectStatus",
            "ProjectStatus(target client.Object) (ApplicationStatus, error)",
            [ref(helm_agl.project.to_application)],
            [ref(tofu_agl.project.to_application), f"+ {ref(tofu_agl.project.project_status)}",
             f"spec via {ref(tofu_agl.variables.unmarshal_vars)}"],
            "Too narrow: both stacks project the *whole* Application, and the spec read-back is as "
            "backend-specific as the status (Helm values minus `_` keys vs Terraform `vars` mapped back through "
            "the schema's naming). The status shapes differ too: "
            f"helm_agl `{sorted(_status_keys('helm'))}`, tofu_agl `{sorted(_status_keys('tofu'))}`.",
        ),
        Method(
            "Reconcile",
            "Reconcile(ctx, c client.Client, target client.Object, def *ApplicationDefinition) (updated bool, err)",
            [ref(helm_agl.rollout.rollout_patch),
             f"applied with retries by {where(hr.DefinitionReconciler._patch_one)}"],
            [ref(tofu_agl.rollout.rollout_patch),
             f"applied with retries by {where(tr.DefinitionReconciler._patch_one)}"],
            "Fits as a pure patch builder: the I/O and conflict retry around it are alike in both reconcilers and "
            "belong to one generic reconciler. But tofu_agl returns a second value — fields it must *not* roll "
            "out — that `(updated bool, err)` cannot carry.",
        ),
    ]


def _status_keys(which: str) -> set[str]:
    """Top-level Application status fields each stack publishes in its OpenAPI schema."""
    if which == "helm":
        info = helm_agl.registry.resource_info(helm_agl.definition.ApplicationDefinition.from_object(
            sample("postgres")))
    else:
        info = tofu_agl.registry.resource_info(
            tofu_agl.definition.TofuApplicationDefinition.from_object(sample("vpc")), tofu_agl.names.DEFAULT_GROUP)
    props: dict[str, Any] = info.schema["properties"]["status"]["properties"]
    return set(props)


@dataclass(frozen=True)
class Leak:
    title: str
    code: list[str]
    needs: str


def _leaks() -> list[Leak]:
    tt, st = tofu_agl.names, tofu_agl.storage.ApplicationStorage
    helm_status, tofu_status = _status_keys("helm"), _status_keys("tofu")
    helm_columns = [c.name for c in helm_agl.project.COLUMNS]
    tofu_columns = [c.name for c in tofu_agl.project.COLUMNS]
    return [
        Leak(
            "Plan approval",
            [ref(tofu_agl.approval.check_approval),
             f"called from {where(tofu_agl.validate.validate_application)} with the live Terraform from "
             f"{where(st.update)}",
             f"spec.approvePlan decided by {where(tofu_agl.approval.approve_plan)}",
             ref(tofu_agl.project.awaiting_approval),
             f"annotation {const(tt, 'APPROVE_ANNOTATION')} = {value(tt, 'APPROVE_ANNOTATION')}"],
            "a write-path hook that sees the request *and the live target* before Build, may reject (422) and "
            "feeds Build (`Admit(app, live) (extra, error)`), plus a user-visible Event. Helm has no such step.",
        ),
        Leak(
            "Outputs",
            [f"{where(tofu_agl.project.project_status)} (`status.outputs`, names only)",
             ref(tofu_agl.definition.TofuApplicationDefinition.render_outputs_secret_name),
             f"{where(tofu_agl.definition._outputs_problem)} (acceptance reason "
             f"{value(tofu_agl.definition, 'INVALID_PLACEHOLDER')})"],
            f"a per-backend status schema (tofu_agl publishes `{sorted(tofu_status - helm_status)}` that helm_agl "
            "does not) and per-backend definition checks; Draft 2's opaque `status.backend` RawExtension hides "
            "exactly the fields the dashboard wants.",
        ),
        Leak(
            "Runner identity",
            [f"{const(tt, 'RUNNER_SA_ANNOTATION')} = {value(tt, 'RUNNER_SA_ANNOTATION')}",
             f"checked in {where(tofu_agl.validate.validate_application)}",
             f"applied in {where(tofu_agl.build._runner_service_account)}",
             f"kept by {where(tofu_agl.rollout.rollout_patch)} only while `allowServiceAccountOverride` holds"],
            "a per-instance override read from the Application, validated against a definition flag: Build "
            "sees the Application so it can apply it, but the check needs the missing `Validate`.",
        ),
        Leak(
            "Extra columns",
            [f"{const(helm_agl.project, 'COLUMNS')} = `{helm_columns}` with {where(helm_agl.project.table_cells)}",
             f"{const(tofu_agl.project, 'COLUMNS')} = `{tofu_columns}` with {where(tofu_agl.project.table_cells)}",
             f"both registered through `resource_info` ({where(helm_agl.registry.resource_info)}, "
             f"{where(tofu_agl.registry.resource_info)})"],
            f"`Columns()` and `TableCells(app)` on the backend (tofu_agl adds "
            f"`{[c for c in tofu_columns if c not in helm_columns]}`): kubectl output is part of the UX.",
        ),
        Leak(
            "Pinned fields never rolled out",
            [f"{const(tofu_agl.rollout, 'PINNED_FIELDS')} = `{list(tofu_agl.rollout.PINNED_FIELDS)}` "
             f"(vs {const(tofu_agl.rollout, 'ROLLOUT_FIELDS')})",
             f"second result of {where(tofu_agl.rollout.rollout_patch)}", ref(tofu_agl.rollout.not_rolled_out),
             f"written by {where(tofu_agl.reconciler.DefinitionReconciler._write_not_rolled_out)} to the "
             "definition's `status.notRolledOut`"],
            "`Reconcile` must be able to report \"kept on purpose\" per instance, not just `updated bool`; the "
            "generic reconciler then owns the definition status.",
        ),
        Leak(
            "Definition acceptance",
            [f"{where(helm_agl.definition._intrinsic)} vs {where(tofu_agl.definition._intrinsic)} "
             f"(tofu_agl adds {value(tofu_agl.definition, 'INVALID_PLACEHOLDER')} and "
             f"{value(tofu_agl.definition, 'INVALID_VARIABLE_NAME')})",
             ref(tofu_agl.variables.naming_problems)],
            "`ValidateDefinition(def)` so a kind whose schema cannot become module variables is never served.",
        ),
        Leak(
            "Served group",
            [f"`group` parameter of {where(tofu_agl.build.build)}, {where(tofu_agl.project.to_application)}, "
             f"{where(tofu_agl.validate.validate_application)}", f"default {const(tt, 'DEFAULT_GROUP')} = "
             f"{value(tt, 'DEFAULT_GROUP')} vs fixed {const(helm_agl.names, 'GROUP')}"],
            "nothing once Draft 2 serves one group; until then the group is an input of Build and of the "
            "ownership labels.",
        ),
    ]


LEAKS: list[Leak] = _leaks()


def section_interface() -> list[str]:
    out = [
        "## (c) Draft 2's `Backend` interface against the real code",
        "",
        "The interface as the proposal states it (seed 000, \"Draft 2 — The interface\"), method by method, with "
        "the functions that do that job today in each package. Every reference below is resolved by import when "
        "this document is generated.",
        "",
    ]
    for m in methods():
        out += [f"### {m.name}", "", f"Draft 2: `{m.go}`", ""]
        out += [f"- helm_agl: {'; '.join(m.helm)}", f"- tofu_agl: {'; '.join(m.tofu)}", f"- Fit: {m.fit}", ""]
    out += ["### Where it leaks", "", "What the real code does that the six methods cannot express:", ""]
    for leak in LEAKS:
        out += [f"**{leak.title}.** Code: {'; '.join(leak.code)}.", "", f"Needs: {leak.needs}", ""]
    out += [
        "### The interface the code asks for",
        "",
        "Read off the two packages (Python notation; `JSON` is a plain object). The six proposed methods "
        "survive; the additions are the leaks above.",
        "",
        "```python",
        "class Backend(Protocol):",
        "    type: str                                            # Type",
        "    target: GVR                                          # TargetGVK (+ plural)",
        "    columns: tuple[Column, ...]                          # extra columns",
        "    status_schema: JSON                                  # published status (outputs, plan)",
        "    def validate_definition(self, defn) -> Verdict: ...  # acceptance beyond the shared rules",
        "    def target_name(self, defn, name: str) -> str: ...   # TargetName",
        "    def application_name(self, defn, target_name: str) -> str | None: ...",
        "    def owns(self, defn, target: JSON) -> bool: ...      # + a label selector for lists/watches",
        "    def validate(self, defn, app: JSON) -> None: ...     # 400/422 before any write",
        "    def admit(self, defn, app: JSON, live: JSON | None) -> JSON: ...  # plan approval",
        "    def build(self, defn, app: JSON, live: JSON | None, admitted: JSON) -> JSON: ...  # Build",
        "    def project(self, defn, target: JSON) -> JSON | None: ...  # ProjectStatus, whole Application",
        "    def table_cells(self, app: JSON) -> list[Any]: ...",
        "    def rollout_patch(self, defn, target: JSON) -> tuple[JSON | None, list[str]]: ...  # Reconcile",
        "```",
        "",
    ]
    return out


def section_converter() -> list[str]:
    vpc = sample("vpc")
    converted = tofu_agl.draft2.to_draft2(vpc)
    fields = list(vpc["spec"]["terraform"])
    carried = converted["spec"]["backend"]["terraform"]
    named_by_seed = ("sourceRef", "approvePlan", "destroyResourcesOnDeletion")
    assert all(carried[f] == vpc["spec"]["terraform"][f] for f in fields), "converter lost a field"
    return [
        "## (d) From TofuApplicationDefinition to a Draft 2 ApplicationDefinition",
        "",
        f"{ref(tofu_agl.draft2.to_draft2)} is a pure function; `python -m tofu_agl.draft2 FILE...` prints the "
        "converted YAML (`-` reads standard input). `spec.application` and `spec.dashboard` move unchanged, "
        "`spec.release` keeps `prefix` and `labels`, and the whole `spec.terraform` becomes "
        "`spec.backend.terraform` next to `spec.backend.type: Terraform`. Fields are copied as written (no "
        "defaults filled in); status and server-set metadata are dropped. Malformed input raises `ValueError` "
        "naming the field.",
        "",
        f"The seeds name {', '.join(f'`{f}`' for f in named_by_seed)} under Draft 2's `spec.backend.terraform`; "
        f"the other {len([f for f in fields if f not in named_by_seed])} fields of the sample keep their "
        "TofuApplicationDefinition names (a rename is for the Draft 2 review to decide): "
        f"{', '.join(f'`{f}`' for f in fields if f not in named_by_seed)}. The result has no `release.chartRef` "
        "(in Draft 2 the chart moves to `spec.backend.helm`), so it does not validate against today's "
        "ApplicationDefinition CRD — it is the shape Draft 2 would serve.",
        "",
        f"`deploy/samples/definitions/vpc.yaml` converted (all {len(fields)} terraform fields carried):",
        "",
        "```yaml",
        tofu_agl.draft2.dump([converted]).rstrip("\n"),
        "```",
        "",
    ]


def render() -> str:
    lines = [
        "# The hybrid path: evidence from the two stacks",
        "",
        "<!-- Generated by `python docs/hybrid_path.py` (`nox -s docs`); do not edit by hand. "
        "tests/unit/test_hybrid_path_doc.py fails when this file is stale. -->",
        "",
        "The proposal recommends the hybrid path: Draft 1 (two parallel stacks) as the PoC, then Draft 2 (one "
        "`Backend` interface) designed against the code Draft 1 produced (SPEC §9). This document is that "
        "comparison, measured on this repository's `helm_agl` and `tofu_agl`.",
        "",
    ]
    for section in (section_summary, section_modules, section_duplication, section_interface, section_converter):
        lines += section()
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
