"""Content negotiation for reads, and server-side printing (``meta.k8s.io`` Table).

``kubectl get`` asks for ``application/json;as=Table;v=v1;g=meta.k8s.io`` (then v1beta1, then
plain JSON) and prints whatever columns the server defines; garbage collectors and other
metadata-only clients ask for ``PartialObjectMetadata(List)``.  Any Accept header that also
allows plain JSON must get plain JSON rather than 406, because that is the fallback every Go
client lists last.
"""

from __future__ import annotations

import datetime
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shared.api import errors
from shared.api.rest import Column, ResourceInfo
from shared.bodies import JSON, plain

log = logging.getLogger(__name__)


JSON_MODE = "json"
TABLE_MODE = "table"
PARTIAL_MODE = "partial"

_META_VERSIONS = ("v1", "v1beta1")


@dataclass(frozen=True)
class Rendering:
    """How to render a read: plain objects, a Table, or PartialObjectMetadata; ``version`` of meta.k8s.io."""

    mode: str = JSON_MODE
    version: str = "v1"


def _media_ranges(accept: str) -> list[tuple[float, int, str, dict[str, str]]]:
    out = []
    for index, part in enumerate(accept.split(",")):
        pieces = [p.strip() for p in part.split(";")]
        media = pieces[0].lower()
        if not media:
            continue
        params: dict[str, str] = {}
        for piece in pieces[1:]:
            key, _, value = piece.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 0.0
        out.append((q, index, media, params))
    # Highest q first; the client's order breaks ties.
    out.sort(key=lambda r: (-r[0], r[1]))
    return out


@functools.lru_cache(maxsize=256)
def negotiate(accept: str | None) -> Rendering:
    """Pick the rendering for an Accept header; 406 only when nothing in it is servable.  Clients send a few
    Accept headers over and over (kubectl's for Tables, client-go's for JSON): each is parsed once."""
    if accept is None or accept.strip() == "":
        return Rendering()
    for q, _, media, params in _media_ranges(accept):
        if q <= 0:
            continue
        if media in ("*/*", "application/*"):
            return Rendering()
        if media != "application/json":
            continue
        as_ = params.get("as")
        if as_ is None:
            return Rendering()
        if params.get("g") != "meta.k8s.io" or params.get("v") not in _META_VERSIONS:
            continue
        if as_ == "Table":
            return Rendering(TABLE_MODE, params["v"])
        if as_ in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            return Rendering(PARTIAL_MODE, params["v"])
    raise errors.not_acceptable(
        f"only the following media types are accepted: application/json, "
        f"application/json;as=Table;v=v1;g=meta.k8s.io (got {accept!r})"
    )


# --- ages -------------------------------------------------------------------------------------


def parse_timestamp(value: str) -> datetime.datetime | None:
    """Parse an RFC 3339 timestamp as Kubernetes writes them; None if it is not one."""
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def human_duration(seconds: float) -> str:
    """Format an age the way kubectl does: 45s, 3m20s, 15m, 5h10m, 3d4h, 20d, 2y30d ..."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def age(obj: JSON, now: datetime.datetime | None = None) -> str:
    """The AGE cell of an object: time since ``metadata.creationTimestamp``, or ``<unknown>``."""
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    created = parse_timestamp(raw) if isinstance(raw, str) else None
    if created is None:
        return "<unknown>"
    current = now or datetime.datetime.now(datetime.UTC)
    return human_duration((current - created).total_seconds())


# --- tables -----------------------------------------------------------------------------------

NAME_COLUMN = Column("NAME", "string", "Name must be unique within a namespace.", "name")
AGE_COLUMN = Column("AGE", "date", "Time since the object was created.")


def columns(info: ResourceInfo) -> list[Column]:
    """The Table columns of a resource.

    ``info.columns`` in order; NAME is prepended when the first column is not NAME, and a
    resource without columns gets NAME and AGE.
    """
    declared = list(info.columns)
    if not declared:
        return [NAME_COLUMN, AGE_COLUMN]
    if declared[0].name.upper() != "NAME":
        return [NAME_COLUMN, *declared]
    return declared


def column_definitions(info: ResourceInfo) -> list[JSON]:
    return [
        {
            "name": c.name,
            "type": c.type,
            "format": c.format,
            "description": c.description,
            "priority": c.priority,
        }
        for c in columns(info)
    ]


def cells(
    info: ResourceInfo,
    obj: JSON,
    table_cells: Callable[[JSON], Sequence[Any]],
    now: datetime.datetime | None = None,
) -> list[Any]:
    """One row's cells, aligned with :func:`columns`.

    ``table_cells`` (the storage's) returns one cell per ``info.columns`` entry.  The NAME cell
    (first column) and every column called AGE are filled here from the object itself, so every
    kind renders them identically whatever the storage put there.
    """
    name = (obj.get("metadata") or {}).get("name", "")
    declared = list(info.columns)
    if not declared:
        return [name, age(obj, now)]
    given = list(table_cells(obj))
    if len(given) != len(declared):
        log.warning("table_cells returned %d cells for %d columns of %s", len(given), len(declared), info.plural)
        given = (given + [None] * len(declared))[: len(declared)]
    out: list[Any] = []
    for index, (column, value) in enumerate(zip(declared, given, strict=True)):
        if index == 0 and column.name.upper() == "NAME":
            out.append(name)
        elif column.name.upper() == "AGE":
            out.append(age(obj, now))
        else:
            out.append(value)
    if declared[0].name.upper() != "NAME":
        out.insert(0, name)
    return out


def partial_metadata(obj: JSON, version: str = "v1") -> JSON:
    """``PartialObjectMetadata`` of an object: its type and metadata, nothing else."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": obj.get("metadata") or {},
    }


def partial_metadata_list(lst: JSON, version: str = "v1") -> JSON:
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": lst.get("metadata") or {},
        "items": [partial_metadata(item, version) for item in lst.get("items") or []],
    }


INCLUDE_NONE = "None"
INCLUDE_METADATA = "Metadata"
INCLUDE_OBJECT = "Object"


def parse_include_object(value: str | None) -> str:
    """The ``includeObject`` query parameter (default Metadata); anything else is a 400."""
    if value is None or value == "":
        return INCLUDE_METADATA
    if value not in (INCLUDE_NONE, INCLUDE_METADATA, INCLUDE_OBJECT):
        raise errors.bad_request(
            f'includeObject: Unsupported value: "{value}": supported values: "None", "Metadata", "Object"'
        )
    return value


def _row(
    info: ResourceInfo,
    obj: JSON,
    table_cells: Callable[[JSON], Sequence[Any]],
    include: str,
    version: str,
    now: datetime.datetime | None,
) -> JSON:
    row: JSON = {"cells": cells(info, obj, table_cells, now)}
    if include == INCLUDE_OBJECT:
        row["object"] = obj
    elif include == INCLUDE_METADATA:
        row["object"] = partial_metadata(obj, version)
    return row


def _list_meta(meta: JSON) -> JSON:
    return {k: meta[k] for k in ("resourceVersion", "continue", "remainingItemCount") if meta.get(k) not in (None, "")}


def table(
    info: ResourceInfo,
    objects: Sequence[JSON],
    table_cells: Callable[[JSON], Sequence[Any]],
    *,
    list_metadata: JSON | None = None,
    include: str = INCLUDE_METADATA,
    version: str = "v1",
    headers: bool = True,
    now: datetime.datetime | None = None,
) -> JSON:
    """A ``meta.k8s.io`` Table of ``objects``.

    ``list_metadata`` (resourceVersion, continue) is copied so chunked ``kubectl get`` can ask for
    the next page and ``kubectl get -w`` knows where to start watching.  ``headers=False`` leaves
    columnDefinitions empty, which kubectl takes as "same columns as before" in watch streams.
    """
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": _list_meta(list_metadata or {}),
        "columnDefinitions": column_definitions(info) if headers else [],
        "rows": [_row(info, obj, table_cells, include, version, now) for obj in objects],
    }


def object_table(
    info: ResourceInfo,
    obj: JSON,
    table_cells: Callable[[JSON], Sequence[Any]],
    *,
    include: str = INCLUDE_METADATA,
    version: str = "v1",
    headers: bool = True,
    now: datetime.datetime | None = None,
) -> JSON:
    """A Table with the single row of ``obj`` (a GET of one object, or one watch event)."""
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return table(
        info,
        [obj],
        table_cells,
        list_metadata={"resourceVersion": rv} if rv else None,
        include=include,
        version=version,
        headers=headers,
        now=now,
    )


def list_table(
    info: ResourceInfo,
    lst: JSON,
    table_cells: Callable[[JSON], Sequence[Any]],
    *,
    include: str = INCLUDE_METADATA,
    version: str = "v1",
    now: datetime.datetime | None = None,
) -> JSON:
    """A Table of a ``<Kind>List``, keeping its resourceVersion and continue token."""
    return table(
        info,
        list(lst.get("items") or []),
        table_cells,
        list_metadata=lst.get("metadata") or {},
        include=include,
        version=version,
        now=now,
    )


def watch_event(
    info: ResourceInfo,
    event: JSON,
    table_cells: Callable[[JSON], Sequence[Any]],
    rendering: Rendering,
    *,
    include: str = INCLUDE_METADATA,
    headers: bool = True,
) -> JSON:
    """Convert one watch event for the negotiated rendering.

    ERROR events carry a Status and pass through untouched; a BOOKMARK becomes a row-less Table
    (or PartialObjectMetadata) carrying the resourceVersion.
    """
    kind = event.get("type")
    if rendering.mode == JSON_MODE or kind == "ERROR":
        return event
    obj = plain(event.get("object") or {})  # a watch-list's initial events may still be encoded
    if rendering.mode == PARTIAL_MODE:
        return {"type": kind, "object": partial_metadata(obj, rendering.version)}
    if kind == "BOOKMARK":
        return {"type": kind, "object": _bookmark_table(info, obj, include, rendering.version)}
    return {
        "type": kind,
        "object": object_table(info, obj, table_cells, include=include, version=rendering.version, headers=headers),
    }


def _bookmark_table(info: ResourceInfo, bookmark: JSON, include: str, version: str) -> JSON:
    """A BOOKMARK as kube-apiserver renders one as a Table: no column definitions and one row whose cells
    are empty (a bookmark has no name and no columns) and whose object carries the bookmark's metadata even
    with ``includeObject=None``, so the resourceVersion and a watch-list's ``k8s.io/initial-events-end``
    annotation reach the client."""
    row: JSON = {"cells": [""] + [None] * (len(columns(info)) - 1),
                 "object": bookmark if include == INCLUDE_OBJECT else partial_metadata(bookmark, version)}
    rv = (bookmark.get("metadata") or {}).get("resourceVersion")
    return {"kind": "Table", "apiVersion": f"meta.k8s.io/{version}",
            "metadata": _list_meta({"resourceVersion": rv}), "columnDefinitions": None, "rows": [row]}
