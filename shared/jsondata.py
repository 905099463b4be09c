"""Helpers for plain JSON data (dicts, lists, scalars) as the kube client returns it."""

from __future__ import annotations

from typing import Any


def clone(value: Any) -> Any:
    """Deep copy of JSON data; several times faster than ``copy.deepcopy`` (no memo)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value
