"""The aggregated API server's HTTP layer (what ``k8s.io/apiserver`` does for Go servers).

One :class:`ApiServer` serves every kind a service registers.  For each request it
authenticates (front proxy), authorizes (SubjectAccessReview), routes to the kind's
:class:`~shared.rest.Storage`, parses and checks everything that is generic (query parameters,
body size, content types, apiVersion/kind/namespace/name of bodies, patch documents) and renders
results and errors the way kube-apiserver does, so kubectl cannot tell the difference.  Kinds can
be registered and unregistered while serving: every request looks the registry up afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from shared.api import discovery, errors, selectors, table
from shared.api import patch as patching
from shared.api.rest import ListOptions, RequestContext, ResourceInfo, Storage, User, WriteOptions
from shared.bodies import JSON
from shared.schema import openapi
from shared.security.authz import ResourceAttributes
from shared.service.metrics import Metrics

log = logging.getLogger(__name__)

#: kube-apiserver's limit for JSON request bodies.
MAX_BODY_BYTES = 3 * 1024 * 1024

#: Maps a request to the user the front proxy asserted; raises 401 ApiError otherwise.
Authenticator = Callable[[web.Request], "User | Awaitable[User]"]
Readiness = Callable[[], "bool | Awaitable[bool]"]


class AuthorizerLike(Protocol):
    """What the HTTP layer needs from an authorizer (:class:`shared.security.authz.Authorizer` is one)."""

    async def authorize(self, user: User, attrs: ResourceAttributes) -> bool: ...


_NOT_FOUND = "the server could not find the requested resource"
_STOPPING = web.AppKey("agl_stopping", asyncio.Event)
_READ_VERBS = {"get", "list", "watch"}


@dataclass
class _RequestInfo:
    """What the middleware logs and counts; filled in by the handlers as they learn it."""

    verb: str
    group: str = ""
    resource: str = ""
    user: str = ""
    request_id: str = ""
    quiet: bool = False


_INFO = web.RequestKey("agl_info", _RequestInfo)


@dataclass(frozen=True)
class _Target:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str


def _json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return web.Response(body=data, status=status, headers={"Content-Type": "application/json", **(headers or {})})


def status_response(err: errors.ApiError) -> web.Response:
    """Render an :class:`~shared.errors.ApiError` as a Status; 503/429 carry Retry-After."""
    headers: dict[str, str] = {}
    if err.code in (429, 503):
        headers["Retry-After"] = str(err.retry_after if err.retry_after is not None else 1)
    return _json_response(err.status(), err.code, headers)


def _bool_param(query: Any, name: str) -> bool:
    raw = query.get(name)
    if raw is None or raw == "":
        return False
    lowered = raw.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise errors.bad_request(f"{name}: invalid boolean value {raw!r}")


def _int_param(query: Any, name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise errors.bad_request(f"{name}: invalid integer value {raw!r}") from exc
    if value < 0:
        raise errors.bad_request(f"{name}: must be non-negative, got {value}")
    return value


def parse_list_options(query: Any) -> ListOptions:
    """Parse and validate the query of a list or watch request (400 on anything malformed)."""
    label_selector = query.get("labelSelector") or ""
    field_selector = query.get("fieldSelector") or ""
    limit = _int_param(query, "limit")
    return ListOptions(
        label_selector=selectors.render(selectors.parse_label_selector(label_selector)),
        field_selector=selectors.parse_field_selector(field_selector),
        limit=limit or None,
        continue_token=query.get("continue") or None,
        resource_version=query.get("resourceVersion") or None,
        timeout_seconds=_int_param(query, "timeoutSeconds"),
        allow_bookmarks=_bool_param(query, "allowWatchBookmarks"),
    )


def _options_invalid(
    options_kind: str, field: str, message: str, reason: str = "FieldValueNotSupported"
) -> errors.ApiError:
    # kube-apiserver validates CreateOptions/UpdateOptions/PatchOptions/DeleteOptions with a 422.
    return errors.invalid("meta.k8s.io", options_kind, "", [errors.field_cause(field, message, reason)])


def _dry_run(values: Iterable[Any], options_kind: str) -> bool:
    values = list(values)
    bad = [v for v in values if v != "All"]
    if bad:
        shown = json.dumps(bad)
        raise _options_invalid(options_kind, "dryRun", f'Unsupported value: {shown}: supported values: "All"')
    return bool(values)


def parse_write_options(query: Any, options_kind: str, extra_dry_run: Iterable[Any] = ()) -> WriteOptions:
    """``dryRun``, ``fieldManager`` and ``fieldValidation`` of a write (422 when invalid, as kube)."""
    dry_run = _dry_run([*query.getall("dryRun", []), *extra_dry_run], options_kind)
    manager = query.get("fieldManager") or None
    if manager is not None and (len(manager) > 128 or not manager.isprintable()):
        raise _options_invalid(
            options_kind,
            "fieldManager",
            "Invalid value: must be at most 128 printable characters",
            "FieldValueInvalid",
        )
    validation = query.get("fieldValidation") or ""
    if validation not in ("", "Ignore", "Warn", "Strict"):
        raise _options_invalid(
            options_kind,
            "fieldValidation",
            f'Unsupported value: "{validation}": supported values: "Ignore", "Strict", "Warn"',
        )
    return WriteOptions(dry_run=dry_run, field_manager=manager)


def check_object(obj: Any, info: ResourceInfo, namespace: str, name: str | None = None) -> JSON:
    """Generic checks of a body: an object of this apiVersion/kind, in the URL's namespace.

    Sets ``metadata.namespace`` to the URL namespace, so storages always see it.  With ``name``,
    the body's name must equal it (PUT and PATCH).
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
    if kind != info.kind:
        raise errors.bad_request(f"the kind in the data ({kind or ''}) does not match the expected kind ({info.kind})")
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    body_ns = meta.get("namespace")
    if body_ns not in (None, "") and body_ns != namespace:
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    meta["namespace"] = namespace
    if name is not None and meta.get("name") != name:
        raise errors.bad_request(
            f"the name of the object ({meta.get('name') or ''}) does not match the name on the URL ({name})"
        )
    return obj


class ApiServer:
    """Routes, checks and renders requests for every registered :class:`~shared.rest.Storage`.

    Typical wiring in a service::

        config = await authn.load_request_header_config(api_client)
        server = ApiServer(
            authenticator=authn.FrontProxyAuthenticator(config),
            authorizer=authz.from_api_client(api_client),
            group_versions=[("apps.cozystack.io", "v1alpha1")],
        )
        server.register(storage)                      # any time, also while serving
        ssl_ctx = tls.server_context(cert_file, key_file, config.tls_client_cas())
        runner = await server.serve("0.0.0.0", 8443, ssl_ctx)
    """

    def __init__(
        self,
        *,
        authenticator: Authenticator | None = None,
        authorizer: AuthorizerLike | None = None,
        readiness: Readiness | None = None,
        group_versions: Iterable[tuple[str, str]] = (),
        metrics: Metrics | None = None,
        title: str = "agl",
        max_body_bytes: int = MAX_BODY_BYTES,
        request_timeout: float = 50.0,
        watch_start_grace: float = 0.1,
        conflict_retries: int = 5,
    ) -> None:
        self._storages: dict[tuple[str, str, str], Storage] = {}
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._readiness = readiness
        self._static_gvs: set[tuple[str, str]] = set(group_versions)
        self.metrics = metrics if metrics is not None else Metrics()
        self._title = title
        self._max_body = max_body_bytes
        self._request_timeout = request_timeout
        self._watch_grace = watch_start_grace
        self._conflict_retries = conflict_retries
        self._generation = 0
        self._openapi_cache: dict[Any, tuple[int, JSON, str]] = {}

    # --- configuration -------------------------------------------------------------------------

    def register(self, storage: Storage) -> None:
        """Serve ``storage`` (replacing any storage of the same group/version/plural)."""
        info = storage.info
        if not info.namespaced:
            raise ValueError(f"{info.plural}.{info.group}: only namespaced resources are supported")
        self._storages[(info.group, info.version, info.plural)] = storage
        self._generation += 1

    def unregister(self, group: str, version: str, plural: str) -> bool:
        """Stop serving a resource; False if it was not served.  Open watches run to their end."""
        removed = self._storages.pop((group, version, plural), None) is not None
        if removed:
            self._generation += 1
        return removed

    def storage(self, group: str, version: str, plural: str) -> Storage | None:
        return self._storages.get((group, version, plural))

    def resources(self) -> list[ResourceInfo]:
        """The infos of every served resource."""
        return [s.info for s in self._storages.values()]

    def serve_group_version(self, group: str, version: str) -> None:
        """Keep ``group/version`` in discovery even with no resource.

        kube-apiserver marks an APIService unavailable (and namespace deletion stalls) when
        ``/apis/<group>/<version>`` answers 404, so a service whose kinds all come and go at
        runtime should declare its group version here.
        """
        self._static_gvs.add((group, version))
        self._generation += 1

    def set_authenticator(self, authenticator: Authenticator | None) -> None:
        """Set how requests are authenticated; without one every request is 401."""
        self._authenticator = authenticator

    def set_authorizer(self, authorizer: AuthorizerLike | None) -> None:
        """Set the authorizer; without one every resource request is 403 (fail closed)."""
        self._authorizer = authorizer

    def set_readiness(self, readiness: Readiness | None) -> None:
        self._readiness = readiness

    # --- app ---------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        """A fresh aiohttp application serving this server's routes."""
        app = web.Application(middlewares=[self._middleware], client_max_size=self._max_body + 1)
        app[_STOPPING] = asyncio.Event()

        async def on_shutdown(app: web.Application) -> None:
            # Runs before aiohttp waits for handlers: open watches end now instead of timing out.
            app[_STOPPING].set()

        app.on_shutdown.append(on_shutdown)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/openapi/v2", self._openapi_v2)
        app.router.add_get("/openapi/v3", self._openapi_v3_index)
        app.router.add_get("/openapi/v3/apis/{group}/{version}", self._openapi_v3)
        app.router.add_route("*", "/apis", self._apis)
        app.router.add_route("*", "/apis/{tail:.*}", self._apis)
        return app

    async def serve(self, host: str, port: int, ssl_context: Any) -> web.AppRunner:
        """Start serving; returns the runner (``await runner.cleanup()`` to stop).

        With ``port=0`` the bound port is in ``runner.addresses``.
        """
        runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
        await site.start()
        log.info("serving", extra={"addresses": [str(a) for a in runner.addresses]})
        return runner

    # --- middleware: errors, logging, metrics ------------------------------------------------------

    @web.middleware
    async def _middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        started = time.monotonic()
        info = _RequestInfo(verb=request.method.lower(), request_id=uuid.uuid4().hex[:16])
        request[_INFO] = info
        response: web.StreamResponse
        try:
            response = await handler(request)
        except errors.ApiError as err:
            response = status_response(err)
        except web.HTTPException as exc:
            response = self._http_exception(exc)
        except Exception:
            log.exception(
                "unhandled error serving request",
                extra={"method": request.method, "path": request.path, "request_id": info.request_id},
            )
            response = status_response(errors.internal("an internal error occurred; see the server log"))
        elapsed = time.monotonic() - started
        code = response.status
        if not info.quiet:
            self.metrics.observe(info.verb, info.group, info.resource, code, elapsed)
        level = logging.DEBUG if info.quiet else logging.INFO
        log.log(
            level,
            "request",
            extra={
                "method": request.method,
                "path": request.path,
                "query": request.query_string,
                "user": info.user,
                "verb": info.verb,
                "resource": info.resource,
                "code": code,
                "duration_ms": round(elapsed * 1000, 2),
                "request_id": info.request_id,
            },
        )
        return response

    @staticmethod
    def _http_exception(exc: web.HTTPException) -> web.Response:
        if exc.status == 404:
            return status_response(errors.ApiError(404, "NotFound", _NOT_FOUND))
        if exc.status == 405:
            return status_response(
                errors.method_not_allowed("the server does not allow this method on the requested resource")
            )
        if exc.status == 413:
            return status_response(errors.too_large(MAX_BODY_BYTES))
        reason = exc.reason.replace(" ", "") or "Unknown"
        return status_response(errors.ApiError(exc.status, reason, exc.text or exc.reason))

    # --- unauthenticated endpoints ---------------------------------------------------------------

    async def _healthz(self, request: web.Request) -> web.Response:
        request[_INFO].quiet = True
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        request[_INFO].quiet = True
        ready = True
        if self._readiness is not None:
            result = self._readiness()
            ready = bool(await result) if inspect.isawaitable(result) else bool(result)
        return web.Response(text="ok" if ready else "not ready", status=200 if ready else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        request[_INFO].quiet = True
        data, content_type = self.metrics.render()
        return web.Response(body=data, headers={"Content-Type": content_type})

    # --- authentication / authorization -----------------------------------------------------------

    async def _authenticate(self, request: web.Request) -> User:
        if self._authenticator is None:
            raise errors.unauthorized("no authenticator is configured")
        result = self._authenticator(request)
        user = await result if inspect.isawaitable(result) else result
        request[_INFO].user = user.name
        return user

    async def _authorize(self, user: User, attrs: ResourceAttributes) -> None:
        allowed = False
        if self._authorizer is None:
            log.warning("no authorizer is configured; denying", extra={"user": user.name, "verb": attrs.verb})
        else:
            allowed = await self._authorizer.authorize(user, attrs)
        self.metrics.authorization_decisions.labels("allow" if allowed else "deny").inc()
        if not allowed:
            raise errors.forbidden(user.name, attrs.verb, attrs.resource, attrs.group, attrs.namespace, attrs.name)

    # --- discovery and OpenAPI --------------------------------------------------------------------

    def _served_gvs(self) -> set[tuple[str, str]]:
        return {(i.group, i.version) for i in self.resources()} | self._static_gvs

    def _cached(self, key: Any, build: Callable[[], JSON]) -> tuple[JSON, str]:
        entry = self._openapi_cache.get(key)
        if entry is None or entry[0] != self._generation:
            doc = build()
            entry = (self._generation, doc, openapi.content_hash(doc))
            self._openapi_cache[key] = entry
        return entry[1], entry[2]

    def _document(self, request: web.Request, doc: JSON, digest: str) -> web.Response:
        etag = f'"{digest}"'
        if etag in request.headers.get("If-None-Match", ""):
            return web.Response(status=304, headers={"ETag": etag})
        return _json_response(doc, headers={"ETag": etag})

    async def _openapi_v2(self, request: web.Request) -> web.Response:
        request[_INFO].verb = "openapi"
        await self._authenticate(request)
        doc, digest = self._cached("v2", lambda: openapi.v2_document(self.resources(), self._title))
        return self._document(request, doc, digest)

    def _v3_doc(self, group: str, version: str) -> tuple[JSON, str]:
        return self._cached(
            ("v3", group, version), lambda: openapi.v3_document(group, version, self.resources(), self._title)
        )

    async def _openapi_v3_index(self, request: web.Request) -> web.Response:
        request[_INFO].verb = "openapi"
        await self._authenticate(request)
        docs = {gv: self._v3_doc(*gv)[0] for gv in self._served_gvs()}
        return _json_response(openapi.v3_index(docs))

    async def _openapi_v3(self, request: web.Request) -> web.Response:
        request[_INFO].verb = "openapi"
        await self._authenticate(request)
        gv = (request.match_info["group"], request.match_info["version"])
        if gv not in self._served_gvs():
            raise errors.ApiError(404, "NotFound", _NOT_FOUND)
        doc, digest = self._v3_doc(*gv)
        return self._document(request, doc, digest)

    def _discovery(self, parts: list[str]) -> JSON:
        infos = self.resources()
        if not parts:
            return discovery.api_group_list(infos, self._static_gvs)
        if len(parts) == 1:
            group_doc = discovery.api_group(parts[0], infos, self._static_gvs)
            if group_doc is None:
                raise errors.ApiError(404, "NotFound", _NOT_FOUND)
            return group_doc
        group, version = parts
        if (group, version) not in self._served_gvs():
            raise errors.ApiError(404, "NotFound", _NOT_FOUND)
        return discovery.api_resource_list(group, version, infos)

    # --- /apis dispatch ------------------------------------------------------------------------------

    async def _apis(self, request: web.Request) -> web.StreamResponse:
        info = request[_INFO]
        tail = request.match_info.get("tail", "")
        parts = tail.split("/") if tail else []
        if parts and parts[-1] == "":
            parts.pop()
        user = await self._authenticate(request)
        if any(p == "" for p in parts):
            raise errors.ApiError(404, "NotFound", _NOT_FOUND)
        if len(parts) <= 2:
            info.verb = "discovery"
            if request.method not in ("GET", "HEAD"):
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return _json_response(self._discovery(parts))
        target = self._target(parts)
        info.group, info.resource = target.group, target.plural
        verb = self._verb(request, target)
        info.verb = verb
        await self._authorize(
            user,
            ResourceAttributes(
                verb=verb,
                group=target.group,
                version=target.version,
                resource=target.plural,
                namespace=target.namespace,
                name=target.name if target.name is not None else self._selected_name(request, verb),
                subresource=target.subresource,
            ),
        )
        storage = self._storages.get((target.group, target.version, target.plural))
        if storage is None or target.subresource:
            raise errors.ApiError(404, "NotFound", _NOT_FOUND)
        if target.namespace is None and target.name is not None:
            # Namespaced kinds have no cluster-scoped object URLs.
            raise errors.ApiError(404, "NotFound", _NOT_FOUND)
        ctx = RequestContext(user=user, request_id=info.request_id)
        if verb == "watch":
            return await self._watch(request, storage, ctx, target)
        try:
            # A safety net: storages time out their own calls, but a request must never hang.
            async with asyncio.timeout(self._request_timeout if self._request_timeout > 0 else None):
                return await self._dispatch(request, storage, ctx, target, verb)
        except TimeoutError as exc:
            raise errors.unavailable(
                f"the request did not complete within {self._request_timeout:g}s; try again"
            ) from exc

    @staticmethod
    def _target(parts: list[str]) -> _Target:
        group, version, rest = parts[0], parts[1], parts[2:]
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace: str | None = rest[1]
            rest = rest[2:]
        else:
            namespace = None
        return _Target(
            group=group,
            version=version,
            plural=rest[0],
            namespace=namespace,
            name=rest[1] if len(rest) > 1 else None,
            subresource="/".join(rest[2:]),
        )

    @staticmethod
    def _selected_name(request: web.Request, verb: str) -> str | None:
        """For list/watch, the name a ``metadata.name=`` field selector pins (authorized like kube).

        This lets a user whose RBAC names single objects (``resourceNames``) run ``kubectl get x -w``.
        """
        if verb not in ("list", "watch"):
            return None
        try:
            reqs = selectors.parse_field_selector(request.query.get("fieldSelector") or "")
        except errors.ApiError:
            return None  # reported as a 400 once authorized
        names = [value for field, op, value in reqs if field == "metadata.name" and op == selectors.EQUALS]
        return names[0] if len(names) == 1 else None

    @staticmethod
    def _verb(request: web.Request, target: _Target) -> str:
        method = request.method
        if method == "GET":
            if _bool_param(request.query, "watch"):
                return "watch"
            return "get" if target.name is not None else "list"
        if target.name is None:
            if method == "POST":
                return "create"
            if method == "DELETE":
                return "deletecollection"
        else:
            mapped = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
            if mapped:
                return mapped
        raise errors.method_not_allowed(f"{method} is not supported on this URL")

    async def _dispatch(
        self, request: web.Request, storage: Storage, ctx: RequestContext, target: _Target, verb: str
    ) -> web.StreamResponse:
        namespace, name = target.namespace, target.name
        if verb in _READ_VERBS:
            rendering = table.negotiate(request.headers.get("Accept"))
            include = table.parse_include_object(request.query.get("includeObject"))
            if verb == "get":
                assert namespace is not None and name is not None
                obj = await storage.get(ctx, namespace, name)
                return _json_response(self._render_object(storage, obj, rendering, include))
            list_options = parse_list_options(request.query)
            lst = await storage.list(ctx, namespace, list_options)
            return _json_response(self._render_list(storage, lst, rendering, include))
        if namespace is None or verb == "deletecollection":
            raise errors.method_not_allowed(f"{verb} is not supported on this URL")
        if verb == "create":
            options = parse_write_options(request.query, "CreateOptions")
            body = check_object(await self._read_object(request), storage.info, namespace)
            return _json_response(await storage.create(ctx, namespace, body, options), 201)
        assert name is not None
        if verb == "update":
            options = parse_write_options(request.query, "UpdateOptions")
            body = check_object(await self._read_object(request), storage.info, namespace, name)
            return _json_response(await storage.update(ctx, namespace, name, body, options))
        if verb == "patch":
            return await self._patch(request, storage, ctx, namespace, name)
        return await self._delete(request, storage, ctx, namespace, name)

    # --- rendering ---------------------------------------------------------------------------------

    @staticmethod
    def _render_object(storage: Storage, obj: JSON, rendering: table.Rendering, include: str) -> JSON:
        if rendering.mode == table.TABLE_MODE:
            return table.object_table(
                storage.info, obj, storage.table_cells, include=include, version=rendering.version
            )
        if rendering.mode == table.PARTIAL_MODE:
            return table.partial_metadata(obj, rendering.version)
        return obj

    @staticmethod
    def _render_list(storage: Storage, lst: JSON, rendering: table.Rendering, include: str) -> JSON:
        if rendering.mode == table.TABLE_MODE:
            return table.list_table(storage.info, lst, storage.table_cells, include=include, version=rendering.version)
        if rendering.mode == table.PARTIAL_MODE:
            return table.partial_metadata_list(lst, rendering.version)
        return lst

    # --- bodies ------------------------------------------------------------------------------------

    async def _read_body(self, request: web.Request) -> bytes:
        declared = request.content_length
        if declared is not None and declared > self._max_body:
            raise errors.too_large(self._max_body)
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
            if size > self._max_body:
                raise errors.too_large(self._max_body)
            chunks.append(chunk)
        return b"".join(chunks)

    async def _read_object(self, request: web.Request) -> Any:
        content_type = request.headers.get("Content-Type", "")
        media = content_type.split(";", 1)[0].strip().lower()
        if media not in ("", "application/json", "application/yaml"):
            raise errors.unsupported_media_type(content_type)
        raw = await self._read_body(request)
        if media == "application/yaml":
            try:
                return patching.load_yaml(raw)
            except ValueError as exc:
                raise errors.bad_request(f"the request body is not valid YAML: {exc}") from exc
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"the request body is not valid JSON: {exc}") from exc

    # --- patch ---------------------------------------------------------------------------------------

    async def _patch(
        self, request: web.Request, storage: Storage, ctx: RequestContext, namespace: str, name: str
    ) -> web.Response:
        kind = patching.patch_type(request.headers.get("Content-Type", ""))
        options = parse_write_options(request.query, "PatchOptions")
        if kind is patching.PatchType.APPLY and not options.field_manager:
            raise _options_invalid(
                "PatchOptions",
                "fieldManager",
                "Required value: is required for apply patch",
                "FieldValueRequired",
            )
        if kind is not patching.PatchType.APPLY and "force" in request.query:
            raise _options_invalid(
                "PatchOptions",
                "force",
                "Forbidden: may not be specified for non-apply patch",
                "FieldValueForbidden",
            )
        doc = patching.decode_patch(kind, await self._read_body(request))
        if kind is patching.PatchType.APPLY:
            check_object(doc, storage.info, namespace, name)
        pinned = patching.states_resource_version(kind, doc)
        info = storage.info
        for attempt in range(self._conflict_retries + 1):
            last = attempt == self._conflict_retries
            current: JSON | None
            try:
                current = await storage.get(ctx, namespace, name)
            except errors.ApiError as err:
                if err.code != 404 or kind is not patching.PatchType.APPLY:
                    raise
                current = None
            if current is None:
                created = check_object(patching.apply_patch(None, doc), info, namespace, name)
                try:
                    return _json_response(await storage.create(ctx, namespace, created, options), 201)
                except errors.ApiError as err:
                    if err.reason == "AlreadyExists" and not last:
                        continue  # somebody created it meanwhile: apply onto theirs
                    raise
            read_version = (current.get("metadata") or {}).get("resourceVersion")
            patched = check_object(patching.apply(kind, current, doc), info, namespace, name)
            if not pinned:
                # Update exactly what was read, so a concurrent writer causes a conflict, not a lost update.
                if read_version is not None:
                    patched["metadata"]["resourceVersion"] = read_version
                else:
                    patched["metadata"].pop("resourceVersion", None)
            try:
                return _json_response(await storage.update(ctx, namespace, name, patched, options))
            except errors.ApiError as err:
                if err.code == 409 and err.reason == "Conflict" and not pinned and not last:
                    # The client did not ask for a precondition: re-read and re-apply, as kube does.
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    # --- delete --------------------------------------------------------------------------------------

    async def _delete(
        self, request: web.Request, storage: Storage, ctx: RequestContext, namespace: str, name: str
    ) -> web.Response:
        raw = await self._read_body(request)
        body: dict[str, Any] = {}
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise errors.bad_request(f"the DeleteOptions body is not valid JSON: {exc}") from exc
            if not isinstance(parsed, dict):
                raise errors.bad_request("the DeleteOptions body must be an object")
            body = parsed
        body_dry_run = body.get("dryRun") or []
        if not isinstance(body_dry_run, list):
            raise errors.bad_request("DeleteOptions.dryRun must be a list")
        options = parse_write_options(request.query, "DeleteOptions", body_dry_run)
        preconditions = body.get("preconditions") or {}
        if isinstance(preconditions, dict) and (preconditions.get("uid") or preconditions.get("resourceVersion")):
            current = await storage.get(ctx, namespace, name)
            meta = current.get("metadata") or {}
            for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                wanted = preconditions.get(key)
                if wanted and wanted != meta.get(key):
                    raise errors.conflict(
                        storage.info.group,
                        storage.info.plural,
                        name,
                        f"the {label} in the precondition ({wanted}) does not match the {label} in record "
                        f"({meta.get(key)}). The object might have been modified",
                    )
        return _json_response(await storage.delete(ctx, namespace, name, options))

    # --- watch ---------------------------------------------------------------------------------------

    async def _watch(
        self, request: web.Request, storage: Storage, ctx: RequestContext, target: _Target
    ) -> web.StreamResponse:
        rendering = table.negotiate(request.headers.get("Accept"))
        include = table.parse_include_object(request.query.get("includeObject"))
        options = parse_list_options(request.query)
        if target.name is not None:
            # The legacy single-object watch is a collection watch on metadata.name.
            options = ListOptions(
                label_selector=options.label_selector,
                field_selector=(*options.field_selector, ("metadata.name", "=", target.name)),
                limit=options.limit,
                continue_token=options.continue_token,
                resource_version=options.resource_version,
                timeout_seconds=options.timeout_seconds,
                allow_bookmarks=options.allow_bookmarks,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + options.timeout_seconds if options.timeout_seconds else None
        stopping = request.app[_STOPPING]
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=256)
        if _bool_param(request.query, "sendInitialEvents"):
            events = self._initial_events_then_watch(storage, ctx, target.namespace, options)
        else:
            events = storage.watch(ctx, target.namespace, options)
        pump = asyncio.create_task(self._pump(events, queue))
        response: web.StreamResponse | None = None
        gauge = self.metrics.watchers.labels(storage.info.group, storage.info.plural)
        headers_sent = False

        def remaining() -> float | None:
            return None if deadline is None else deadline - loop.time()

        try:
            item = await self._next(queue, self._watch_grace, remaining())
            if item is not None and item[0] == "error" and not self._prepared(response):
                raise item[1]
            response = web.StreamResponse(
                status=200, headers={"Content-Type": "application/json", "Cache-Control": "no-cache, private"}
            )
            response.enable_chunked_encoding()
            await response.prepare(request)
            gauge.inc()
            while True:
                if item is not None:
                    what, payload = item
                    if what == "end":
                        break
                    if what == "error":
                        payload = {"type": "ERROR", "object": payload.status()}
                    event = table.watch_event(
                        storage.info,
                        payload,
                        storage.table_cells,
                        rendering,
                        include=include,
                        headers=not headers_sent,
                    )
                    if rendering.mode == table.TABLE_MODE and payload.get("type") in (
                        "ADDED",
                        "MODIFIED",
                        "DELETED",
                    ):
                        headers_sent = True
                    await response.write(json.dumps(event, separators=(",", ":")).encode() + b"\n")
                    if payload.get("type") == "ERROR":
                        break
                left = remaining()
                if left is not None and left <= 0:
                    break
                if stopping.is_set() or request.transport is None or request.transport.is_closing():
                    break
                item = await self._next(queue, 1.0, left)
        except (ConnectionResetError, ConnectionError):
            log.debug("watch client went away", extra={"request_id": ctx.request_id})
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            if self._prepared(response):
                gauge.dec()
        assert response is not None
        with contextlib.suppress(ConnectionResetError, ConnectionError):
            await response.write_eof()
        return response

    @staticmethod
    def _prepared(response: web.StreamResponse | None) -> bool:
        return response is not None and response.prepared

    @staticmethod
    async def _next(queue: asyncio.Queue[tuple[str, Any]], wait: float, left: float | None) -> tuple[str, Any] | None:
        timeout = wait if left is None else max(0.0, min(wait, left))
        try:
            return await asyncio.wait_for(queue.get(), timeout)
        except TimeoutError:
            return None

    @staticmethod
    async def _initial_events_then_watch(
        storage: Storage, ctx: RequestContext, namespace: str | None, options: ListOptions
    ) -> AsyncIterator[JSON]:
        """The "watch-list" protocol on top of list + watch.

        Newer client-go reflectors ask for ``sendInitialEvents=true``: the current objects as ADDED
        events, then a BOOKMARK annotated ``k8s.io/initial-events-end``, then changes.  Without the
        bookmark such a client waits until its watch times out before falling back to list.
        """
        first = ListOptions(
            label_selector=options.label_selector,
            field_selector=options.field_selector,
            resource_version=options.resource_version,
        )
        lst = await storage.list(ctx, namespace, first)
        for item in lst.get("items") or []:
            yield {"type": "ADDED", "object": item}
        rv = (lst.get("metadata") or {}).get("resourceVersion") or ""
        yield {
            "type": "BOOKMARK",
            "object": {
                "apiVersion": storage.info.api_version,
                "kind": storage.info.kind,
                "metadata": {"resourceVersion": rv, "annotations": {"k8s.io/initial-events-end": "true"}},
            },
        }
        follow = ListOptions(
            label_selector=options.label_selector,
            field_selector=options.field_selector,
            resource_version=rv or None,
            timeout_seconds=options.timeout_seconds,
            allow_bookmarks=options.allow_bookmarks,
        )
        async for event in storage.watch(ctx, namespace, follow):
            yield event

    @staticmethod
    async def _pump(events: AsyncIterator[JSON], queue: asyncio.Queue[tuple[str, Any]]) -> None:
        """Move a storage's watch events into ``queue`` so the writer can also watch the clock."""
        try:
            async for event in events:
                await queue.put(("event", event))
            await queue.put(("end", None))
        except asyncio.CancelledError:
            raise
        except errors.ApiError as err:
            await queue.put(("error", err))
        except Exception:
            log.exception("watch stream failed")
            await queue.put(("error", errors.internal("the watch stream failed; see the server log")))
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
