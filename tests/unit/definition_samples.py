"""The sample definitions (deploy/samples/definitions) as plain objects, and variations of them, for both
stacks' definition tests: each parses the result with its own model."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parents[2] / "deploy" / "samples" / "definitions"


def load(name: str) -> dict[str, Any]:
    """The sample definition ``name`` as written."""
    obj: dict[str, Any] = yaml.safe_load((FIXTURES / f"{name}.yaml").read_text())
    return obj


def varied(obj: dict[str, Any], *, name: str | None = None, created: str | None = None,
           **changes: Any) -> dict[str, Any]:
    """A copy of ``obj`` renamed, re-dated and with each ``a__b__c=value`` set at ``a.b.c``."""
    obj = copy.deepcopy(obj)
    if name:
        obj["metadata"]["name"] = name
    if created:
        obj["metadata"]["creationTimestamp"] = created
    for path, value in changes.items():
        node = obj
        *parents, leaf = path.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return obj
