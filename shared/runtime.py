"""Process plumbing every AGL service shares: flags, TLS, delegated auth, serving, shutdown.

A service supplies what is its own (its kinds, its reconciler's kopf registry) through
:class:`Wiring`; this module turns that into one running process — the API server and the
reconciler in one event loop — and stops both cleanly on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
from kubernetes_asyncio import client as kclient

from shared import authn, authz, kube, tls
from shared.apiserver import ApiServer
from shared.errors import ApiError
from shared.events import EventRecorder
from shared.kube import GVR, ObjectClient
from shared.logs import setup_logging
from shared.operator import connection_info, run_operator

log = logging.getLogger(__name__)

APISERVICES = GVR("apiregistration.k8s.io", "v1", "apiservices")
DISCOVERY_ANNOTATION = "agl.cozystack.io/kinds-changed-at"


def common_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags both entry points take (the Helm chart and the local launcher pass these)."""
    parser.add_argument("--kubeconfig", help="kubeconfig to use; in-cluster service account when omitted")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address to serve HTTPS on (default %(default)s)")
    parser.add_argument("--secure-port", type=int, default=8443, help="HTTPS port (default %(default)s)")
    parser.add_argument("--tls-cert-file", help="serving certificate (PEM); generated self-signed when omitted")
    parser.add_argument("--tls-private-key-file", help="serving key (PEM)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default %(default)s)")


@dataclass
class Context:
    """What a service's wiring gets to build its kinds and reconciler."""

    api: kclient.ApiClient
    server: ApiServer
    events: EventRecorder
    component: str

    async def discovery_changed(self, group: str, version: str) -> None:
        """Tell kube-apiserver that the kinds of ``group/version`` changed.

        kube-apiserver caches aggregated discovery and re-reads it only every minute or when the
        APIService object changes; touching an annotation on our own APIService makes new or
        removed kinds visible to kubectl within seconds instead of a minute.
        """
        patch = {"metadata": {"annotations": {DISCOVERY_ANNOTATION: str(time.time_ns())}}}
        try:
            await ObjectClient(self.api, APISERVICES).patch_merge(None, f"{version}.{group}", patch)
        except ApiError as exc:
            log.warning("could not refresh the APIService", extra={"apiservice": f"{version}.{group}",
                                                                   "error": exc.message})


@dataclass
class Wiring:
    """A service's own parts, built once the shared context exists."""

    operator: kopf.OperatorRegistry
    close: Callable[[], Awaitable[None]]


def _serving_files(args: argparse.Namespace, component: str) -> tuple[str, str]:
    if args.tls_cert_file and args.tls_private_key_file:
        return args.tls_cert_file, args.tls_private_key_file
    directory = Path(tempfile.mkdtemp(prefix=f"{component}-tls-"))
    files = tls.write_serving_cert(directory, ["localhost", socket.gethostname()], ["127.0.0.1"],
                                   common_name=component)
    log.warning("no serving certificate given: generated a self-signed one", extra={"dir": str(directory)})
    return str(files.cert_file), str(files.key_file)


async def run(args: argparse.Namespace, component: str, build: Callable[[Context], Awaitable[Wiring]]) -> None:
    """Run one service until SIGTERM/SIGINT."""
    api = await kube.api_client(args.kubeconfig)
    request_header = await authn.load_request_header_config(api)
    operator_ready = asyncio.Event()
    server = ApiServer(
        authenticator=authn.FrontProxyAuthenticator(request_header),
        authorizer=authz.from_api_client(api),
        readiness=operator_ready.is_set,
        title=component,
    )
    events = EventRecorder(api, component, socket.gethostname())
    wiring = await build(Context(api=api, server=server, events=events, component=component))
    cert, key = _serving_files(args, component)
    runner = await server.serve(args.bind_address, args.secure_port,
                                tls.server_context(cert, key, request_header.tls_client_cas()))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await run_operator(wiring.operator, stop, operator_ready)
    finally:
        log.info("shutting down")
        await runner.cleanup()
        await wiring.close()
        await api.close()


def login(kubeconfig: str | None) -> Callable[..., Any]:
    """The kopf login callable for this process's credentials (kopf passes ``settings`` & co)."""
    return lambda **kwargs: connection_info(kubeconfig, **kwargs)


Build = Callable[[Context], Awaitable[Wiring]]


def main(description: str, component: str, wiring: Callable[[argparse.Namespace], Build],
         extra_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
         argv: list[str] | None = None) -> argparse.Namespace:
    """Parse flags, set up JSON logging and run the service; returns the parsed flags."""
    parser = argparse.ArgumentParser(prog=f"python -m {component.replace('-', '_')}", description=description)
    common_arguments(parser)
    if extra_arguments is not None:
        extra_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging(args.log_level.upper())
    logging.getLogger("kopf").setLevel(logging.WARNING)
    asyncio.run(run(args, component, wiring(args)))
    return args
