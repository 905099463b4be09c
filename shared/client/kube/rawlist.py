"""A list's page decoded only as deep as a cache needs: each item's top-level fields are left encoded.

A cache keeps every listed object encoded (and compressed).  Decoding each item of a page into Python objects, to
encode most of it again and free the rest, was 0.4 s of every second a service spent starting (round 23 of the
performance notes).  msgspec decodes a page down to its items' fields as ``msgspec.Raw`` slices of the page,
building none of their values, and writes such slices back as they are: the cache decodes an item's metadata
and, where it keeps part of the spec, the spec's field names, nothing else.  The rest of the client decodes with
orjson (:func:`shared.bodies.loads`); this is only the list path of the caches.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shared.api import errors
from shared.bodies import JSON

#: An object's top-level fields, each still encoded as it was listed.
RawObject = dict[str, msgspec.Raw]


class _Page(msgspec.Struct):
    kind: str = ""
    apiVersion: str = ""
    metadata: dict[str, Any] | None = None
    items: list[RawObject] | None = None


_PAGE = msgspec.json.Decoder(_Page)
_FIELDS = msgspec.json.Decoder(RawObject)
_TEXT = msgspec.json.Decoder(str)
_ENCODER = msgspec.json.Encoder()


def decode_page(raw: bytes, method: str, path: str) -> JSON:
    """A list's page: ``kind``, ``apiVersion`` and ``metadata`` decoded, ``items`` as :data:`RawObject` each."""
    if not raw:
        return {}
    try:
        page = _PAGE.decode(raw)
    except msgspec.DecodeError as exc:
        raise errors.internal(f"kube-apiserver answered {method} {path} with malformed JSON: {raw[:200]!r}") from exc
    return {"kind": page.kind, "apiVersion": page.apiVersion, "metadata": page.metadata or {},
            "items": page.items or []}


def fields(raw: msgspec.Raw | None) -> RawObject:
    """The fields of an encoded object, each left encoded; none when ``raw`` is absent or no object."""
    if raw is None:
        return {}
    try:
        return _FIELDS.decode(raw)
    except msgspec.DecodeError:
        return {}


def text(raw: msgspec.Raw | None) -> str:
    """An encoded string's value; "" when ``raw`` is absent or no string."""
    if raw is None:
        return ""
    try:
        return _TEXT.decode(raw)
    except msgspec.DecodeError:
        return ""


def encoded(value: Any) -> msgspec.Raw:
    """``value`` encoded, to stand among fields left encoded."""
    return msgspec.Raw(_ENCODER.encode(value))


def encode(obj: RawObject) -> bytes:
    """The JSON of an object whose fields are encoded already: each written as it is."""
    return _ENCODER.encode(obj)
