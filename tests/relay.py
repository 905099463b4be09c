"""The benchmark's floor: an aggregated API server that does nothing but pass each request on to kube-apiserver.

``python -m tests.relay`` serves one group version (``relay.bench.cozystack.io/v1``) through a real APIService,
and relays every request for ``/namespaces/NS/PLURAL[/NAME]`` of it, body and query as they came, to the same
path under the backing group version, answering with kube-apiserver's answer as it came.  A get or create
through it costs exactly the two extra hops aggregation adds (kube-apiserver -> server, server ->
kube-apiserver), made with the services' own HTTP and TLS stack (aiohttp on uvloop, the kube client's session
and credentials), and nothing else: no authentication or authorization of the caller, no admission,
validation, projection or Event.  ``tests.bench`` compares the services with it: what a service adds above
the relay is its own work.

With ``--canned-list FILE`` it also answers a list of every ``PLURAL`` (``/apis/GROUP/VERSION/PLURAL``) with the
bytes of ``FILE`` as they are, held in memory (read again when the file changes): the floor of a list answered from
memory, which costs aggregation's proxying of the answer and the client's decoding of it, and nothing to make it.
Bench-only; never deployed.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

import aiohttp
import uvloop
from aiohttp import web
from kubernetes_asyncio import client as kclient

from shared.client import kube
from shared.security import tls

GROUP = "relay.bench.cozystack.io"
VERSION = "v1"
#: Headers of kube-apiserver's answer handed back; hop-by-hop and length headers are aiohttp's to set.
PASSED_HEADERS = ("Content-Type", "Warning", "Audit-Id")


def discovery(plural: str, kind: str) -> dict[str, object]:
    """The group version's resource list: kube-apiserver reads it to mark the APIService Available."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
            "resources": [{"name": plural, "singularName": "", "namespaced": True, "kind": kind,
                           "verbs": ["create", "get", "list"]}]}


class CannedList:
    """A file's bytes, read again only when its modification time changes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._read: tuple[int, bytes] | None = None

    def body(self) -> bytes:
        changed = self._path.stat().st_mtime_ns
        if self._read is None or self._read[0] != changed:
            self._read = (changed, self._path.read_bytes())
        return self._read[1]


def relay_app(api: kclient.ApiClient, backing: str, plural: str, kind: str,
              canned: CannedList | None = None) -> web.Application:
    """Routes of the relay: its discovery document, every object path relayed under ``backing``, and the canned
    list when there is one."""

    async def resources(_: web.Request) -> web.Response:
        return web.json_response(discovery(plural, kind))

    async def canned_list(_: web.Request) -> web.Response:
        assert canned is not None
        return web.Response(body=canned.body(), content_type="application/json")

    async def relayed(request: web.Request) -> web.Response:
        rest = request.match_info["rest"]
        body = await request.read() if request.body_exists else None
        headers = {"Accept": request.headers.get("Accept", "application/json"),
                   "Content-Type": request.headers.get("Content-Type", "application/json")}
        resp = await kube.send(api, request.method, f"{backing}/namespaces/{rest}", request.query.items(),
                               headers=headers, body=body, limits=aiohttp.ClientTimeout(total=30))
        try:
            raw = await resp.read()
        finally:
            resp.release()
        return web.Response(status=resp.status, body=raw,
                            headers={k: v for k in PASSED_HEADERS if (v := resp.headers.get(k)) is not None})

    app = web.Application()
    app.router.add_get(f"/apis/{GROUP}/{VERSION}", resources)
    app.router.add_route("*", f"/apis/{GROUP}/{VERSION}/namespaces/{{rest:.+}}", relayed)
    if canned is not None:
        app.router.add_get(f"/apis/{GROUP}/{VERSION}/{plural}", canned_list)
    return app


async def serve(args: argparse.Namespace, client_ca: str | None) -> None:
    api = await kube.api_client(args.kubeconfig)
    context = tls.server_context(args.tls_cert_file, args.tls_private_key_file, client_ca)
    canned = CannedList(Path(args.canned_list)) if args.canned_list else None
    runner = web.AppRunner(relay_app(api, args.backing, args.plural, args.kind, canned), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.bind_address, args.secure_port, ssl_context=context).start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await api.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.relay", description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--bind-address", default="127.0.0.1")
    parser.add_argument("--secure-port", type=int, required=True)
    parser.add_argument("--tls-cert-file", required=True)
    parser.add_argument("--tls-private-key-file", required=True)
    parser.add_argument("--client-ca-file", help="front-proxy CA: client certificates are verified as the "
                                                 "services verify them")
    parser.add_argument("--backing", required=True, help="backing group version path, e.g. "
                                                         "/apis/helm.toolkit.fluxcd.io/v2")
    parser.add_argument("--plural", required=True)
    parser.add_argument("--kind", required=True)
    parser.add_argument("--canned-list", help="answer a list of every PLURAL with this file's bytes")
    args = parser.parse_args(argv)
    client_ca = Path(args.client_ca_file).read_text() if args.client_ca_file else None
    uvloop.run(serve(args, client_ca))


if __name__ == "__main__":
    main()
