"""A TCP spreader on 127.0.0.1: the local stand-in for kube-proxy in front of a service's replicas.

In a cluster, kube-apiserver reaches an aggregated API server through its Service, and kube-proxy spreads
the Service's connections over the ready pods. Locally the replicas are processes on loopback ports and
kube-apiserver refuses loopback Endpoints, so the APIService points (through the same ExternalName Service
:mod:`localcluster.aggregation` registers) at this spreader's port instead, and the spreader forwards each
accepted connection to one backend, round robin, skipping a backend that refuses the connection — what
kube-proxy does once a dead pod has left the Endpoints. It is not kube-proxy: no health checks, no session
affinity, no Endpoints; it knows only a fixed list of loopback ports. Everything stays in 127.0.0.0/8.

Run it in-process (:class:`BackgroundSpreader`, as the tests do) or as a helper process:
``python -m localcluster.spreader --port P --backend 8443 --backend 8444``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
#: How long one backend may take to accept before the spreader tries the next (a hung, not refused, port).
CONNECT_TIMEOUT = 2.0
CHUNK = 65536


class Spreader:
    """Accepts on ``port`` and relays each connection to one of ``backends`` (loopback ports), round robin."""

    def __init__(self, backends: Sequence[int], port: int = 0) -> None:
        if not backends:
            raise ValueError("a spreader needs at least one backend")
        self.backends = list(backends)
        self.port = port
        self._next = 0
        self._server: asyncio.Server | None = None
        #: Connections relayed so far, per backend port (what the tests read to see both replicas served).
        self.relayed: dict[int, int] = {b: 0 for b in self.backends}
        #: The backends new connections go to; all unless :meth:`route_only` narrowed them.
        self.routed = list(self.backends)
        self._open: dict[int, set[asyncio.StreamWriter]] = {b: set() for b in self.backends}

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, LOOPBACK, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("spreader (local stand-in for kube-proxy) on %s:%d -> %s", LOOPBACK, self.port, self.backends)
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writers in self._open.values():  # wait_closed waits for every relayed connection to end
                for writer in list(writers):
                    writer.close()
            await self._server.wait_closed()

    def route_only(self, backend: int) -> None:
        """Send new connections to ``backend`` alone and close the open ones to the others, as when the
        other pods leave the Service's Endpoints: a test hook that pins long-lived watches to one replica."""
        self.routed = [backend]
        for other, writers in self._open.items():
            if other != backend:
                for writer in list(writers):
                    writer.close()

    def route_all(self) -> None:
        self.routed = list(self.backends)

    def _order(self) -> list[int]:
        """The backends to try for the next connection: round robin, each tried once."""
        start = self._next % len(self.routed)
        self._next = start + 1
        return self.routed[start:] + self.routed[:start]

    async def _connect(self) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter] | None:
        for backend in self._order():
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):  # not wait_for: on 3.11 it can drop a cancellation
                    reader, writer = await asyncio.open_connection(LOOPBACK, backend)
            except (TimeoutError, OSError):
                continue  # refused or hung: the next replica
            self.relayed[backend] = self.relayed.get(backend, 0) + 1
            return backend, reader, writer
        return None

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream = await self._connect()
        if upstream is None:  # no replica accepts: the client sees the connection closed, as with no endpoints
            client_writer.close()
            return
        backend, reader, writer = upstream
        links = self._open.setdefault(backend, set())
        links.update((writer, client_writer))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(CHUNK):
                    sink.write(data)
                    await sink.drain()
            # One side ended (a replica killed, a client gone): end the other, as a dead pod's connections end.
            with contextlib.suppress(OSError):
                sink.close()

        try:
            await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))
        finally:
            links.difference_update((writer, client_writer))


class BackgroundSpreader:
    """A :class:`Spreader` on its own event loop in a daemon thread, for synchronous callers."""

    def __init__(self, backends: Sequence[int], port: int = 0) -> None:
        self.spreader = Spreader(backends, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="spreader", daemon=True)

    @property
    def port(self) -> int:
        return self.spreader.port

    def route_only(self, backend: int) -> None:
        self._on_loop(self.spreader.route_only, backend)

    def route_all(self) -> None:
        self._on_loop(self.spreader.route_all)

    def _on_loop(self, function: Callable[..., None], *args: object) -> None:
        async def call() -> None:
            function(*args)

        asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)

    def __enter__(self) -> BackgroundSpreader:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.spreader.start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.spreader.close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


async def _serve(port: int, backends: Sequence[int]) -> None:
    spreader = Spreader(backends, port)
    await spreader.start()
    await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True, help="port to accept on, on 127.0.0.1")
    parser.add_argument("--backend", type=int, action="append", required=True,
                        help="a replica's port on 127.0.0.1 (repeat for each replica)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.backend))


if __name__ == "__main__":
    main()
