"""Import kubernetes_asyncio's generated client without its ~800 model and API modules.

``kubernetes_asyncio.client`` (and its ``models`` and ``api`` packages) re-export every generated
class from an ``__init__`` that imports them all: about 35 MiB of resident memory and most of a
second of start-up in every process that touches the client, kopf included (it imports two model
classes for ``isinstance`` checks).  The services use the client only for ``ApiClient``,
``Configuration`` and exceptions; they never ask it to build typed models.

:func:`install` makes those three packages lazy: a name is imported from its own module the first
time it is used, exactly as the package's ``__init__`` would have imported it, so every name keeps
working, only later.  It is written by hand because no library makes a third-party package lazy
(``importlib.util.LazyLoader`` loads the whole package as soon as a submodule is imported, and
lazy-loader libraries need the package itself to opt in).  A package whose ``__init__`` does more
than re-export names is loaded as usual.

The same call also hides the synchronous clients kopf imports when they are installed (``pykube`` and
``kubernetes``, for ``isinstance`` checks and for login handlers the services replace with their own): the
image has neither, but a test virtualenv has both for its tools, and importing them cost 0.5-0.8 s of every
start-up there.  Hidden, ``import pykube`` raises ImportError in the service process, which is what kopf
expects of a missing optional client.

A process opts in: importing this module (or ``shared``) installs nothing.  Each service's entry
point (``python -m helm_agl``, ``python -m tofu_agl``) calls :func:`install` before it imports the
runtime, its app or kopf, since a package imported before the call is loaded as usual.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: Packages whose ``__init__`` only re-exports generated classes: kubernetes_asyncio's, and those of
#: the synchronous ``kubernetes`` client, which kopf also imports when it is installed (it is not a
#: dependency of the services, but a test environment may have it).
LAZY_PACKAGES = frozenset({
    f"{client}.client{sub}" for client in ("kubernetes_asyncio", "kubernetes") for sub in ("", ".models", ".api")
})


def _reexports(source: str) -> tuple[dict[str, tuple[str, str]], dict[str, Any]] | None:
    """``name -> (module, attribute)`` and the literal assignments of an ``__init__`` that does
    nothing but ``from X import Y`` and assign literals; None when it does anything else."""
    names: dict[str, tuple[str, str]] = {}
    literals: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstring
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name == "*":
                    return None
                names[alias.asname or alias.name] = (node.module, alias.name)
            continue
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            try:
                literals[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                return None
            continue
        return None
    return names, literals


class _LazyPackageLoader(importlib.abc.Loader):
    """Executes a re-exporting ``__init__`` as a module ``__getattr__`` (PEP 562) instead of running it."""

    def __init__(self, real: importlib.machinery.SourceFileLoader) -> None:
        self._real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        source = self._real.get_source(module.__name__)
        parsed = _reexports(source) if source is not None else None
        if parsed is None:
            self._real.exec_module(module)
            return
        names, literals = parsed
        module.__dict__.update(literals)

        def __getattr__(name: str) -> Any:
            if name not in names:
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
            where, attribute = names[name]
            value = getattr(importlib.import_module(where), attribute)
            setattr(module, name, value)
            return value

        def __dir__() -> list[str]:
            return sorted(set(module.__dict__) | set(names))

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__dir__ = __dir__  # type: ignore[method-assign]


class _LazyPackageFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in LAZY_PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _LazyPackageLoader(spec.loader)
        return spec


#: Optional clients kopf imports if installed, which the services never use (see the module's docstring).
HIDDEN_PACKAGES = ("pykube", "kubernetes")


def install() -> None:
    """Make :data:`LAZY_PACKAGES` lazy and hide :data:`HIDDEN_PACKAGES` for this process (idempotent; no
    effect on packages imported already)."""
    for name in HIDDEN_PACKAGES:
        # A None entry in sys.modules is the import system's own "not importable": ImportError on import.
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    if not any(isinstance(finder, _LazyPackageFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _LazyPackageFinder())
