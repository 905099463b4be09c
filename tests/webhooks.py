"""Webhooks served by the tests themselves, so kube-apiserver (and the services) produce faults and decisions on demand.

kube-apiserver calls admission and authorization webhooks over HTTPS with a JSON review and
expects the review back with a ``response`` (admission) or ``status`` (authorization).  A test
supplies only the decision (one per path, if it likes); this module serves it on 127.0.0.1 in a
thread, with a certificate from a CA made for the test (:func:`certificate`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shared.security import tls

#: Takes the posted review document, returns the document to answer with.
Decide = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Certificate:
    """A serving certificate and key on disk, and its CA as a webhook's ``caBundle``."""

    cert: Path
    key: Path
    ca_bundle: str


def certificate(directory: Path, *dns_names: str) -> Certificate:
    """A fresh test CA and a serving certificate for 127.0.0.1 (and ``dns_names``) signed by it."""
    ca = tls.new_ca("agl-test-webhook-ca", days=1)
    serving = tls.new_cert(ca, "127.0.0.1", dns_names=dns_names, ip_addresses=("127.0.0.1",), days=1)
    (directory / "tls.crt").write_bytes(serving.cert_pem)
    (directory / "tls.key").write_bytes(serving.key_pem)
    return Certificate(directory / "tls.crt", directory / "tls.key", base64.b64encode(ca.cert_pem).decode())


@contextlib.contextmanager
def serve(decide: Decide | Mapping[str, Decide], cert: Path, key: Path, port: int = 0) -> Iterator[int]:
    """Serve ``decide`` over TLS on 127.0.0.1:``port`` (0: any free port) until the block ends; yields the port.

    ``decide`` is one function for every path, or one per path (others are 404).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    routes = decide if isinstance(decide, Mapping) else None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            route = routes.get(urlsplit(self.path).path) if routes is not None else decide
            if route is None:
                self.send_error(404)
                return
            body = json.dumps(route(review)).encode()  # type: ignore[operator]
            with contextlib.suppress(OSError):  # the caller may have given up (a timeout under test)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that hung up mid-answer is part of some tests

    server = Server(("127.0.0.1", port), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
