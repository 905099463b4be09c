"""``create``, ``update``, ``patch`` and ``delete``: the generic half of every write.

Bodies are checked against the URL before a storage sees them; a patch is applied here, on the
object as stored (the spec as written, never the defaulted read-back, so a patch writes no
defaults), and written back with that object's resourceVersion so a concurrent writer causes a
conflict (retried, as kube does) rather than a lost update; delete preconditions are checked here.
Every create, update and patch is recorded in ``metadata.managedFields`` by
:class:`shared.api.fieldmanager.FieldManager`, on the defaulted view of the object, so ownership is
what a custom resource with the same schema records; an apply that conflicts is the 409 kube gives.
Duplicate and unknown fields are handled per ``fieldValidation`` (:mod:`shared.server.fieldvalidation`).
The storage admits every write (:mod:`shared.admission.cluster`); the warnings of its policies and
webhooks are sent back here as ``Warning`` headers.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from aiohttp import web

from shared.admission.cluster import collect_warnings, warning_header
from shared.api import errors
from shared.api import patch as patching
from shared.api.fieldmanager import FieldManager
from shared.bodies import JSON, plain
from shared.schema.defaults import apply_defaults
from shared.server import deleteoptions
from shared.server.body import check_object, json_duplicates
from shared.server.call import Call
from shared.server.fieldvalidation import known_fields, typed_config
from shared.server.options import delete_options_causes, delete_write_options, query_delete_options
from shared.server.responses import json_response, status_response

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[web.Response]])


def _with_warnings(handler: Handler) -> Handler:
    """Send the admission warnings raised while ``handler`` ran as ``Warning`` headers, as kubectl
    expects them (a retried patch may meet the same warning twice: it is sent once) -- with a
    refusal too, as kube-apiserver sends them."""

    @functools.wraps(handler)
    async def handle(*args: Any) -> web.Response:
        with collect_warnings() as warnings:
            try:
                response = await handler(*args)
            except errors.ApiError as err:
                if not warnings:
                    raise
                response = status_response(err)
        for text in dict.fromkeys(warnings):
            response.headers.add("Warning", warning_header(text))
        return response

    return cast(Handler, handle)


def _field_manager(call: Call) -> FieldManager:
    info = call.storage.info
    return FieldManager(info.schema, info.api_version)


def _defaulted(call: Call, obj: JSON) -> JSON:
    """The object as a custom resource would hold it: schema defaults filled in.  Field ownership is
    computed on this view, so it is what a CRD with the same schema records."""
    defaulted: JSON = apply_defaults(call.storage.info.schema, obj)
    return defaulted


def _with_managed_fields(obj: JSON, entries: list[JSON] | None) -> JSON:
    out = {**obj, "metadata": {**(obj.get("metadata") or {}), "managedFields": entries or []}}
    return out


@_with_warnings
async def create(call: Call) -> web.Response:
    info = call.storage.info
    body = check_object(await call.body.decode(call.info.body_media, info.kind), info, call.namespace)
    body = known_fields(call, body, duplicates=call.body.duplicates)
    options = call.info.write_options
    entries = _field_manager(call).update(None, _defaulted(call, body), options.manager)
    return json_response(await call.storage.create(call.ctx, call.namespace, _with_managed_fields(body, entries),
                                                   options), 201)


@_with_warnings
async def update(call: Call) -> web.Response:
    """Replace the object, recording the writer's fields.  The body must state the resourceVersion it
    replaces: custom resources allow no unconditional update, so neither do the kinds served here."""
    obj = await call.body.decode(call.info.body_media, call.storage.info.kind)
    body = known_fields(call, check_object(obj, call.storage.info, call.namespace, call.name),
                         duplicates=call.body.duplicates)
    options = call.info.write_options
    stored = await call.storage.stored(call.ctx, call.namespace, call.name)
    if not body["metadata"].get("resourceVersion"):
        # Custom resources allow no unconditional update; kube-apiserver says so once it found the object.
        raise errors.invalid(call.storage.info.group, call.storage.info.plural, call.name, [
            errors.field_cause("metadata.resourceVersion", "Invalid value: 0: must be specified for an update")])
    entries = _field_manager(call).update(_defaulted(call, stored), _defaulted(call, body), options.manager)
    written = _with_managed_fields(body, entries)
    return json_response(await call.storage.update(call.ctx, call.namespace, call.name, written, options))


@_with_warnings
async def patch(call: Call, conflict_retries: int) -> web.Response:
    """Apply the patch to the object as stored; re-read and re-apply on a conflict the client did not ask for."""
    kind = call.info.patch_type
    assert kind is not None
    raw = await call.body.read()
    doc = patching.decode_patch(kind, raw)
    duplicates = json_duplicates(raw) if kind is patching.PatchType.MERGE else []
    if kind is patching.PatchType.APPLY:
        typed_config(call, check_object(doc, call.storage.info, call.namespace, call.name, applied=True))
    pinned = patching.states_resource_version(kind, doc)
    for attempt in range(conflict_retries + 1):
        last = attempt == conflict_retries
        current = await _current(call, kind)
        try:
            if current is None:
                return await _create_applied(call, doc)
            return await _update_patched(call, kind, current, doc, pinned, duplicates)
        except errors.ApiError as err:
            created_meanwhile = current is None and err.reason == "AlreadyExists"
            modified_meanwhile = current is not None and err.code == 409 and err.reason == "Conflict" and not pinned
            if (created_meanwhile or modified_meanwhile) and not last and not _is_apply_conflict(err):
                continue  # apply onto theirs / re-read and re-apply, as kube does
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _is_apply_conflict(err: errors.ApiError) -> bool:
    return any(c.get("reason") == "FieldManagerConflict" for c in err.details.get("causes") or [])


async def _current(call: Call, kind: patching.PatchType) -> JSON | None:
    """The object to patch, as stored; None when it does not exist and the patch is an apply (which then creates it)."""
    try:
        return await call.storage.stored(call.ctx, call.namespace, call.name)
    except errors.ApiError as err:
        if err.code != 404 or kind is not patching.PatchType.APPLY:
            raise
        return None


async def _create_applied(call: Call, doc: Any) -> web.Response:
    options = call.info.write_options
    new, entries, _ = _field_manager(call).apply(None, doc, options.manager, options.force)
    created = check_object(_with_managed_fields(new, entries), call.storage.info, call.namespace, call.name)
    return json_response(await call.storage.create(call.ctx, call.namespace, created, options), 201)


async def _update_patched(call: Call, kind: patching.PatchType, stored: JSON, doc: Any, pinned: bool,
                         duplicates: list[str]) -> web.Response:
    options = call.info.write_options
    manager = _field_manager(call)
    live = _defaulted(call, stored)
    if kind is patching.PatchType.APPLY:
        new, entries, _ = manager.apply(live, doc, options.manager, options.force)
        # Only what the apply changed is written onto the stored object: defaults stay unwritten.
        patched = patching.merge_patch(stored, patching.merge_diff(_bare(live), new))
        if isinstance(doc.get("spec"), dict) and isinstance(patched.get("spec"), dict):
            _pin_applied(patched["spec"], doc["spec"], new.get("spec") or {})
        written = _with_managed_fields(patched, entries)
    else:
        patched = _patched(kind, stored, live, doc)
        patched = check_object(patched, call.storage.info, call.namespace, call.name)
        patched = known_fields(call, patched, lambda: dict(patching.apply(kind, live, doc)), duplicates)
        entries_or_none = manager.update(live, _defaulted(call, patched), options.manager)
        written = _with_managed_fields(patched, entries_or_none)
    written = check_object(written, call.storage.info, call.namespace, call.name)
    if not pinned:
        _pin(written, stored)
    return json_response(await call.storage.update(call.ctx, call.namespace, call.name, written, options))


def _patched(kind: patching.PatchType, stored: JSON, live: JSON, doc: Any) -> Any:
    """A merge patch applied to the object as stored; a JSON patch to the object as a custom resource
    holds it (``live``: defaults filled in, so a ``replace``, ``remove`` or ``test`` of a defaulted field
    finds it, as on a CRD), of which only what it changed is written onto the stored object."""
    if kind is not patching.PatchType.JSON:
        return patching.apply(kind, stored, doc)
    view = patching.apply(kind, live, doc)
    if not isinstance(view, dict):
        return view
    return patching.merge_patch(stored, patching.merge_diff(live, view))


def _pin(written: JSON, stored: JSON) -> None:
    """Write exactly over what was read, so a concurrent writer causes a conflict, not a lost update."""
    read_version = (stored.get("metadata") or {}).get("resourceVersion")
    if read_version is not None:
        written["metadata"]["resourceVersion"] = read_version
    else:
        written["metadata"].pop("resourceVersion", None)


def _pin_applied(target: JSON, applied: JSON, new: JSON) -> None:
    """Write what the applier stated even where it equals a default the stored spec left out, so the
    stored spec stays the spec as given (the defaulted view saw no change there)."""
    for key, value in applied.items():
        if key not in new:
            continue
        if isinstance(value, dict) and isinstance(new[key], dict):
            child = target.setdefault(key, {})
            if isinstance(child, dict):
                _pin_applied(child, value, new[key])
        elif key not in target:
            target[key] = copy.deepcopy(new[key])


def _bare(obj: JSON) -> JSON:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


@_with_warnings
async def delete(call: Call) -> web.Response:
    """Delete, honouring the DeleteOptions of the body or else the query: dryRun, uid/resourceVersion preconditions,
    and the propagation policy and grace period, which the backing object's delete is sent."""
    stated = await _delete_options(call)
    options = delete_write_options(stated)
    preconditions = stated.get("preconditions") or {}
    if isinstance(preconditions, dict) and (preconditions.get("uid") or preconditions.get("resourceVersion")):
        await _check_preconditions(call, preconditions)
    return json_response(await call.storage.delete(call.ctx, call.namespace, call.name, options))


@_with_warnings
async def delete_collection(call: Call) -> web.Response:
    """``deletecollection``: delete what a list with the same selectors returns, one object at a time.

    As kube-apiserver does for a custom resource (one delete worker): each object is deleted as a
    single DELETE would delete it, admission included (without a name, as kube builds it for a
    collection); one already gone is skipped; the first refusal ends the request with its Status
    and leaves the objects after it in place.  The answer is the list as it was read, before the
    deletes.
    """
    options = delete_write_options(await _delete_options(call))
    listed = await call.storage.list(call.ctx, call.namespace, call.info.list_options)
    listed = {**listed, "items": [plain(item) for item in listed.get("items") or []]}
    for item in listed["items"]:
        try:
            await call.storage.delete(call.ctx, call.namespace, item["metadata"]["name"], options, collection=True)
        except errors.ApiError as err:
            if err.code != 404:
                raise
    return json_response(listed)


async def _delete_options(call: Call) -> dict[str, Any]:
    """The DeleteOptions of a DELETE, validated as kube-apiserver validates them before it deletes anything: from
    the body when there is one (which must be a DeleteOptions; the query is then not read at all), else from the
    query (400 for a malformed number, 422 on ``DeleteOptions`` for what ``ValidateDeleteOptions`` refuses)."""
    raw = await call.body.read()
    body = deleteoptions.decode(raw) if raw else None
    stated = body if body is not None else query_delete_options(call.info.write_query)
    if causes := delete_options_causes(stated):
        raise errors.invalid("meta.k8s.io", "DeleteOptions", "", causes)
    return stated


async def _check_preconditions(call: Call, preconditions: dict[str, Any]) -> None:
    current = plain(await call.storage.get(call.ctx, call.namespace, call.name))
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
