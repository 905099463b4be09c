"""References to live code for the generated document: a rename breaks generation instead of the prose."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from docs.hybridpath.measure import ROOT


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
