"""What a create records depends on the shape of the object, not on its values: kept per shape.

The fields a create's manager owns are every node of the new object, and the typed walk decides what a node
is from the schema and the value's JSON type alone (a map, a list, a scalar; an empty container is a leaf).
Scalar values outside lists never change the result; list items can (a set's values, an associative list's
keys), so lists are part of the shape as they are.  The walk and the ``FieldsV1`` rendering were most of the
field manager's cost on a create (round 27 of docs/design/perf/README.md), and creates of one kind mostly
repeat a few shapes.  No library keys a cache by JSON shape, hence this module.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson

#: Shapes kept per process; a kind's creates repeat few.
MAX_SHAPES = 512


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _shape(child) for key, child in value.items()}
    if isinstance(value, list):
        return value
    return type(value).__name__  # str, int, float, bool, NoneType (the walk reads only: not a map, not a list)


def shape_key(value: Any) -> bytes | None:
    """``value`` with every scalar outside a list replaced by its type; None when it cannot be encoded."""
    try:
        return orjson.dumps(_shape(value))
    except TypeError:  # an integer beyond 64 bits, or a key that is not a string: not cached
        return None


class ShapeCache:
    """Encoded results per (owner, shape); the owner is kept too, so that its id() is not reused."""

    def __init__(self, size: int = MAX_SHAPES) -> None:
        self._size = size
        self._kept: OrderedDict[tuple[int, str, bytes], tuple[object, bytes]] = OrderedDict()

    def get(self, owner: object, name: str, shape: bytes) -> bytes | None:
        hit = self._kept.get((id(owner), name, shape))
        if hit is None or hit[0] is not owner:
            return None
        self._kept.move_to_end((id(owner), name, shape))
        return hit[1]

    def put(self, owner: object, name: str, shape: bytes, encoded: bytes) -> None:
        self._kept[(id(owner), name, shape)] = (owner, encoded)
        while len(self._kept) > self._size:
            self._kept.popitem(last=False)
