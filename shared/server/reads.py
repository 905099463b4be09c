"""``get`` and ``list``: ask the storage, then render as the client negotiated (object, Table, or metadata only)."""

from __future__ import annotations

from aiohttp import web

from shared.api import table
from shared.api.rest import Storage
from shared.bodies import JSON, Encoded, plain
from shared.server.call import Call
from shared.server.requestinfo import Output
from shared.server.responses import json_response, list_response


async def get(call: Call) -> web.Response:
    obj = await call.storage.get(call.ctx, call.namespace, call.name, call.info.list_options.resource_version)
    return json_response(_render(call.storage, obj, call.info.output, many=False))


async def list_(call: Call) -> web.Response:
    lst = await call.storage.list(call.ctx, call.info.target.namespace, call.info.list_options)
    return list_response(_render(call.storage, lst, call.info.output, many=True))


def _render(storage: Storage, body: JSON | Encoded, output: Output, *, many: bool) -> JSON | Encoded:
    """``body`` (one object, or a list when ``many``) in the negotiated form; in JSON as it came, encoded
    or not."""
    rendering = output.rendering
    if rendering.mode == table.JSON_MODE:
        return body
    # The object, or a list's items, may still be encoded (shared.client.projections); a Table reads them.
    decoded: JSON = plain(body)
    if many:
        decoded = {**decoded, "items": [plain(item) for item in decoded.get("items") or []]}
    if rendering.mode == table.TABLE_MODE:
        to_table = table.list_table if many else table.object_table
        return to_table(storage.info, decoded, storage.table_cells, include=output.include,
                        version=rendering.version)
    if rendering.mode == table.PARTIAL_MODE:
        partial = table.partial_metadata_list if many else table.partial_metadata
        return partial(decoded, rendering.version)
    return decoded
