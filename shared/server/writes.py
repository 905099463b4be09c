"""``create``, ``update``, ``patch`` and ``delete``: the generic half of every write.

Bodies are checked against the URL before a storage sees them; a patch is applied here, on the
object as read, and written back with that object's resourceVersion so a concurrent writer causes a
conflict (retried, as kube does) rather than a lost update; delete preconditions are checked here.
The storage admits every write (:mod:`shared.server.admission`); the warnings of its policies are
sent back here as ``Warning`` headers.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from aiohttp import web

from shared.api import errors
from shared.api import patch as patching
from shared.bodies import JSON
from shared.server.admission import collect_warnings, warning_header
from shared.server.body import check_object
from shared.server.call import Call
from shared.server.options import write_options
from shared.server.responses import json_response

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[web.Response]])


def _with_warnings(handler: Handler) -> Handler:
    """Send the admission warnings raised while ``handler`` ran as ``Warning`` headers, as kubectl
    expects them (a retried patch may meet the same warning twice: it is sent once)."""

    @functools.wraps(handler)
    async def handle(*args: Any) -> web.Response:
        with collect_warnings() as warnings:
            response = await handler(*args)
        for text in dict.fromkeys(warnings):
            response.headers.add("Warning", warning_header(text))
        return response

    return cast(Handler, handle)


@_with_warnings
async def create(call: Call) -> web.Response:
    body = check_object(await call.body.decode(call.info.body_media), call.storage.info, call.namespace)
    return json_response(await call.storage.create(call.ctx, call.namespace, body, call.info.write_options), 201)


@_with_warnings
async def update(call: Call) -> web.Response:
    obj = await call.body.decode(call.info.body_media)
    body = check_object(obj, call.storage.info, call.namespace, call.name)
    if not body["metadata"].get("resourceVersion"):
        # Custom resources allow no unconditional update; kube-apiserver says so once it found the object.
        await call.storage.get(call.ctx, call.namespace, call.name)
        raise errors.invalid(call.storage.info.group, call.storage.info.plural, call.name, [
            errors.field_cause("metadata.resourceVersion", "Invalid value: 0: must be specified for an update")])
    return json_response(await call.storage.update(call.ctx, call.namespace, call.name, body, call.info.write_options))


@_with_warnings
async def patch(call: Call, conflict_retries: int) -> web.Response:
    """Apply the patch to the object as read; re-read and re-apply on a conflict the client did not ask for."""
    kind = call.info.patch_type
    assert kind is not None
    doc = patching.decode_patch(kind, await call.body.read())
    if kind is patching.PatchType.APPLY:
        check_object(doc, call.storage.info, call.namespace, call.name, applied=True)
    pinned = patching.states_resource_version(kind, doc)
    for attempt in range(conflict_retries + 1):
        last = attempt == conflict_retries
        current = await _current(call, kind)
        try:
            if current is None:
                return await _create_applied(call, doc)
            return await _update_patched(call, kind, current, doc, pinned)
        except errors.ApiError as err:
            created_meanwhile = current is None and err.reason == "AlreadyExists"
            modified_meanwhile = current is not None and err.code == 409 and err.reason == "Conflict" and not pinned
            if (created_meanwhile or modified_meanwhile) and not last:
                continue  # apply onto theirs / re-read and re-apply, as kube does
            raise
    raise AssertionError("unreachable")  # pragma: no cover


async def _current(call: Call, kind: patching.PatchType) -> JSON | None:
    """The object to patch; None when it does not exist and the patch is an apply (which then creates it)."""
    try:
        return await call.storage.get(call.ctx, call.namespace, call.name)
    except errors.ApiError as err:
        if err.code != 404 or kind is not patching.PatchType.APPLY:
            raise
        return None


async def _create_applied(call: Call, doc: Any) -> web.Response:
    created = check_object(patching.apply_patch(None, doc), call.storage.info, call.namespace, call.name)
    return json_response(await call.storage.create(call.ctx, call.namespace, created, call.info.write_options), 201)


async def _update_patched(call: Call, kind: patching.PatchType, current: JSON, doc: Any, pinned: bool) -> web.Response:
    read_version = (current.get("metadata") or {}).get("resourceVersion")
    patched = check_object(patching.apply(kind, current, doc), call.storage.info, call.namespace, call.name)
    if not pinned:
        # Update exactly what was read, so a concurrent writer causes a conflict, not a lost update.
        if read_version is not None:
            patched["metadata"]["resourceVersion"] = read_version
        else:
            patched["metadata"].pop("resourceVersion", None)
    options = call.info.write_options
    return json_response(await call.storage.update(call.ctx, call.namespace, call.name, patched, options))


@_with_warnings
async def delete(call: Call) -> web.Response:
    """Delete, honouring DeleteOptions from the query and the body (dryRun, uid/resourceVersion preconditions)."""
    body = await _delete_options_body(call)
    body_dry_run = body.get("dryRun") or []
    if not isinstance(body_dry_run, list):
        raise errors.bad_request("DeleteOptions.dryRun must be a list")
    options = write_options(call.info.write_query, "DeleteOptions", body_dry_run)
    preconditions = body.get("preconditions") or {}
    if isinstance(preconditions, dict) and (preconditions.get("uid") or preconditions.get("resourceVersion")):
        await _check_preconditions(call, preconditions)
    return json_response(await call.storage.delete(call.ctx, call.namespace, call.name, options))


async def _delete_options_body(call: Call) -> dict[str, Any]:
    raw = await call.body.read()
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(f"the DeleteOptions body is not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise errors.bad_request("the DeleteOptions body must be an object")
    return parsed


async def _check_preconditions(call: Call, preconditions: dict[str, Any]) -> None:
    current = await call.storage.get(call.ctx, call.namespace, call.name)
    meta = current.get("metadata") or {}
    for key, label, why in (("uid", "UID", "deleted and then recreated"),
                            ("resourceVersion", "ResourceVersion", "modified")):
        wanted = preconditions.get(key)
        if wanted and wanted != meta.get(key):
            raise errors.conflict(  # kube-apiserver names the kind here, not the resource
                call.storage.info.group,
                call.storage.info.kind,
                call.name,
                f"the {label} in the precondition ({wanted}) does not match the {label} in record "
                f"({meta.get(key)}). The object might have been {why}",
            )
