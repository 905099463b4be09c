"""Answers let go of their body once sent, and a list from the cache is written in chunks.

aiohttp keeps the last response of a keep-alive connection referenced until the next request on that
connection; kube-apiserver keeps connections to the service open, so a body kept with its response
would stay in memory as long as the connection idles (a list of 10 000 Applications is 15 MB).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from shared.bodies import Encoded, dumps
from shared.server.responses import LIST_CHUNK_BYTES, EncodedItems, json_response, list_response


@contextlib.asynccontextmanager
async def serving(handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                  ) -> AsyncIterator[TestClient[Any, Any]]:
    """A client of a server that answers ``GET /`` with ``handler``."""
    app = web.Application()
    app.router.add_get("/", handler)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


async def test_a_sent_body_is_released() -> None:
    sent: list[web.Response] = []

    async def handler(request: web.Request) -> web.Response:
        response = json_response({"items": [{"n": i} for i in range(1000)]})
        sent.append(response)
        return response

    async with serving(handler) as client:
        answer = await client.get("/")
        assert len((await answer.json())["items"]) == 1000
        assert sent[0].body is None, "the response still holds its body after it was sent"


async def test_a_list_of_encoded_items_is_written_in_chunks_as_the_same_json() -> None:
    """A list from the cache (every item kept encoded) is written a chunk at a time, never joined whole, and is
    byte for byte the JSON a whole-body answer would carry, with the same Content-Length."""
    items = [{"metadata": {"name": f"app-{i}", "uid": "x" * 200}, "spec": {"n": i}} for i in range(3000)]
    body = {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "RedisList", "metadata": {"resourceVersion": "7"}}
    writes: list[int] = []
    sent: list[web.Response] = []

    async def handler(request: web.Request) -> web.Response:
        whole = request.query.get("whole") == "1"
        listed = {**body, "items": items if whole else [Encoded(dumps(item)) for item in items]}
        response = json_response(listed) if whole else list_response(listed)
        if not whole:
            assert isinstance(response.body, EncodedItems)
            original = response.body.write

            async def counted(writer: Any) -> None:
                real = writer.write

                async def write(chunk: bytes) -> None:
                    writes.append(len(chunk))
                    await real(chunk)

                writer.write = write
                await original(writer)

            response.body.write = counted  # type: ignore[method-assign]
        sent.append(response)
        return response

    async with serving(handler) as client:
        chunked = await client.get("/")
        whole = await client.get("/?whole=1")
        chunked_raw, whole_raw = await chunked.read(), await whole.read()
        assert chunked_raw == whole_raw == dumps({**body, "items": items})
        assert chunked.headers["Content-Length"] == whole.headers["Content-Length"] == str(len(whole_raw))
        assert chunked.headers["Content-Type"] == "application/json"
        assert len(writes) > 2 and max(writes) < LIST_CHUNK_BYTES + 1000, writes
        assert sent[0].body is None, "the response still holds its items after they were sent"


async def test_a_list_with_decoded_or_no_items_is_written_whole() -> None:
    for listed in ({"kind": "RedisList", "items": []}, {"kind": "RedisList", "items": [{"a": 1}, Encoded(b"{}")]}):
        response = list_response(listed)
        assert isinstance(response.body, bytes) and response.body == dumps(listed)


@pytest.mark.parametrize("count", [1, 2, 700, 701, 3000])
async def test_encoded_items_are_the_json_of_the_list_at_any_length(count: int) -> None:
    class Collected:
        def __init__(self) -> None:
            self.chunks: list[bytes] = []

        async def write(self, chunk: bytes) -> None:
            self.chunks.append(chunk)

    items = [{"metadata": {"name": f"app-{i}"}, "pad": "x" * 360} for i in range(count)]
    head = {"kind": "RedisList", "metadata": {}}
    payload = EncodedItems(dumps(head), [dumps(item) for item in items])
    writer = Collected()
    await payload.write(writer)  # type: ignore[arg-type]
    assert b"".join(writer.chunks) == dumps({**head, "items": items})
    assert payload.size == len(b"".join(writer.chunks))
    assert all(len(chunk) < LIST_CHUNK_BYTES + 1000 for chunk in writer.chunks)
    assert (len(writer.chunks) > 1) == (payload.size > LIST_CHUNK_BYTES + 1000)
