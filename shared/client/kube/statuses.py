"""kube-apiserver's answers as :class:`shared.api.errors.ApiError`: its own ``Status`` carried through.

A 422 from the backing CR's schema reaches our client as a 422 with the same causes, a 409 stays a
409, and a kube-apiserver that cannot be reached becomes a 503 with ``Retry-After`` instead of a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from shared.api import errors
from shared.api.errors import ApiError
from shared.bodies import JSON, loads

#: Failures that mean "kube-apiserver is not reachable right now" rather than "it said no".
#: ``asyncio.TimeoutError`` is ``TimeoutError`` (an ``OSError``) on 3.11, listed for clarity.
NETWORK_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, asyncio.TimeoutError, OSError)

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


def status_error(code: int, body: bytes | str | None, headers: Mapping[str, str] | None = None) -> ApiError:
    """Build an :class:`ApiError` from an HTTP error answer of kube-apiserver.

    The ``Status`` body is kept as kube-apiserver wrote it.  Two codes are rewritten because they
    describe *our* credentials, not the caller's: a 401 would make kubectl believe the user's own
    login failed, so it becomes a 503 (the service account token may be mid-rotation).
    """
    status = _parse_status(body)
    code = int(status.get("code") or code or 500)
    # A Status is relayed as kube-apiserver wrote it, a missing reason too (its storage's 500s have none); a
    # reason is made up only for an answer that is no Status (a proxy's, a transport's).
    is_status = status.get("kind") == "Status"
    reason = str(status.get("reason") or "") if is_status else _DEFAULT_REASONS.get(code, "Unknown")
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
