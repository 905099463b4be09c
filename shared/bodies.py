"""Plain JSON bodies as the kube client and the HTTP layer hand them around.

Kubernetes objects travel through both stacks as decoded JSON (dicts, lists, scalars), never as
generated model classes: definitions arrive at run time, so there is no class to generate.  This
module names that shape once, the way kopf's ``structs/bodies.py`` does for its handlers.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson

#: A decoded JSON object: a Kubernetes object, a Status, a patch, a schema node.
JSON = dict[str, Any]


class Encoded:
    """A JSON value kept encoded: :func:`dumps` writes its bytes as they are (an ``orjson.Fragment``).

    A list answered from a cache of encoded objects then costs a copy of bytes per item instead of a
    decode, a projection and an encode (see :mod:`shared.client.projections`).
    """

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def decoded(self) -> Any:
        """A fresh decoded copy, which the caller may mutate."""
        return loads(self.raw)


def _fragment(value: Any) -> orjson.Fragment:
    if isinstance(value, Encoded):
        return orjson.Fragment(value.raw)
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, with orjson (several times faster than the json module on large lists); the json
    module only for what orjson refuses (integers beyond 64 bits, which kube-apiserver accepts in a user's spec).
    What the server answers, what the kube client sends and what the informer keeps are all encoded here.
    :class:`Encoded` values are written as they are."""
    try:
        return orjson.dumps(value, default=_fragment)
    except TypeError:
        return json.dumps(_decoded(value), separators=(",", ":"), ensure_ascii=False).encode()


def loads(raw: bytes | str) -> Any:
    """JSON with orjson, or the json module for what orjson refuses (integers beyond 64 bits in a user's
    spec), so that nothing kube-apiserver accepted becomes an error here."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def plain(value: Any) -> Any:
    """``value`` itself, or a decoded copy when it is :class:`Encoded`: for a reader of one item that may
    come encoded (a list's item, a watch-list's initial event) and needs the object."""
    return value.decoded() if isinstance(value, Encoded) else value


def _decoded(value: Any) -> Any:
    """``value`` with every :class:`Encoded` in it decoded, wherever it stands (the json module's fallback)."""
    if isinstance(value, Encoded):
        return value.decoded()
    if isinstance(value, dict):
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def clone(value: Any) -> Any:
    """Deep copy of JSON data; several times faster than ``copy.deepcopy`` (no memo)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a large answer is decoded and consumed.

    Decoded JSON holds no reference cycles, so reference counting frees all of it; the collector has nothing to
    find there.  Yet a page of 500 Terraforms makes about 30 000 dicts and lists at once, which trigger dozens of
    young collections and, as they survive those, full ones that traverse every object of the process.  An
    informer's sync of 10 000 Terraforms from kube-apiserver took 2.4-3.0 s of CPU with the collector running
    and 1.8-2.2 s with it paused per page (issue 26, round 18 of the performance notes).  Only for code that does
    not await: nothing else runs while the collector is off.  Nested pauses keep it off until the outermost ends.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
