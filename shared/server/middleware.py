"""The middleware around every request: errors become Status responses, and each request is logged and counted.

Handlers raise :class:`~shared.api.errors.ApiError` (or let anything else escape); this is the one
place that turns that into what kube-apiserver would answer, so no handler renders its own errors.
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
from shared.server.responses import method_not_allowed, not_found, status_response
from shared.service.metrics import Metrics

log = logging.getLogger(__name__)

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
        log.log(
            logging.DEBUG if record.quiet else logging.INFO,
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
