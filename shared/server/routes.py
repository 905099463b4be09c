"""The URL space of the server: health probes, OpenAPI, discovery, and resource requests under ``/apis``.

A resource request goes through the steps kube-apiserver's handler chain takes, in its order:
authenticate, resolve the request once (:mod:`shared.server.requestinfo`), authorize, find the
storage, then hand the resolved request to the read, write or watch handler.  This module is
also the one place that reads the HTTP request: handlers only ever see a :class:`Call`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from shared.api import errors
from shared.api.attributes import NonResourceAttributes, ResourceAttributes
from shared.api.rest import RequestContext, Storage, SubresourceReader, User
from shared.bodies import JSON
from shared.server import reads, watch, writes
from shared.server.auth import Gate
from shared.server.body import MAX_BODY_BYTES, Body
from shared.server.call import Call
from shared.server.catalog import Catalog
from shared.server.documents import Documents
from shared.server.metrics import Metrics
from shared.server.middleware import REQUEST_LOG, middleware
from shared.server.requestinfo import DiscoveryRequest, RequestInfo, resolve
from shared.server.responses import json_response, method_not_allowed, not_found

Readiness = Callable[[], "bool | Awaitable[bool]"]

_STOPPING = web.AppKey("agl_stopping", asyncio.Event)


@dataclass(frozen=True)
class Limits:
    """Bounds a server puts on each request."""

    max_body_bytes: int = MAX_BODY_BYTES
    #: Safety net for non-watch requests (0 disables): storages time out their own calls.
    request_timeout: float = 50.0
    #: How long a watch waits for its first event before answering 200, so an immediate failure gets its code.
    watch_start_grace: float = 0.1
    #: How often a patch is re-read and re-applied after a conflict the client did not ask for.
    conflict_retries: int = 5


class Routes:
    """Request handlers over a catalog; ``readiness`` may be replaced while serving."""

    def __init__(self, catalog: Catalog, gate: Gate, documents: Documents, metrics: Metrics, limits: Limits) -> None:
        self._catalog = catalog
        self._gate = gate
        self._documents = documents
        self._metrics = metrics
        self._limits = limits
        self.readiness: Readiness | None = None

    def app(self) -> web.Application:
        """A fresh aiohttp application serving these routes."""
        app = web.Application(middlewares=[middleware(self._metrics)], client_max_size=self._limits.max_body_bytes + 1)
        app[_STOPPING] = asyncio.Event()

        async def on_shutdown(app: web.Application) -> None:
            # Runs before aiohttp waits for handlers: open watches end now instead of timing out.
            app[_STOPPING].set()

        app.on_shutdown.append(on_shutdown)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_text)
        app.router.add_get("/openapi/v2", self._openapi_v2)
        app.router.add_get("/openapi/v3", self._openapi_v3_index)
        app.router.add_get("/openapi/v3/apis/{group}/{version}", self._openapi_v3)
        app.router.add_route("*", "/apis", self._apis)
        app.router.add_route("*", "/apis/{tail:.*}", self._apis)
        return app

    # --- unauthenticated probes (the only open paths, as kube-apiserver's own) ------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        request[REQUEST_LOG].quiet = True
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        request[REQUEST_LOG].quiet = True
        ready = True
        if self.readiness is not None:
            result = self.readiness()
            ready = bool(await result) if inspect.isawaitable(result) else bool(result)
        return web.Response(text="ok" if ready else "not ready", status=200 if ready else 503)

    # --- non-resource paths: authorized like kube-apiserver's own ---------------------------------

    async def _metrics_text(self, request: web.Request) -> web.Response:
        request[REQUEST_LOG].quiet = True
        await self._authorize_path(request, verb="metrics")
        data, content_type = self._metrics.render()
        return web.Response(body=data, headers={"Content-Type": content_type})

    async def _openapi_v2(self, request: web.Request) -> web.Response:
        await self._authorize_path(request, verb="openapi")
        return _document(request, *self._documents.openapi_v2())

    async def _openapi_v3_index(self, request: web.Request) -> web.Response:
        await self._authorize_path(request, verb="openapi")
        return json_response(self._documents.openapi_v3_index())

    async def _openapi_v3(self, request: web.Request) -> web.Response:
        await self._authorize_path(request, verb="openapi")
        group, version = request.match_info["group"], request.match_info["version"]
        return _document(request, *self._documents.openapi_v3(group, version))

    # --- /apis ---------------------------------------------------------------------------------

    async def _authenticate(self, request: web.Request, verb: str | None = None) -> User:
        record = request[REQUEST_LOG]
        if verb is not None:
            record.verb = verb
        user = await self._gate.authenticate(request)
        record.user = user.name
        return user

    async def _authorize_path(self, request: web.Request, verb: str) -> None:
        """Authenticate, then ask for ``get`` on the URL path (``nonResourceAttributes``), as
        kube-apiserver does for ``/metrics`` and ``/openapi/*``: RBAC grants these through
        ``nonResourceURLs`` (``system:discovery`` covers ``/openapi/*`` for every authenticated user)."""
        user = await self._authenticate(request, verb=verb)
        await self._gate.authorize(user, NonResourceAttributes(path=request.path, verb="get"))

    async def _apis(self, request: web.Request) -> web.StreamResponse:
        user = await self._authenticate(request)
        resolved = resolve(request.method, request.match_info.get("tail", ""), request.query, request.headers)
        if isinstance(resolved, DiscoveryRequest):
            request[REQUEST_LOG].verb = "discovery"
            if resolved.method not in ("GET", "HEAD"):
                raise method_not_allowed()
            return json_response(self._documents.discovery(resolved.path))
        body = Body(request.content, request.content_length, self._limits.max_body_bytes)
        call = await self._admit(request, user, resolved, body)
        if resolved.verb == "watch":
            stopping = request.app[_STOPPING]
            grace = self._limits.watch_start_grace
            return await watch.serve(call, request, stopping=stopping, metrics=self._metrics, start_grace=grace)
        timeout = self._limits.request_timeout
        try:
            # A safety net: storages time out their own calls, but a request must never hang.
            async with asyncio.timeout(timeout if timeout > 0 else None):
                return await self._dispatch(call)
        except TimeoutError as exc:
            raise errors.unavailable(f"the request did not complete within {timeout:g}s; try again") from exc

    async def _admit(self, request: web.Request, user: User, info: RequestInfo, body: Body) -> Call:
        """Authorize the resolved request and find its storage; then, and only then, report a bad option."""
        target = info.target
        record = request[REQUEST_LOG]
        record.group, record.resource, record.verb = target.group, target.plural, info.verb
        attrs = ResourceAttributes(
            verb=info.verb,
            group=target.group,
            version=target.version,
            resource=target.plural,
            namespace=target.namespace,
            name=info.authorized_name,
            subresource=target.subresource,
        )
        await self._gate.authorize(user, attrs)
        storage = self._catalog.storage(target.group, target.version, target.plural)
        if storage is None:
            raise not_found()
        if target.subresource and not _serves_subresource(storage, target.subresource):
            # As kube-apiserver answers for a subresource a custom resource lacks: the object is "not found".
            raise errors.not_found(target.group, target.plural, target.name or "")
        if target.subresource and info.verb != "get":
            raise method_not_allowed()  # subresources are read-only
        if target.namespace is None and target.name is not None:
            raise not_found()  # namespaced kinds have no cluster-scoped object URLs
        info.raise_problem()
        context = RequestContext(user=user, request_id=record.request_id,
                                 authorize=lambda more: self._gate.authorize(user, more))
        return Call(info, storage, context, body)

    async def _dispatch(self, call: Call) -> web.Response:
        verb = call.info.verb
        if call.info.target.subresource:
            return await _get_subresource(call)
        if verb == "get":
            return await reads.get(call)
        if verb == "list":
            return await reads.list_(call)
        if verb == "create":
            return await writes.create(call)
        if verb == "update":
            return await writes.update(call)
        if verb == "patch":
            return await writes.patch(call, self._limits.conflict_retries)
        if verb == "deletecollection":
            return await writes.delete_collection(call)
        return await writes.delete(call)


async def _get_subresource(call: Call) -> web.Response:
    """``GET .../<plural>/<name>/<subresource>``, answered as the storage renders it (a document, not an object)."""
    assert isinstance(call.storage, SubresourceReader)
    content = await call.storage.get_subresource(call.ctx, call.namespace, call.name, call.info.target.subresource)
    return web.Response(body=content.body, headers={"Content-Type": content.content_type})


def _serves_subresource(storage: Storage, subresource: str) -> bool:
    return subresource in storage.info.read_only_subresources and isinstance(storage, SubresourceReader)


def _document(request: web.Request, doc: JSON, digest: str) -> web.Response:
    """A cached document with its ETag; 304 when the client already has this version."""
    etag = f'"{digest}"'
    if etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers={"ETag": etag})
    return json_response(doc, headers={"ETag": etag})
