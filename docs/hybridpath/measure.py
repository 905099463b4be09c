"""How alike two modules are: every line reduced to its shape, then matched in order.

The measure behind section (b): a module is tokenized, comments, docstrings and blank lines are dropped,
identifiers, strings and numbers are abstracted (``N``, ``S``, ``0``) while keywords and operators stay, and two
modules are compared as sequences of such lines with ``difflib.SequenceMatcher``.  Written here rather than taken
from a clone detector because the document needs the exact counts per matching block (to name the functions a
run covers) and a noise floor computed the same way; the standard library does the matching.
"""

from __future__ import annotations

import ast
import difflib
import io
import keyword
import tokenize
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Matching runs at least this long count as copied code (shorter ones are mostly ``)``/``return``).
RUN = 4

_SKIPPED_TOKENS = {
    tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
    tokenize.ENCODING, tokenize.ENDMARKER,
}
# Python 3.12 splits f-strings into several tokens; 3.11 has one STRING token (getattr keeps both).
_FSTRING_START = getattr(tokenize, "FSTRING_START", -1)
_FSTRING_END = getattr(tokenize, "FSTRING_END", -1)


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
    """Measure ``ROOT/package/name.py`` (``package`` may be a nested path such as ``shared/api``)."""
    path = ROOT / package / f"{name}.py"
    source = path.read_text()
    tree = ast.parse(source)
    doc = ast.get_docstring(tree) or ""
    shapes, rows, doc_lines = shape_lines(source)
    return Module(package, name, path, doc.strip().splitlines()[0] if doc else "", doc_lines,
                  tuple(shapes), tuple(rows), _scopes(tree))


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
