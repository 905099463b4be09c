"""``get`` and ``list``: ask the storage, then render as the client negotiated (object, Table, or metadata only)."""

from __future__ import annotations

from aiohttp import web

from shared.api import table
from shared.api.rest import Storage
from shared.bodies import JSON
from shared.server.call import Call
from shared.server.requestinfo import Output
from shared.server.responses import json_response


async def get(call: Call) -> web.Response:
    obj = await call.storage.get(call.ctx, call.namespace, call.name)
    return json_response(_render_object(call.storage, obj, call.info.output))


async def list_(call: Call) -> web.Response:
    lst = await call.storage.list(call.ctx, call.info.target.namespace, call.info.list_options)
    return json_response(_render_list(call.storage, lst, call.info.output))


def _render_object(storage: Storage, obj: JSON, output: Output) -> JSON:
    rendering = output.rendering
    if rendering.mode == table.TABLE_MODE:
        return table.object_table(
            storage.info, obj, storage.table_cells, include=output.include, version=rendering.version
        )
    if rendering.mode == table.PARTIAL_MODE:
        return table.partial_metadata(obj, rendering.version)
    return obj


def _render_list(storage: Storage, lst: JSON, output: Output) -> JSON:
    rendering = output.rendering
    if rendering.mode == table.TABLE_MODE:
        return table.list_table(
            storage.info, lst, storage.table_cells, include=output.include, version=rendering.version
        )
    if rendering.mode == table.PARTIAL_MODE:
        return table.partial_metadata_list(lst, rendering.version)
    return lst
