"""A DELETE's body, decoded as kube-apiserver decodes a ``DeleteOptions``, with Go's ``encoding/json`` errors.

kube-apiserver reads the body's ``apiVersion`` and ``kind`` first (a body that is no JSON, no object, or whose ``kind``
is no string, fails there, "couldn't get version/kind"; a kind other than DeleteOptions is not registered), then decodes
it into its ``DeleteOptions`` struct: a field of the wrong JSON type is Go's ``UnmarshalTypeError`` (the first one
in the document; decoding goes on past it, a ``null`` leaves a field unset, unknown fields are ignored), all a 400.
No Python library writes Go's decoding errors, so the few types of ``DeleteOptions`` are written down here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shared.api import errors, goformat, gojson

#: Each field of ``metav1.DeleteOptions`` a client may send: its Go type as ``encoding/json`` names it.
_FIELDS = {"apiVersion": "string", "kind": "string", "gracePeriodSeconds": "int64",
           "preconditions": "v1.Preconditions", "orphanDependents": "bool",
           "propagationPolicy": "v1.DeletionPropagation", "dryRun": "[]string",
           "ignoreStoreReadErrorWithClusterBreakingPotential": "bool"}
_PRECONDITIONS = {"uid": "types.UID", "resourceVersion": "string"}
_INT64 = range(-(2**63), 2**63)


class _Number(float):
    """A JSON number that is no integer, with its text as written (Go's errors quote it)."""

    text: str

    def __new__(cls, text: str) -> _Number:
        number = super().__new__(cls, text)
        number.text = text
        return number


def decode(raw: bytes) -> dict[str, Any]:
    """The DeleteOptions a DELETE's body states (``null``: none), or kube-apiserver's 400 for it."""
    try:
        stated: dict[str, Any] | None = gojson.read_object(raw, parse_float=_Number)
    except gojson.Unreadable as exc:
        raise errors.bad_request(str(exc)) from exc
    if stated is None:
        return {}
    kind = stated.get("kind")
    if kind is not None and kind != "DeleteOptions":
        version = stated.get("apiVersion") or "meta.k8s.io/v1"
        raise errors.bad_request(f"no kind {goformat.quote(kind)} is registered for version "
                                 f'{goformat.quote(version)} in scheme "pkg/runtime/scheme.go:111"')
    if (mistake := next(_type_errors(stated), None)) is not None:
        raise errors.bad_request(mistake)
    if isinstance(dry_run := stated.get("dryRun"), list):
        stated["dryRun"] = ["" if item is None else item for item in dry_run]
    return stated


def _type_errors(stated: dict[str, Any]) -> Iterator[str]:
    """Go's ``UnmarshalTypeError`` for each field of the wrong type, in the document's order."""
    for key, value in stated.items():
        go_type = _FIELDS.get(key)
        if go_type is None or value is None:
            continue
        if key == "preconditions" and isinstance(value, dict):
            for inner, inner_value in value.items():
                if inner in _PRECONDITIONS and inner_value is not None and not isinstance(inner_value, str):
                    yield _mistake(inner_value, "Preconditions", f"preconditions.{inner}", _PRECONDITIONS[inner])
        elif key == "dryRun" and isinstance(value, list):
            yield from (_mistake(item, "DeleteOptions", key, "string") for item in value
                        if item is not None and not isinstance(item, str))
        elif not _fits(value, go_type):
            yield _mistake(value, "DeleteOptions", key, go_type)


def _fits(value: object, go_type: str) -> bool:
    if go_type == "int64":
        return isinstance(value, int) and not isinstance(value, bool) and value in _INT64
    if go_type == "bool":
        return isinstance(value, bool)
    if go_type == "[]string":
        return isinstance(value, list)
    if go_type == "v1.Preconditions":
        return isinstance(value, dict)
    return isinstance(value, str)


def _mistake(value: object, struct: str, field: str, go_type: str) -> str:
    shown = gojson.json_type(value)
    if go_type == "int64" and shown == "number":
        # A number that is no int64 is quoted as written.
        shown = f"number {value.text if isinstance(value, _Number) else value}"
    return f"json: cannot unmarshal {shown} into Go struct field {struct}.{field} of type {go_type}"

