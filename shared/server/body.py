"""Request bodies: read within kube-apiserver's size limit, decoded, and checked against the URL.

The limit is enforced while reading, not after, so an oversized upload costs at most the limit
in memory; decoding and the generic object checks live here so every write sees them the same.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import StreamReader

from shared.api import errors, gojson
from shared.api import patch as patching
from shared.api.rest import ResourceInfo
from shared.bodies import JSON, clone

#: kube-apiserver's limit for JSON request bodies.
MAX_BODY_BYTES = 3 * 1024 * 1024


class _Pairs(dict[str, Any]):
    """A decoded JSON object that remembers the keys it held more than once (the last value wins)."""

    duplicates: list[str]


def _pairs(items: list[tuple[str, Any]]) -> _Pairs:
    out = _Pairs()
    out.duplicates = []
    for key, value in items:
        if key in out and key not in out.duplicates:
            out.duplicates.append(key)
        out[key] = value
    return out


def duplicate_fields(value: Any, path: str = "") -> list[str]:
    """The duplicated fields of a decoded body, named as kube's strict decoder names them
    (``spec.replicas``), innermost objects first."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, child in value.items():
            found += duplicate_fields(child, f"{path}.{key}" if path else key)
        found += [f"{path}.{key}" if path else key for key in getattr(value, "duplicates", ())]
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += duplicate_fields(item, f"{path}[{index}]")
    return found


def json_duplicates(raw: bytes) -> list[str]:
    """The duplicated fields of a JSON document (none when it does not parse: that is reported elsewhere)."""
    try:
        return duplicate_fields(json.loads(raw, object_pairs_hook=_pairs))
    except (ValueError, UnicodeDecodeError):
        return []


class Body:
    """The body of one request, read on demand (reads and watches never touch it)."""

    def __init__(self, stream: StreamReader, declared_length: int | None, limit: int = MAX_BODY_BYTES) -> None:
        self._stream = stream
        self._declared = declared_length
        self._limit = limit
        #: Fields a JSON body held twice (``fieldValidation`` decides what that means).
        self.duplicates: list[str] = []

    async def read(self) -> bytes:
        """The raw bytes; 413 as soon as the declared or the actual size passes the limit."""
        if self._declared is not None and self._declared > self._limit:
            raise errors.too_large(self._limit)
        chunks: list[bytes] = []
        size = 0
        async for chunk in self._stream.iter_any():
            size += len(chunk)
            if size > self._limit:
                raise errors.too_large(self._limit)
            chunks.append(chunk)
        return b"".join(chunks)

    async def decode(self, media: str, kind: str) -> Any:
        """The body as data, from YAML when ``media`` says so and JSON otherwise: 400 when malformed, in
        kube-apiserver's words for a JSON body that should be a ``kind``."""
        raw = await self.read()
        if media == "application/yaml":
            try:
                return patching.load_yaml(raw)
            except ValueError as exc:
                raise errors.bad_request(f"the request body is not valid YAML: {exc}") from exc
        try:
            decoded = gojson.read_object(raw, object_pairs_hook=_pairs)
        except gojson.Unreadable as exc:
            raise errors.bad_request(f"the object provided is unrecognized (must be of type {kind}): {exc} "
                                     f"({summary(raw)})") from exc
        self.duplicates = duplicate_fields(decoded)
        return clone(decoded) if self.duplicates else decoded  # plain dicts again


def summary(raw: bytes, length: int = 30) -> str:
    """The start of a body kube-apiserver could not decode, as its error shows it: an object's text, else hex."""
    if not raw:
        return "<empty>"
    cut = " ..." if len(raw) > length else ""
    if raw[:1] == b"{":
        return raw[:length].decode(errors="replace") + cut
    return raw[:length].hex() + cut


#: The ObjectMeta fields a custom resource drops when they are empty (``omitempty`` collections).
_OPTIONAL_COLLECTIONS = ("labels", "annotations", "finalizers", "ownerReferences")


def check_object(obj: Any, info: ResourceInfo, namespace: str, name: str | None = None, *,
                 applied: bool = False) -> JSON:
    """Generic checks of a body: an object of this apiVersion/kind, in the URL's namespace.

    Sets ``metadata.namespace`` to the URL namespace, so storages always see it, and drops empty
    labels, annotations, finalizers and ownerReferences as a custom resource's metadata drops them on
    decoding (they are optional in ObjectMeta), so a write that empties them records no field
    for them in managedFields -- except in an apply configuration (``applied``), which keeps what it
    states.  With ``name``,
    the body's name must equal it (PUT and PATCH).  Another kind is refused as kube-apiserver refuses
    it for a custom resource: an apply patch (``applied``) cannot even be decoded (400), any other
    body fails validation (422 naming that kind).
    """
    if not isinstance(obj, dict):
        raise errors.bad_request("the request body must be a JSON or YAML object")
    api_version = obj.get("apiVersion")
    if api_version != info.api_version:
        raise errors.bad_request(
            f"the API version in the data ({api_version or ''}) does not match the expected API version "
            f"({info.api_version})"
        )
    kind = obj.get("kind")
    if not kind:
        raise errors.bad_request(f"the object provided is unrecognized (must be of type {info.kind}): "
                                 "Object 'Kind' is missing")
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    if kind != info.kind and applied:
        raise errors.bad_request(f"invalid object type: {api_version}, Kind={kind}")
    if kind != info.kind:
        raise errors.invalid(info.group, str(kind), str(meta.get("name") or ""),
                             [errors.field_cause("kind", f'Invalid value: "{kind}": must be {info.kind}')])
    body_ns = meta.get("namespace")
    if body_ns not in (None, "") and body_ns != namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    meta["namespace"] = namespace
    if not applied:
        for key in _OPTIONAL_COLLECTIONS:
            if key in meta and meta[key] in (None, {}, []):
                del meta[key]
    if name is not None and meta.get("name") != name:
        raise errors.bad_request(
            f"the name of the object ({meta.get('name') or ''}) does not match the name on the URL ({name})"
        )
    return obj
