"""Answers let go of their body once sent.

aiohttp keeps the last response of a keep-alive connection referenced until the next request on that
connection; kube-apiserver keeps connections to the service open, so a body kept with its response
would stay in memory as long as the connection idles (a list of 10 000 Applications is 15 MB).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from shared.server.responses import json_response


async def test_a_sent_body_is_released() -> None:
    sent: list[web.Response] = []

    async def handler(request: web.Request) -> web.Response:
        response = json_response({"items": [{"n": i} for i in range(1000)]})
        sent.append(response)
        return response

    app = web.Application()
    app.router.add_get("/", handler)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        answer = await client.get("/")
        assert len((await answer.json())["items"]) == 1000
        assert sent[0].body is None, "the response still holds its body after it was sent"
    finally:
        await client.close()
