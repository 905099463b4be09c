"""How answers leave the server: compact JSON bodies and ``Status`` errors, as kube-apiserver writes them.

Every module that answers a request renders through here, so a client sees one content type, one
JSON style and the same ``Retry-After`` rule on every path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

from shared.api import errors
from shared.bodies import Encoded, dumps

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


def list_response(body: Any) -> web.Response:
    """A list as compact JSON; one whose items are all kept encoded (a list from the cache) is written in chunks
    of :data:`LIST_CHUNK_BYTES` (:class:`EncodedItems`), any other as :func:`json_response` writes it."""
    items = body.get("items") if isinstance(body, dict) else None
    if not items or not all(isinstance(item, Encoded) for item in items):
        return json_response(body)
    head = dumps({key: value for key, value in body.items() if key != "items"})
    return SentOnce(body=EncodedItems(head, [item.raw for item in items]), headers={"Content-Type": "application/json"})


#: How much of a list :class:`EncodedItems` hands the connection at a time.
LIST_CHUNK_BYTES = 256 * 1024


class EncodedItems(Payload):
    """A list's JSON, its items already encoded: written a chunk at a time, never joined whole.

    Joined, a list of 50 000 Applications is 66 MB: the join copied all of it into a new buffer, and the TLS
    connection, handed all of it at once, grew its output buffer to the whole answer, copying and clearing it at
    each step; the two were 40 % of the service's CPU for that list (round 30 of the performance notes). In chunks,
    kube-apiserver reads the first while the next is written, and the event loop serves other requests between
    them. The size is known beforehand, so the answer has a Content-Length.
    """

    def __init__(self, head: bytes, items: Sequence[bytes]) -> None:
        """``head`` is the list without its items, encoded (``{...}``); ``items`` each item's encoding."""
        super().__init__(items, content_type="application/json")
        self._head = head[:-1] + (b',"items":[' if len(head) > 2 else b'"items":[')
        self._items = items
        self._size = len(self._head) + sum(map(len, items)) + max(len(items) - 1, 0) + len(b"]}")

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return (self._head + b",".join(self._items) + b"]}").decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        size, start, last = 0, 0, len(self._items)
        for end, item in enumerate(self._items, 1):
            size += len(item) + 1
            if size >= LIST_CHUNK_BYTES or end == last:
                chunk = b",".join(self._items[start:end])
                await writer.write(b"".join((self._head if start == 0 else b",", chunk, b"]}" if end == last else b"")))
                size, start = 0, end


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
