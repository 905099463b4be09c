"""Forward TCP ports between the machine's loopback and the node's network namespace.

``python -m localcluster.portforward --netns PATH host:127.0.0.1:P=node:127.0.0.1:Q ...``

Each rule listens in one namespace and connects in the other. A socket belongs to the namespace its creator was in
when it was made, so this one process switches namespaces (``setns``) around the creation of each socket and then
uses it from wherever it is: no address of the machine's own interfaces is involved on either side. Written here
because no packaged forwarder crosses namespaces (socat, for one, lives in a single namespace).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CLONE_NEWNET = 0x40000000
log = logging.getLogger("localcluster.portforward")


@dataclass(frozen=True)
class Rule:
    listen_ns: str
    listen: tuple[str, int]
    connect_ns: str
    connect: tuple[str, int]


def parse_rule(text: str) -> Rule:
    """``host:127.0.0.1:8443=node:127.0.0.1:6443``: each side names its namespace (``host`` or ``node``)."""
    try:
        left, right = text.split("=")
        sides = []
        for side in (left, right):
            ns, host, port = side.split(":")
            if ns not in ("host", "node"):
                raise ValueError(ns)
            sides.append((ns, host, int(port)))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a rule NS:ADDR:PORT=NS:ADDR:PORT: {text!r}") from exc
    (lns, lhost, lport), (cns, chost, cport) = sides
    return Rule(lns, (lhost, lport), cns, (chost, cport))


class Namespaces:
    """Open handles on the two network namespaces, and a way to make a socket in either."""

    def __init__(self, node_path: str) -> None:
        self._fds = {"host": os.open("/proc/self/ns/net", os.O_RDONLY), "node": os.open(node_path, os.O_RDONLY)}
        self._libc = ctypes.CDLL(None, use_errno=True)

    def _enter(self, name: str) -> None:
        if self._libc.setns(self._fds[name], CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into the {name} network namespace: {os.strerror(err)}")

    @contextmanager
    def entered(self, name: str) -> Iterator[None]:
        self._enter(name)
        try:
            yield
        finally:
            self._enter("host")

    def socket(self, name: str) -> socket.socket:
        with self.entered(name):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        return sock


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            writer.close()


async def _serve(spaces: Namespaces, rule: Rule) -> asyncio.Server:
    loop = asyncio.get_running_loop()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        upstream = spaces.socket(rule.connect_ns)
        try:
            await asyncio.wait_for(loop.sock_connect(upstream, rule.connect), timeout=10)
        except (TimeoutError, OSError) as exc:
            log.warning("connect %s %s:%d failed: %s", rule.connect_ns, *rule.connect, exc)
            upstream.close()
            client_writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(sock=upstream)
        await asyncio.gather(_pipe(client_reader, up_writer), _pipe(up_reader, client_writer))
        up_writer.close()
        client_writer.close()

    listener = spaces.socket(rule.listen_ns)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(rule.listen)
    listener.listen(256)
    return await asyncio.start_server(handle, sock=listener)


async def main_async(node_path: str, rules: list[Rule]) -> None:
    spaces = Namespaces(node_path)
    servers = [await _serve(spaces, rule) for rule in rules]
    for rule in rules:
        log.info("forwarding %s %s:%d -> %s %s:%d", rule.listen_ns, *rule.listen, rule.connect_ns, *rule.connect)
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m localcluster.portforward", description=__doc__)
    parser.add_argument("--netns", required=True, help="path of the node's network namespace")
    parser.add_argument("rules", nargs="+", type=parse_rule)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(main_async(args.netns, args.rules))


if __name__ == "__main__":
    main()
