"""What a create records depends on the shape of the object, not on its values: kept per shape.

The fields a create's manager owns are every node of the new object, and the typed walk decides what a node
is from the schema and the value's JSON type alone (a map, a list, a scalar; an empty container is a leaf).
Scalar values outside lists never change the result; list items can (a set's values, an associative list's
keys), so lists are part of the shape as they are.  The walk and the ``FieldsV1`` rendering were most of the
field manager's cost on a create (round 27 of docs/design/perf/README.md), and creates of one kind mostly
repeat a few shapes.  No library keys a cache by JSON shape, hence this module.
"""

from __future__ import annotations

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
