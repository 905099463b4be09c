"""Webhooks served by the tests themselves, so kube-apiserver produces faults and decisions on demand.

kube-apiserver calls admission and authorization webhooks over HTTPS with a JSON review and
expects the review back with a ``response`` (admission) or ``status`` (authorization).  A test
supplies only the decision; this module serves it on 127.0.0.1 in a thread.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: Takes the posted review document, returns the document to answer with.
Decide = Callable[[dict[str, Any]], dict[str, Any]]


@contextlib.contextmanager
def serve(decide: Decide, cert: Path, key: Path, port: int = 0) -> Iterator[int]:
    """Serve ``decide`` over TLS on 127.0.0.1:``port`` (0: any free port) until the block ends; yields the port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps(decide(review)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
