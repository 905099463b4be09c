"""Field paths, as kube-apiserver prints them in causes (``spec.items[0].name``, ``spec.labels[app]``),
and the ``fieldPath`` of a rule (``.a.b``, ``['a.b']``) resolved against the schema.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Child:
    """An object property: ``.name``."""

    name: str


@dataclass(frozen=True)
class Index:
    """A list item: ``[3]``."""

    index: int


@dataclass(frozen=True)
class Key:
    """A map entry (``additionalProperties``): ``[key]``."""

    key: str


Segment = Child | Index | Key

_STEP = re.compile(r"\.([a-zA-Z_][a-zA-Z0-9_-]*)|\['((?:[^'\\]|\\.)*)'\]")


def render(base: str, segments: tuple[Segment, ...]) -> str:
    out = base
    for segment in segments:
        if isinstance(segment, Child):
            out = f"{out}.{segment.name}" if out else segment.name
        elif isinstance(segment, Index):
            out = f"{out}[{segment.index}]"
        else:
            out = f"{out}[{segment.key}]"
    return out


def resolve_rule_field_path(schema: JSON, text: str) -> tuple[Segment, ...]:
    """The segments a rule's ``fieldPath`` names below ``schema``; ValueError when it names nothing.

    As in kube-apiserver, the path must start with a dot or a bracket, may step into object
    properties and map entries, and cannot index into a list.
    """
    segments: list[Segment] = []
    node: Any = schema
    position = 0
    while position < len(text):
        step = _STEP.match(text, position)
        if step is None:
            raise ValueError(f"fieldPath must be a valid path: {text}")
        name = step.group(1) if step.group(1) is not None else re.sub(r"\\(.)", r"\1", step.group(2))
        position = step.end()
        properties = node.get("properties") if isinstance(node, dict) else None
        values = node.get("additionalProperties") if isinstance(node, dict) else None
        if isinstance(properties, dict) and name in properties:
            segments.append(Child(name))
            node = properties[name]
        elif isinstance(values, dict):
            segments.append(Key(name))
            node = values
        else:
            raise ValueError(f"fieldPath must be a valid path: does not refer to a valid field: {text}")
    if not segments:
        raise ValueError(f"fieldPath must be a valid path: {text}")
    return tuple(segments)
