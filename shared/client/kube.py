"""Async access to kube-apiserver for the services' own reads and writes.

Everything a service does to its backing objects goes through :class:`ObjectClient`, so that every
failure surfaces the same way: kube-apiserver's own ``Status`` (code, reason, message, details)
is carried through as an :class:`shared.api.errors.ApiError` -- a 422 from the backing CR's schema
reaches our client as a 422 with the same causes, a 409 stays a 409 -- and a kube-apiserver that
cannot be reached becomes a 503 with ``Retry-After`` instead of a hang.

Transport, TLS and authentication come from ``kubernetes_asyncio``'s ``ApiClient`` (its aiohttp session,
proxy settings, default headers and credential hooks); each request is sent on that session by
:func:`send` rather than through the generated ``CustomObjectsApi`` methods, because those generated
methods lose data in ways that matter here:
``create`` maps only HTTP 201 (a dry-run create answers 200 and would return ``None``),
``delete`` maps only 200 (a graceful delete answers 202), and ``patch`` sends
``application/json`` for a dict body, which kube-apiserver rejects with 415.  Building the path
ourselves also makes the same client work for the core group (``group=""``, ``/api/v1``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from shared.api import errors
from shared.api.errors import ApiError
from shared.bodies import JSON, dumps, loads
from shared.client import credentials, latency

log = logging.getLogger(__name__)

#: Bound on a whole non-watch request (connect + send + read), in seconds.
DEFAULT_TIMEOUT = 30.0
#: Server-side watch duration when the caller gives none: kube-apiserver closes the stream
#: after this many seconds and the caller re-watches from its last resourceVersion.
DEFAULT_WATCH_SECONDS = 300
#: Extra seconds a watch read may stay silent beyond ``timeoutSeconds`` before we give up on
#: the connection (a half-open TCP connection must not hang a watcher forever).
WATCH_READ_SLACK = 30.0
#: Failures that mean "kube-apiserver is not reachable right now" rather than "it said no".
#: ``asyncio.TimeoutError`` is ``TimeoutError`` (an ``OSError``) on 3.11, listed for clarity.
NETWORK_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError, OSError)

_MAX_ERROR_BODY = 1 << 20

_DEFAULT_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


async def api_client(kubeconfig: str | None) -> kclient.ApiClient:
    """An ``ApiClient`` from a kubeconfig path, or from the pod's service account when None
    (:mod:`shared.client.credentials` loads and refreshes the credentials)."""
    return client_for(await credentials.load(kubeconfig))


def client_for(login: credentials.Credentials) -> kclient.ApiClient:
    """The one way the services build an ``ApiClient``: from loaded credentials, environment settled."""
    return settle_environment(kclient.ApiClient(configuration=login.configuration))


def settle_environment(api: kclient.ApiClient) -> kclient.ApiClient:
    """Read the proxy variables once, instead of on every request.

    kubernetes_asyncio's aiohttp session trusts the environment, so aiohttp looks up ``~/.netrc`` and
    the proxy variables for each request, each in a thread of the default executor: two thread
    hand-offs per kube call, a third of a rollout's CPU samples.  The proxy for kube-apiserver's URL is
    resolved here once (``HTTPS_PROXY``/``NO_PROXY`` are honoured, as client-go does); ``.netrc``
    never applied (kube credentials are certificates and tokens).  aiohttp offers no setter for
    ``trust_env`` on an existing session, hence its attribute.
    """
    rest = api.rest_client
    if not rest.proxy:
        try:
            proxy, proxy_auth = aiohttp.helpers.get_env_proxy_for_url(URL(api.configuration.host or ""))
        except LookupError:
            pass
        else:
            rest.proxy = str(proxy)
            if proxy_auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}), "Proxy-Authorization": proxy_auth.encode()}
    rest.pool_manager._trust_env = False
    return api


@dataclass(frozen=True)
class GVR:
    """Group, version and plural resource name: enough to build every URL of a resource."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The REST path; a falsy namespace means cluster scope (or all namespaces for a list)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            base += f"/namespaces/{_seg(namespace)}"
        base += f"/{_seg(self.plural)}"
        if name:
            base += f"/{_seg(name)}"
            if subresource:
                base += f"/{_seg(subresource)}"
        return base


def _seg(value: str) -> str:
    return quote(value, safe="")


# --------------------------------------------------------------------------- error mapping


def status_error(code: int, body: bytes | str | None, headers: Mapping[str, str] | None = None) -> ApiError:
    """Build an :class:`ApiError` from an HTTP error answer of kube-apiserver.

    The ``Status`` body is kept as kube-apiserver wrote it.  Two codes are rewritten because they
    describe *our* credentials, not the caller's: a 401 would make kubectl believe the user's own
    login failed, so it becomes a 503 (the service account token may be mid-rotation).
    """
    status = _parse_status(body)
    code = int(status.get("code") or code or 500)
    reason = str(status.get("reason") or _DEFAULT_REASONS.get(code, "Unknown"))
    message = str(status.get("message") or _body_text(body) or f"kube-apiserver answered HTTP {code}")
    raw_details = status.get("details")
    details: dict[str, Any] = dict(raw_details) if isinstance(raw_details, dict) else {}
    retry_after = _retry_after(details, headers)
    if code == 401:
        return errors.unavailable(f"kube-apiserver rejected the service's credentials: {message}")
    if retry_after is None and code in (429, 503, 504):
        retry_after = 1
    return ApiError(code, reason, message, details=details or None, retry_after=retry_after)


def from_api_exception(exc: ApiException) -> ApiError:
    """Translate a ``kubernetes_asyncio`` ``ApiException``, keeping kube-apiserver's Status."""
    code = int(exc.status or 0)
    if code == 0:
        # Raised by the client itself (it could not even build the request): our bug, not theirs.
        return errors.internal(f"kube client error: {exc.reason}")
    headers = exc.headers if isinstance(exc.headers, Mapping) else None
    return status_error(code, exc.body, headers)


def unavailable_error(exc: BaseException) -> ApiError:
    """The 503 every connection failure or timeout towards kube-apiserver turns into."""
    detail = str(exc) or type(exc).__name__
    return errors.unavailable(f"kube-apiserver is unavailable: {detail}")


def to_api_error(exc: BaseException) -> ApiError:
    """Map any failure of a kube request onto the error our own client should see."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ApiException):
        return from_api_exception(exc)
    if isinstance(exc, NETWORK_ERRORS):
        return unavailable_error(exc)
    return errors.internal(f"kube request failed: {type(exc).__name__}: {exc}")


def _parse_status(body: bytes | str | None) -> JSON:
    if not body:
        return {}
    try:
        parsed = loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _body_text(body: bytes | str | None) -> str:
    if body is None:
        return ""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return text.strip()[:1000]


def _retry_after(details: Mapping[str, Any], headers: Mapping[str, str] | None) -> int | None:
    value: Any = details.get("retryAfterSeconds")
    if value is None and headers is not None:
        value = headers.get("Retry-After")
    try:
        return max(int(value), 1) if value is not None else None
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- raw requests


async def send(
    api: kclient.ApiClient,
    method: str,
    path: str,
    query: Iterable[tuple[str, str]] = (),
    *,
    headers: Mapping[str, str],
    body: Any = None,
    limits: aiohttp.ClientTimeout,
) -> aiohttp.ClientResponse:
    """One HTTP request on ``api``'s own session, proxy and credentials; the response is not read.

    What ``ApiClient.call_api`` does for a JSON request, without what costs CPU on every kube call and
    does nothing for plain dicts: its recursive walk of the body (``sanitize_for_serialization``),
    parameter tuples, the json module's encoder and the requoting of an already encoded URL (about
    8 % of a rollout's service CPU; ``docs/perf/README.md``, round 5).  Written here because
    kubernetes_asyncio has no lower entry point that keeps its per-request credential hook
    (``update_params_for_auth``, which refreshes a rotated token).  ``path`` is encoded (see
    :meth:`GVR.path`); a body is sent as given when bytes, else as its JSON; ``limits`` bound the request
    (aiohttp's own timeouts, which also cover a watch's silent connection).  The observer of ``api``'s
    requests (:mod:`shared.client.latency`) is told how long the answer took to start.
    """
    params = list(query)
    sent = {**api.default_headers, **headers}
    await api.update_params_for_auth(sent, params, ["BearerToken"])
    url = URL((api.configuration.host or "") + path + (f"?{urlencode(params)}" if params else ""), encoded=True)
    rest = api.rest_client
    settings = (("proxy", rest.proxy), ("proxy_headers", rest.proxy_headers), ("server_hostname", rest.server_hostname))
    options: dict[str, Any] = {name: value for name, value in settings if value}
    data = None if body is None or method in ("GET", "HEAD") else body if isinstance(body, bytes) else dumps(body)
    observer = latency.observer_of(api)
    started = time.perf_counter()
    try:
        response: aiohttp.ClientResponse = await rest.pool_manager.request(
            method, url, headers=sent, data=data, timeout=limits, **options)
    except Exception:
        if observer is not None:
            observer(method, latency.resource_of(path), latency.NO_ANSWER, time.perf_counter() - started)
        raise
    if observer is not None:
        observer(method, latency.resource_of(path), str(response.status), time.perf_counter() - started)
    return response


async def request_json(
    api: kclient.ApiClient,
    method: str,
    path: str,
    *,
    query: Iterable[tuple[str, str]] = (),
    body: Any = None,
    content_type: str = "application/json",
    request_timeout: float = DEFAULT_TIMEOUT,
) -> JSON:
    """One JSON request with a bounded timeout; errors come out as :class:`ApiError`.

    Usable for any kube path (SubjectAccessReviews, Events, ConfigMaps) so that every kube call
    of a service shares the same error semantics.
    """
    headers = {"Accept": "application/json", "Content-Type": content_type}
    try:
        # Decoded here, with orjson: several times faster than the generated client's json module and
        # "deserialize" walk, and it shares the keys it decodes across objects (less memory for what
        # the informers keep).
        resp = await send(api, method, path, query, headers=headers, body=body,
                          limits=aiohttp.ClientTimeout(total=request_timeout))
        try:
            raw = await resp.read()
        finally:
            resp.release()
    except ApiException as exc:
        raise from_api_exception(exc) from exc
    except NETWORK_ERRORS as exc:
        raise unavailable_error(exc) from exc
    if not 200 <= resp.status < 300:
        raise status_error(resp.status, raw, resp.headers)
    try:
        data = loads(raw) if raw else {}
    except ValueError as exc:
        raise errors.internal(f"kube-apiserver answered {method} {path} with malformed JSON: {raw[:200]!r}") from exc
    return data if isinstance(data, dict) else {}


def _flag(value: bool) -> str:
    return "true" if value else "false"


class ObjectClient:
    """CRUD, list and watch of one resource, returning plain JSON dicts.

    ``namespace=None`` (or "") addresses a cluster-scoped resource, or all namespaces for list and
    watch.  ``field_manager`` is sent on writes so managedFields name the service.
    """

    def __init__(
        self,
        api: kclient.ApiClient,
        gvr: GVR,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        field_manager: str | None = None,
    ) -> None:
        self.api = api
        self.gvr = gvr
        self.timeout = timeout
        self.field_manager = field_manager

    async def _call(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        return await request_json(
            self.api,
            method,
            path,
            query=query or [],
            body=body,
            content_type=content_type,
            request_timeout=self.timeout,
        )

    def _write_query(self, dry_run: bool, field_validation: str | None = None) -> list[tuple[str, str]]:
        query: list[tuple[str, str]] = []
        if dry_run:
            query.append(("dryRun", "All"))
        if self.field_manager:
            query.append(("fieldManager", self.field_manager))
        if field_validation:
            query.append(("fieldValidation", field_validation))
        return query

    async def get(self, namespace: str | None, name: str, *, subresource: str | None = None) -> JSON:
        return await self._call("GET", self.gvr.path(namespace, name, subresource))

    async def list(
        self,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> JSON:
        """One page of the list, as kube-apiserver returned it (``metadata.continue`` included)."""
        query: list[tuple[str, str]] = []
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if limit is not None:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        return await self._call("GET", self.gvr.path(namespace), query)

    async def list_all(
        self, namespace: str | None = None, label_selector: str = "", page_size: int = 500
    ) -> JSON:
        """Every item, following ``continue`` tokens, as one list at one resourceVersion.

        Pages of one paginated list are a consistent snapshot; if the continue token expires
        (410) mid-way, the whole list starts over so the result is never a mix of two snapshots.
        """
        for _attempt in range(3):
            items: list[JSON] = []
            token: str | None = None
            try:
                while True:
                    page = await self.list(namespace, label_selector, limit=page_size, continue_token=token)
                    items.extend(page.get("items") or [])
                    meta = page.get("metadata") or {}
                    token = meta.get("continue") or None
                    if not token:
                        page["items"] = items
                        page["metadata"] = {"resourceVersion": meta.get("resourceVersion", "")}
                        return page
            except ApiError as exc:
                if exc.code != 410 or token is None:
                    raise
                log.info("list of %s: continue token expired, listing again", self.gvr.plural)
        raise errors.unavailable(f"could not list {self.gvr.plural}: the list kept changing")

    async def create(
        self, namespace: str | None, body: JSON, dry_run: bool = False, field_validation: str = "Strict"
    ) -> JSON:
        query = self._write_query(dry_run, field_validation)
        return await self._call("POST", self.gvr.path(namespace), query, body)

    async def replace(
        self,
        namespace: str | None,
        name: str,
        body: JSON,
        dry_run: bool = False,
        *,
        field_validation: str = "Strict",
        subresource: str | None = None,
    ) -> JSON:
        """PUT; kube-apiserver answers 409 if ``metadata.resourceVersion`` is stale."""
        query = self._write_query(dry_run, field_validation)
        return await self._call("PUT", self.gvr.path(namespace, name, subresource), query, body)

    async def patch_merge(
        self,
        namespace: str | None,
        name: str,
        patch: JSON,
        dry_run: bool = False,
        *,
        subresource: str | None = None,
    ) -> JSON:
        """JSON merge patch (RFC 7386), sent explicitly as ``application/merge-patch+json``."""
        if not patch:
            # An empty merge patch changes nothing; the client library would also drop the body.
            return await self.get(namespace, name, subresource=subresource)
        query = self._write_query(dry_run)
        return await self._call(
            "PATCH",
            self.gvr.path(namespace, name, subresource),
            query,
            patch,
            content_type="application/merge-patch+json",
        )

    async def apply(self, namespace: str | None, name: str, body: JSON) -> JSON:
        """Server-side apply of ``body`` as this client's field manager, taking over conflicting fields.

        One request creates the object or brings it to ``body``; applying the same body again writes
        nothing, which is what makes a repeated write idempotent.
        """
        if not self.field_manager:
            raise ValueError("server-side apply needs a field manager")
        query = [("fieldManager", self.field_manager), ("force", "true")]
        return await self._call("PATCH", self.gvr.path(namespace, name), query, body,
                                content_type="application/apply-patch+yaml")

    async def delete(
        self, namespace: str | None, name: str, dry_run: bool = False, propagation: str = "Background"
    ) -> JSON:
        """Delete; returns what kube-apiserver returned (the object, or a Status)."""
        body: JSON = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        if dry_run:
            body["dryRun"] = ["All"]
        return await self._call("DELETE", self.gvr.path(namespace, name), None, body)

    async def watch(
        self,
        namespace: str | None = None,
        label_selector: str = "",
        resource_version: str | None = None,
        timeout_seconds: int | None = DEFAULT_WATCH_SECONDS,
        allow_bookmarks: bool = True,
        field_selector: str = "",
    ) -> AsyncGenerator[JSON, None]:
        """Yield raw ``{"type", "object"}`` events until kube-apiserver ends the stream.

        ``ERROR`` events (e.g. 410 "too old resource version") are yielded like any other event,
        for the caller to act on.  The stream is always bounded: the server ends it after
        ``timeout_seconds`` and a silent connection is abandoned shortly after that.
        Failing to connect or losing the connection raises a 503 :class:`ApiError`.
        """
        seconds = timeout_seconds if timeout_seconds else DEFAULT_WATCH_SECONDS
        query: list[tuple[str, str]] = [
            ("watch", "true"),
            ("timeoutSeconds", str(seconds)),
            ("allowWatchBookmarks", _flag(allow_bookmarks)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if resource_version is not None:
            query.append(("resourceVersion", resource_version))
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.timeout, sock_connect=self.timeout, sock_read=seconds + WATCH_READ_SLACK
        )
        try:
            resp = await send(self.api, "GET", self.gvr.path(namespace), query,
                              headers={"Accept": "application/json", "Content-Type": "application/json"},
                              limits=timeout)
        except ApiException as exc:
            raise from_api_exception(exc) from exc
        except NETWORK_ERRORS as exc:
            raise unavailable_error(exc) from exc
        try:
            if not 200 <= resp.status < 300:
                raise status_error(resp.status, await _read_error_body(resp), resp.headers)
            while True:
                line = await _read_line(resp)
                if line is None:
                    return
                if line:
                    yield line
        finally:
            resp.close()


async def _read_error_body(resp: aiohttp.ClientResponse) -> bytes:
    try:
        return await resp.content.read(_MAX_ERROR_BODY)
    except NETWORK_ERRORS:
        return b""


async def _read_line(resp: aiohttp.ClientResponse) -> JSON | None:
    """The next event of a watch stream; None at the end; {} for a blank keep-alive line."""
    try:
        raw = await resp.content.readline()
    except NETWORK_ERRORS as exc:
        raise unavailable_error(exc) from exc
    except ValueError as exc:  # a line longer than the client's buffer
        raise errors.internal(f"watch event too large: {exc}") from exc
    if not raw:
        return None
    raw = raw.strip()
    if not raw:
        return {}
    try:
        event = loads(raw)
    except ValueError as exc:
        raise errors.internal(f"malformed watch event from kube-apiserver: {raw[:200]!r}") from exc
    if isinstance(event, dict) and "type" in event:
        return event
    if isinstance(event, dict) and event.get("kind") == "Status":
        # A bare Status instead of an event: report it the way kube-apiserver reports errors in-stream.
        return {"type": "ERROR", "object": event}
    raise errors.internal(f"unexpected watch frame from kube-apiserver: {raw[:200]!r}")
