"""How answers leave the server: compact JSON bodies and ``Status`` errors, as kube-apiserver writes them.

Every module that answers a request renders through here, so a client sees one content type, one
JSON style and the same ``Retry-After`` rule on every path.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from shared.api import errors
from shared.bodies import dumps

#: kube-apiserver's wording for any URL nothing is served at.
NOT_FOUND_MESSAGE = "the server could not find the requested resource"


class SentOnce(web.Response):
    """A response that lets go of its body once it is sent.

    aiohttp keeps the last response of a keep-alive connection referenced until the next request on
    that connection arrives, and kube-apiserver keeps several connections to the service open: each
    would pin its last body, and a list of 10 000 Applications is 15 MB.
    """

    async def write_eof(self, data: bytes = b"") -> None:
        await super().write_eof(data)
        self._body = None
        self._compressed_body = None


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """``body`` as compact JSON (kubectl does not care about whitespace; bytes on the wire do)."""
    return SentOnce(body=dumps(body), status=status, headers={"Content-Type": "application/json", **(headers or {})})


def status_response(err: errors.ApiError) -> web.Response:
    """Render an :class:`~shared.api.errors.ApiError` as a Status; 503/429 carry Retry-After."""
    headers: dict[str, str] = {}
    if err.code in (429, 503):
        headers["Retry-After"] = str(err.retry_after if err.retry_after is not None else 1)
    return json_response(err.status(), err.code, headers)


def not_found() -> errors.ApiError:
    """The 404 for a URL this server does not serve (not for a missing object: that names the object)."""
    return errors.ApiError(404, "NotFound", NOT_FOUND_MESSAGE)


def method_not_allowed() -> errors.ApiError:
    return errors.method_not_allowed("the server does not allow this method on the requested resource")
