"""The house rules a reviewer would otherwise check by eye, read from the source tree (no cluster, nothing run).

- Small modules and short functions: no module of the services or of the local control plane over
  :data:`MAX_MODULE_LINES`, no function over :data:`MAX_FUNCTION_LINES`, except the data tables listed in
  :data:`DATA_TABLES` (a table is long because Kubernetes' schema is, not because it does many things).
- ``shared/`` is built in floors (docs/architecture.md, "The tree"): a module imports only from its own
  package and from the floors below it, so any one floor can be read, tested and replaced without the
  ones above.  ``shared`` knows no stack, and neither stack imports the other.
- The served group is chosen once, in each stack's ``app.py``, and passed down: a module that reached for
  the group constant instead would serve the default group whatever the service was told (the drift
  helm_agl once had).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The code the rules hold for: the two stacks, their toolkit and the local control plane.
CHECKED = ("helm_agl", "tofu_agl", "shared", "deploy/local/localcluster")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60
#: Functions that are data tables, by "path::name": long because what they list is long.
DATA_TABLES = frozenset({
    "shared/schema/meta_v1.py::schemas",  # the meta/v1 OpenAPI schemas, one literal per Kubernetes type
})

#: The floors of ``shared``, lowest first; the names are its top-level modules and packages.  Packages on one
#: floor do not import each other.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("bodies", "lazy_imports", "kept", "patterns"),  # JSON; the import hook; values kept per object; Go regexps
    ("api",),  # Kubernetes API conventions as plain data
    ("schema", "client"),  # definition schemas; the kube-apiserver client side
    ("security", "admission"),  # TLS, authentication, authorization; admission as kube-apiserver runs it
    ("server",),  # the aggregated API server's HTTP layer
    ("service",),  # one service process: flags, wiring, kopf
)
FLOOR_OF = {name: level for level, names in enumerate(FLOORS) for name in names}
STACKS = ("helm_agl", "tofu_agl")
#: Each stack's constant for the group it serves by default, and the one module that may name it.
GROUP_CONSTANTS = {"helm_agl": "GROUP", "tofu_agl": "DEFAULT_GROUP"}


def _modules(*roots: str) -> Iterator[Path]:
    for root in roots:
        yield from sorted((ROOT / root).rglob("*.py"))


def _dotted(path: Path) -> str:
    """``shared/api/rest.py`` -> ``shared.api.rest``; a package's ``__init__`` is the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, absolute module, names imported from it) of every import in ``path``, guarded ones included:
    an import under ``if TYPE_CHECKING`` is still a dependency of the design."""
    package = _dotted(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module, tuple(alias.name for alias in node.names)


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_no_module_is_over_the_limit() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _modules(*CHECKED)
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: split them by concern"


def test_no_function_is_over_the_limit() -> None:
    long: dict[str, int] = {}
    seen: set[str] = set()
    for path in _modules(*CHECKED):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                key = f"{path.relative_to(ROOT)}::{node.name}"
                seen.add(key)
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and key not in DATA_TABLES:
                    long[f"{key} (line {node.lineno})"] = lines
    assert long == {}, f"functions over {MAX_FUNCTION_LINES} lines"
    assert seen >= DATA_TABLES, f"exempt data tables that no longer exist: {sorted(DATA_TABLES - seen)}"


def test_every_part_of_shared_is_on_a_floor() -> None:
    parts = {p.stem for p in (ROOT / "shared").iterdir() if p.name != "__init__.py"
             and (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert parts == set(FLOOR_OF), "a part of shared/ with no floor (or a floor with no part): place it in FLOORS"


def test_shared_imports_point_down_only() -> None:
    upward = []
    for path in _modules("shared"):
        own = _dotted(path).split(".")[1] if _dotted(path) != "shared" else None
        for line, module, _ in _imports(path):
            parts = module.split(".")
            if parts[0] in (*STACKS, "localcluster", "tests", "docs"):
                upward.append(f"{_where(path, line)} imports {module}: shared knows no stack")
            elif (parts[0] == "shared" and len(parts) > 1 and own is not None and parts[1] != own
                  and FLOOR_OF[parts[1]] >= FLOOR_OF[own]):
                upward.append(f"{_where(path, line)}: shared.{own} (floor {FLOOR_OF[own]}) imports {module} "
                              f"(floor {FLOOR_OF[parts[1]]})")
    assert upward == [], "imports that do not point down:\n" + "\n".join(upward)


@pytest.mark.parametrize("stack", STACKS)
def test_a_stack_never_imports_the_other(stack: str) -> None:
    other = next(s for s in STACKS if s != stack)
    found = [f"{_where(p, line)} imports {module}" for p in _modules(stack)
             for line, module, _ in _imports(p) if module.split(".")[0] == other]
    assert found == []


@pytest.mark.parametrize("stack", STACKS)
def test_the_served_group_is_chosen_once_and_passed_down(stack: str) -> None:
    constant = GROUP_CONSTANTS[stack]
    chooser = ROOT / stack / "app.py"
    named = [_where(p, line) for p in _modules(stack) if p != chooser
             for line, module, names in _imports(p) if module == f"{stack}.names" and constant in names]
    assert named == [], f"{stack}.names.{constant} imported outside app.py: take the group as a parameter"
    assert any(constant in names for _, module, names in _imports(chooser) if module == f"{stack}.names")
