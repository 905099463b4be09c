"""One request to kube-apiserver on a service's ``ApiClient``: sent, timed, and its answer read.

The session, TLS and credentials are kubernetes_asyncio's (:mod:`.session`); each request is sent on
that session here rather than through the generated ``CustomObjectsApi`` methods, because those lose
data in ways that matter: ``create`` maps only HTTP 201 (a dry-run create answers 200 and would return
``None``), ``delete`` maps only 200 (a graceful delete answers 202), and ``patch`` sends
``application/json`` for a dict body, which kube-apiserver rejects with 415.  Building the path
ourselves (:mod:`.resources`) also makes the same client work for the core group (``/api/v1``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

import aiohttp
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio.client.exceptions import ApiException
from yarl import URL

from shared.api import errors
from shared.bodies import JSON, dumps, loads
from shared.client import latency

from .statuses import NETWORK_ERRORS, from_api_exception, status_error, unavailable_error

#: Bound on a whole non-watch request (connect + send + read), in seconds.
DEFAULT_TIMEOUT = 30.0
#: Server-side watch duration when the caller gives none: kube-apiserver closes the stream
#: after this many seconds and the caller re-watches from its last resourceVersion.
DEFAULT_WATCH_SECONDS = 300
#: Extra seconds a watch read may stay silent beyond ``timeoutSeconds`` before we give up on
#: the connection (a half-open TCP connection must not hang a watcher forever).
WATCH_READ_SLACK = 30.0

_MAX_ERROR_BODY = 1 << 20


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
    8 % of a rollout's service CPU; ``docs/design/perf/README.md``, round 5).  Written here because
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
    raw = await _exchange(api, method, path, query, body, content_type, request_timeout)
    return decode_answer(raw, method, path)


async def get_bytes(api: kclient.ApiClient, path: str, query: Iterable[tuple[str, str]],
                    request_timeout: float) -> bytes:
    """A GET's answer before it is decoded: a list page whose continue token is read first (:mod:`.paging`)."""
    return await _exchange(api, "GET", path, query, None, "application/json", request_timeout)


async def _exchange(api: kclient.ApiClient, method: str, path: str, query: Iterable[tuple[str, str]], body: Any,
                    content_type: str, request_timeout: float) -> bytes:
    """One request sent and its successful answer read whole; errors come out as :class:`ApiError`."""
    # Uncompressed: kube-apiserver gzips an answer over 128 KiB when asked to (aiohttp asks by default), and
    # between a service and its API server that costs both ends CPU (a list page of 500 objects is 1-2 MB)
    # to save bandwidth a cluster network has plenty of; a start with 50 000 objects lists 100 such pages.
    headers = {"Accept": "application/json", "Content-Type": content_type, "Accept-Encoding": "identity"}
    try:
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
    return raw


def decode_answer(raw: bytes, method: str, path: str) -> JSON:
    """A successful answer decoded; an object is expected (anything else reads as empty)."""
    try:
        # orjson: several times faster than the generated client's json module and "deserialize" walk, and
        # it shares the keys it decodes across objects (less memory for what the informers keep).
        data = loads(raw) if raw else {}
    except ValueError as exc:
        raise errors.internal(f"kube-apiserver answered {method} {path} with malformed JSON: {raw[:200]!r}") from exc
    return data if isinstance(data, dict) else {}


async def watch_events(api: kclient.ApiClient, path: str, query: Iterable[tuple[str, str]], *,
                       connect_timeout: float, read_timeout: float) -> AsyncGenerator[JSON, None]:
    """The events of one watch request until kube-apiserver ends the stream.

    A silent connection is abandoned after ``read_timeout`` seconds; failing to connect or losing
    the connection raises a 503 :class:`ApiError`, an error answer raises kube-apiserver's Status.
    """
    limits = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_connect=connect_timeout,
                                   sock_read=read_timeout)
    try:
        resp = await send(api, "GET", path, query,
                          headers={"Accept": "application/json", "Content-Type": "application/json"},
                          limits=limits)
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
