"""git's smart HTTP protocol on 127.0.0.1: ``git http-backend`` run as a CGI behind a small threaded HTTP server.

Read-only (upload-pack only): what source-controller (go-git) and git clients need to fetch.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import threading
import urllib.parse
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

from .gitrepos import GitServerError, git_env

#: Largest request body accepted (after decompression); upload-pack requests of these small
#: repositories are a few kilobytes.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
#: Longest one ``git http-backend`` run may take before it is killed, so no request hangs forever.
CGI_TIMEOUT = 300.0


def http_backend() -> Path:
    """Where ``git http-backend`` is: in git's exec path (``git --exec-path``), else the Debian location."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, timeout=30,
                                   env=git_env(), check=True).stdout.strip()
        candidate = Path(exec_path) / "git-http-backend"
        if candidate.is_file():
            return candidate
    fallback = Path("/usr/lib/git-core/git-http-backend")
    if fallback.is_file():
        return fallback
    raise GitServerError("git http-backend not found (is git installed? `git --exec-path` names its directory)")


class _RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class GitHTTPServer(ThreadingHTTPServer):
    """The HTTP side: one thread per connection, each request handed to ``git http-backend``."""

    daemon_threads = True

    def __init__(self, root: Path, port: int) -> None:
        self.root = root.resolve()
        self.backend = http_backend()
        # Loopback only: these repositories are exported without authentication.
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    """A minimal CGI/1.1 bridge to ``git http-backend``.

    Python's ``http.server`` has no maintained CGI support (``CGIHTTPRequestHandler`` is deprecated
    since 3.13 and due for removal), so this small bridge is hand-written: it builds the CGI
    environment, passes the (decompressed) request body on stdin, and turns the CGI response
    (``Status:`` and other headers, a blank line, the body) into an HTTP response whose body is
    streamed as http-backend writes it. HTTP/1.0: the body ends when the connection closes.
    """

    server: GitHTTPServer
    protocol_version = "HTTP/1.0"
    server_version = "agl-gitserver"
    #: Seconds a client may stay silent before its connection is dropped.
    timeout = 60

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(split.path)
        if path == "/healthz":
            self._reply(200, "ok\n")
            return
        # Read-only: pushes are refused before git sees them (http-backend is also told so per repository).
        if path.endswith("/git-receive-pack") or "git-receive-pack" in urllib.parse.parse_qs(split.query).get(
                "service", []):
            self._reply(403, "pushing is not allowed: this server is read-only\n")
            return
        if ".." in path.split("/") or "\x00" in path:
            self._reply(404, "not found\n")
            return
        try:
            body = self._body()
        except _RequestError as exc:
            self._reply(exc.status, f"{exc}\n")
            return
        self._run_backend(path, split.query, body)

    def _body(self) -> bytes:
        """The request body, de-chunked and, when the client gzipped it (git does), decompressed."""
        if self.command != "POST":
            return b""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raw = self._read_chunked()
        else:
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                raise _RequestError(400, "invalid Content-Length") from None
            if length < 0 or length > MAX_REQUEST_BYTES:
                raise _RequestError(413, "request body too large")
            raw = self.rfile.read(length)
            if len(raw) != length:
                raise _RequestError(400, "request body shorter than its Content-Length")
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            return _gunzip(raw)
        if encoding not in ("", "identity"):
            raise _RequestError(415, f"unsupported Content-Encoding {encoding!r}")
        return raw

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _RequestError(400, "invalid chunk size") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            total += size
            if total > MAX_REQUEST_BYTES:
                raise _RequestError(413, "request body too large")
            chunk = self.rfile.read(size)
            if len(chunk) != size:
                raise _RequestError(400, "truncated chunk")
            chunks.append(chunk)
            self.rfile.readline(8)  # the CRLF after the chunk

    def _cgi_env(self, path: str, query: str, body: bytes) -> dict[str, str]:
        env = git_env({
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "HOME": str(self.server.root),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_SOFTWARE": self.server_version,
            "SERVER_PROTOCOL": self.request_version,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": str(self.server.server_address[1]),
            "REMOTE_ADDR": self.client_address[0],
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            # The body handed over is already decompressed, so its own length, and no
            # HTTP_CONTENT_ENCODING (http-backend would try to inflate it again).
            "CONTENT_LENGTH": str(len(body)),
        })
        # Protocol v2 is negotiated through this header; http-backend reads it from the CGI variable.
        if protocol := self.headers.get("Git-Protocol"):
            env["HTTP_GIT_PROTOCOL"] = protocol
        return env

    def _run_backend(self, path: str, query: str, body: bytes) -> None:
        proc = subprocess.Popen([str(self.server.backend)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=None, env=self._cgi_env(path, query, body), cwd=self.server.root)
        assert proc.stdin is not None and isinstance(proc.stdout, io.BufferedReader)
        watchdog = threading.Timer(CGI_TIMEOUT, proc.kill)
        watchdog.daemon = True
        watchdog.start()
        # Feed stdin from another thread: http-backend may start answering before it has read everything.
        feeder = threading.Thread(target=_feed, args=(proc.stdin, body), daemon=True)
        feeder.start()
        try:
            status, reason, headers = _cgi_headers(proc.stdout)
            if status == 0:
                self._reply(502, "git http-backend gave no response\n")
                return
            self.send_response(status, reason)
            for key, value in headers:
                self.send_header(key, value)
            self.end_headers()
            while chunk := proc.stdout.read1(65536):
                self.wfile.write(chunk)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away; the finally below ends http-backend
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            feeder.join(timeout=5)

    def _reply(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _gunzip(data: bytes) -> bytes:
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(data, MAX_REQUEST_BYTES)
    except zlib.error as exc:
        raise _RequestError(400, f"invalid gzip request body: {exc}") from None
    if decompressor.unconsumed_tail:
        raise _RequestError(413, "request body too large")
    if not decompressor.eof:
        raise _RequestError(400, "truncated gzip request body")
    return out


def _feed(stdin: IO[bytes], body: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):
        stdin.write(body)
    with contextlib.suppress(BrokenPipeError, OSError):
        stdin.close()


def _cgi_headers(stdout: IO[bytes]) -> tuple[int, str, list[tuple[str, str]]]:
    """Read the CGI response header block; ``(0, "", [])`` if the program wrote none."""
    status, reason = 200, "OK"
    headers: list[tuple[str, str]] = []
    seen_any = False
    while True:
        line = stdout.readline(8192)
        if not line:
            return (status, reason, headers) if seen_any else (0, "", [])
        text = line.decode("latin-1").rstrip("\r\n")
        if not text:
            return status, reason, headers
        seen_any = True
        key, _, value = text.partition(":")
        value = value.strip()
        if key.strip().lower() == "status":
            code, _, reason = value.partition(" ")
            status = int(code) if code.isdigit() else 502
        else:
            headers.append((key.strip(), value))


def make_server(root: Path, port: int = 0) -> GitHTTPServer:
    """A server on 127.0.0.1 for the repositories under ``root`` (not yet serving: call ``serve_forever``).

    ``port`` 0 picks a free one (read it from ``server_address``). Needs no cluster, so tests can run
    it in-process.
    """
    root.mkdir(parents=True, exist_ok=True)
    return GitHTTPServer(root, port)
