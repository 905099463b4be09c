"""The middleware around every request: errors become Status responses, and each request is logged and counted.

Handlers raise :class:`~shared.api.errors.ApiError` (or let anything else escape); this is the one
place that turns that into what kube-apiserver would answer, so no handler renders its own errors.

Every request is counted (``apiserver_request_*`` metrics), but like kube-apiserver, which logs a request
only at a higher verbosity or when it is slow, a service does not log every request by default: the
line costs more CPU than the projection of a get (docs/design/perf/README.md, round 8).  The request log is its
own logger, :data:`REQUEST_LOGGER`: a failed (5xx) or slow request is a warning; every other request is
at info, which the services show with ``--log-requests``; health probes are at debug.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from shared.api import errors
from shared.server.body import MAX_BODY_BYTES
from shared.server.metrics import Metrics
from shared.server.responses import method_not_allowed, not_found, status_response

log = logging.getLogger(__name__)
#: The request log's logger; ``--log-requests`` lowers its level to info.
REQUEST_LOGGER = "shared.server.requests"
requests_log = logging.getLogger(REQUEST_LOGGER)
#: A request that is not a watch and takes longer than this is logged as slow (kube-apiserver traces
#: requests over a second, or half a second for some verbs, the same way).
SLOW_REQUEST_SECONDS = 1.0

@dataclass
class RequestLog:
    """What the log line and the metrics say about a request; handlers fill it in as they learn it."""

    verb: str
    group: str = ""
    resource: str = ""
    user: str = ""
    request_id: str = ""
    #: Health and metrics probes: logged at debug and not counted.
    quiet: bool = False


REQUEST_LOG = web.RequestKey("agl_request_log", RequestLog)


def middleware(metrics: Metrics) -> Middleware:
    """The middleware for one server: renders errors, logs each request and observes its metrics."""

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        record = RequestLog(verb=request.method.lower(), request_id=uuid.uuid4().hex[:16])
        request[REQUEST_LOG] = record
        response = await _respond(request, handler, record)
        elapsed = time.monotonic() - started
        if not record.quiet:
            metrics.observe(record.verb, record.group, record.resource, response.status, elapsed)
        level = request_level(record, response.status, elapsed)
        if requests_log.isEnabledFor(level):
            requests_log.log(
                level,
                "request",
                extra={
                    "method": request.method,
                    "path": request.path,
                    "query": request.query_string,
                    "user": record.user,
                    "verb": record.verb,
                    "resource": record.resource,
                    "code": response.status,
                    "duration_ms": round(elapsed * 1000, 2),
                    "request_id": record.request_id,
                },
            )
        return response

    return observe


def log_every_request(enabled: bool) -> None:
    """Show every request's line (``--log-requests``), or only failed and slow ones (the default)."""
    requests_log.setLevel(logging.INFO if enabled else logging.WARNING)


def request_level(record: RequestLog, code: int, elapsed: float) -> int:
    """How loud one request's log line is: a probe is debug, a failure or a slow answer a warning."""
    if record.quiet:
        return logging.DEBUG
    if code >= 500 or (elapsed > SLOW_REQUEST_SECONDS and record.verb != "watch"):
        return logging.WARNING
    return logging.INFO


async def _respond(request: web.Request, handler: Handler, record: RequestLog) -> web.StreamResponse:
    try:
        return await handler(request)
    except errors.ApiError as err:
        return status_response(err)
    except web.HTTPException as exc:
        return _http_exception(exc)
    except Exception:
        log.exception(
            "unhandled error serving request",
            extra={"method": request.method, "path": request.path, "request_id": record.request_id},
        )
        return status_response(errors.internal("an internal error occurred; see the server log"))


def _http_exception(exc: web.HTTPException) -> web.Response:
    """aiohttp's own refusals (unknown route, wrong method, body too large) in kube's words."""
    if exc.status == 404:
        return status_response(not_found())
    if exc.status == 405:
        return status_response(method_not_allowed())
    if exc.status == 413:
        return status_response(errors.too_large(MAX_BODY_BYTES))
    reason = exc.reason.replace(" ", "") or "Unknown"
    return status_response(errors.ApiError(exc.status, reason, exc.text or exc.reason))
