"""The local stand-in for kube-proxy: round robin over loopback backends, skipping one that refuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from localcluster.cluster import free_port
from localcluster.spreader import Spreader


async def _named_backend(name: bytes) -> tuple[asyncio.Server, int]:
    """A loopback server that answers every connection with its name, then closes it."""

    async def answer(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(name)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


async def _ask(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


@pytest.fixture
async def backends() -> AsyncIterator[dict[bytes, int]]:
    a, port_a = await _named_backend(b"a")
    b, port_b = await _named_backend(b"b")
    yield {b"a": port_a, b"b": port_b}
    for server in (a, b):
        server.close()


async def test_round_robin_over_the_backends(backends: dict[bytes, int]) -> None:
    spreader = Spreader([backends[b"a"], backends[b"b"]])
    port = await spreader.start()
    try:
        assert [await _ask(port) for _ in range(4)] == [b"a", b"b", b"a", b"b"]
    finally:
        await spreader.close()


async def test_a_refusing_backend_is_skipped(backends: dict[bytes, int]) -> None:
    dead = free_port()  # nothing listens there: connections are refused, as to a killed replica
    spreader = Spreader([dead, backends[b"a"]])
    port = await spreader.start()
    try:
        assert [await _ask(port) for _ in range(4)] == [b"a"] * 4
        assert spreader.relayed == {dead: 0, backends[b"a"]: 4}
    finally:
        await spreader.close()


async def test_no_backend_accepts_and_the_client_sees_the_connection_closed() -> None:
    spreader = Spreader([free_port()])
    port = await spreader.start()
    try:
        assert await _ask(port) == b""
    finally:
        await spreader.close()


async def test_route_only_pins_new_connections_until_route_all(backends: dict[bytes, int]) -> None:
    spreader = Spreader([backends[b"a"], backends[b"b"]])
    port = await spreader.start()
    try:
        spreader.route_only(backends[b"b"])
        assert [await _ask(port) for _ in range(3)] == [b"b"] * 3
        spreader.route_all()
        assert {await _ask(port) for _ in range(2)} == {b"a", b"b"}
    finally:
        await spreader.close()
