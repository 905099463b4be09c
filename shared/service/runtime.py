"""Process plumbing every AGL service shares: flags, TLS, delegated auth, serving, shutdown.

A service supplies what is its own (its kinds, its reconciler's kopf registry) through
:class:`Wiring`; this module turns that into one running process — the API server and the
reconciler in one event loop — and stops both cleanly on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import uvloop
from kubernetes_asyncio import client as kclient

from shared.api.errors import ApiError
from shared.client import credentials, early, latency, leader
from shared.client.events import EventRecorder
from shared.client.kube import GVR, ObjectClient, client_for
from shared.security import authn, authz, dynamic, tls, tokens
from shared.server.apiserver import ApiServer
from shared.server.middleware import log_every_request
from shared.service import memory, shutdown
from shared.service.logs import setup_logging
from shared.service.operator import run_operator

log = logging.getLogger(__name__)

#: Event loop implementations: both run the same code; uvloop is faster at TLS, where most time goes.
EVENT_LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}
APISERVICES = GVR("apiregistration.k8s.io", "v1", "apiservices")
DISCOVERY_ANNOTATION = "agl.cozystack.io/kinds-changed-at"


def common_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags both entry points take (the Helm chart and the local launcher pass these)."""
    parser.add_argument("--kubeconfig", help="kubeconfig to use; in-cluster service account when omitted")
    parser.add_argument("--bind-address", default="0.0.0.0", help="address to serve HTTPS on (default %(default)s)")
    parser.add_argument("--secure-port", type=int, default=8443, help="HTTPS port (default %(default)s)")
    parser.add_argument("--reuse-port", action="store_true",
                        help="bind the port with SO_REUSEPORT: several replicas on one host share it and the kernel "
                             "spreads connections over them, as kube-proxy spreads a Service's over its pods")
    parser.add_argument("--tls-cert-file", help="serving certificate (PEM); generated self-signed when omitted")
    parser.add_argument("--tls-private-key-file", help="serving key (PEM)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default %(default)s)")
    parser.add_argument("--log-requests", action="store_true",
                        help="log every request (by default only failed (5xx) and slow ones, as kube-apiserver does)")
    parser.add_argument("--leader-elect", action="store_true",
                        help="only the holder of a Lease writes (status, Events, rollouts); every replica serves")
    parser.add_argument("--leader-elect-namespace", default=None,
                        help="namespace of the Lease (default: the pod's namespace, else 'default')")
    parser.add_argument("--leader-elect-lease-name", default=None,
                        help="name of the Lease (default: <component>-reconciler)")
    parser.add_argument("--authorization-always-allow-groups", type=_groups,
                        default=",".join(authz.ALWAYS_ALLOWED_GROUPS),
                        help="comma-separated groups allowed without a SubjectAccessReview, as kube-apiserver "
                             "allows them anyway (default %(default)s; empty: review every request)")
    parser.add_argument("--read-fence-namespace", default=None,
                        help="namespace of the objects whose writes let a consistent list be answered from the "
                             "watch cache (default: the pod's namespace, else 'default'); see docs/operating.md")
    parser.add_argument("--no-read-fence", dest="read_fence", action="store_false",
                        help="never write a read fence: a consistent list the cache cannot prove current goes "
                             "to kube-apiserver")
    parser.add_argument("--shutdown-delay", type=float, default=0.0, metavar="SECONDS",
                        help="after SIGTERM, serve on this long with /readyz failing before stopping, while the "
                             "Service's endpoints drop the replica (default %(default)s; the chart sets 5)")
    parser.add_argument("--event-loop", choices=sorted(EVENT_LOOPS), default="uvloop",
                        help="uvloop (default: its TLS and sockets take a third less CPU per request than "
                             "asyncio's, see docs/benchmarks.md) or the standard asyncio loop")


def _groups(value: str) -> tuple[str, ...]:
    return tuple(group.strip() for group in value.split(",") if group.strip())


@dataclass
class Context:
    """What a service's wiring gets to build its kinds and reconciler."""

    api: kclient.ApiClient
    server: ApiServer
    events: EventRecorder
    component: str
    #: The process's credentials: ``api`` uses them, and kopf logs in with :meth:`kopf_login`.
    login: credentials.Credentials
    #: Whether this replica may write; always the leader when ``--leader-elect`` is off.
    leader: leader.Leadership = field(default_factory=leader.AlwaysLeader)
    #: Where each kind's read fence lives (:mod:`shared.client.fence`); None: no fences.
    fence_namespace: str | None = None

    async def kopf_login(self, **_: Any) -> kopf.ConnectionInfo:
        """The kopf login handler: the same credentials ``api`` uses, refreshed as a request would refresh them."""
        return await self.login.connection_info()

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
    #: Long-running coroutines started next to the operator and cancelled on shutdown.
    tasks: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


def _serving_files(args: argparse.Namespace, component: str) -> tuple[str, str]:
    if args.tls_cert_file and args.tls_private_key_file:
        return args.tls_cert_file, args.tls_private_key_file
    directory = Path(tempfile.mkdtemp(prefix=f"{component}-tls-"))
    files = tls.write_serving_cert(directory, ["localhost", socket.gethostname()], ["127.0.0.1"],
                                   common_name=component)
    log.warning("no serving certificate given: generated a self-signed one", extra={"dir": str(directory)})
    return str(files.cert_file), str(files.key_file)


def _elector(args: argparse.Namespace, api: kclient.ApiClient, component: str,
             identity: str) -> leader.LeaderElector | None:
    if not getattr(args, "leader_elect", False):
        return None
    namespace = args.leader_elect_namespace or leader.default_namespace()
    name = args.leader_elect_lease_name or f"{component}-reconciler"
    log.info("leader election on", extra={"lease": f"{namespace}/{name}", "identity": identity})
    return leader.LeaderElector(api, namespace, name, identity)


def _fence_namespace(args: argparse.Namespace) -> str | None:
    if not getattr(args, "read_fence", True):
        return None
    namespace: str = getattr(args, "read_fence_namespace", None) or leader.default_namespace()
    log.info("consistent lists may be answered from the watch cache after a read fence",
             extra={"fence_namespace": namespace})
    return namespace


def _trust(config: authn.RequestHeaderConfig, authenticator: authn.FrontProxyAuthenticator,
           serving: dynamic.ServingTLS) -> None:
    """A new front-proxy configuration: the TLS layer first, so a newly trusted CA already handshakes
    when the authenticator starts accepting it."""
    serving.set_client_ca(config.tls_client_cas())
    authenticator.config = config


async def _freeze_when_ready(ready: asyncio.Event) -> None:
    """Once serving and reconciling, freeze what the start built (see :mod:`shared.service.memory`)."""
    await ready.wait()
    log.info("startup objects frozen: full collections no longer traverse them",
             extra={"frozen_objects": memory.freeze_startup_objects()})


async def _take_signals_when_ready(ready: asyncio.Event, stop: asyncio.Event) -> None:
    """kopf has installed its signal handlers by the time it is ready; from then on a signal sets ``stop``
    (see :mod:`shared.service.shutdown`). A signal before that stops kopf through its own handlers."""
    await ready.wait()
    shutdown.take_signals(stop)


async def _logged(task: Callable[[], Awaitable[None]]) -> None:
    """Run a background coroutine; a crash is logged (the service keeps serving) instead of lost."""
    try:
        await task()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("background task failed", extra={"task": getattr(task, "__qualname__", repr(task))})


async def run(args: argparse.Namespace, component: str, build: Callable[[Context], Awaitable[Wiring]]) -> None:
    """Run one service until SIGTERM/SIGINT."""
    login = await credentials.load(args.kubeconfig)
    api = client_for(login)
    request_header = await authn.load_request_header_config(api)
    front_proxy = authn.FrontProxyAuthenticator(request_header)
    authenticator = authn.DelegatingAuthenticator(front_proxy, tokens.TokenAuthenticator(tokens.token_review(api)))
    operator_ready, stop = asyncio.Event(), asyncio.Event()
    server = ApiServer(
        authenticator=authenticator,
        authorizer=authz.from_api_client(api, always_allow_groups=args.authorization_always_allow_groups),
        readiness=lambda: operator_ready.is_set() and not stop.is_set(),
        title=component,
    )
    latency.observe_requests(api, server.metrics.observe_kube)
    events = EventRecorder(api, component, socket.gethostname())
    elector = _elector(args, api, component, identity := leader.default_identity())  # kopf's identity too
    ctx = Context(api=api, server=server, events=events, component=component, login=login,
                  fence_namespace=_fence_namespace(args))
    if elector is not None:
        ctx.leader = elector
    wiring = await build(ctx)
    cert, key = _serving_files(args, component)
    serving = dynamic.ServingTLS(cert, key, request_header.tls_client_cas())
    trust = dynamic.RequestHeaderWatch(api, lambda config: _trust(config, front_proxy, serving))
    trust.start()
    runner = await server.serve(args.bind_address, args.secure_port, serving.context, reuse_port=args.reuse_port)
    background = [asyncio.create_task(_logged(task)) for task in [
        *wiring.tasks, serving.watch_files, memory.release_free_heap_when_grown,
        lambda: _freeze_when_ready(operator_ready), lambda: _take_signals_when_ready(operator_ready, stop)]]
    if elector is not None:
        background.append(asyncio.create_task(_logged(elector.run)))
    operator_stop = asyncio.Event()  # set after the delay: kopf would cancel what still serves 5 s after it is told
    told: list[float] = []

    async def stop_operator() -> None:
        told.append(time.monotonic())
        operator_stop.set()

    steps: list[shutdown.Step] = [
        ("reconciler told to stop", stop_operator),  # kopf ends its watches and waits for its handlers meanwhile
        ("serving", runner.cleanup),  # open watches end, requests in flight get up to 5 s
        ("background tasks", lambda: shutdown.cancel_and_wait(background)),  # the lead and relay loops among them
        ("front-proxy watch", trust.stop),
        ("kinds", wiring.close),  # after the reconciler's handler in progress, if any; none starts a cache after
    ]
    if elector is not None:
        steps.append(("lease release", elector.release))  # nothing of this replica writes as leader any more
    steps.append(("events", events.stop))  # after the last request and reconcile: their Events are written
    # Started before kopf, so that kopf's stop neither counts it among its own tasks nor cancels it.
    stopping = asyncio.create_task(shutdown.stop_when_asked(stop, steps, args.shutdown_delay), name="service stop")
    try:
        await run_operator(wiring.operator, operator_stop, operator_ready, identity=identity)
    finally:
        if told:  # kopf waits up to 5 s for the tasks started after it: this says whether any of ours was left
            log.info("reconciler stopped", extra={"seconds": round(time.monotonic() - told[0], 3)})
        stop.set()  # kopf may have stopped by itself: a signal before it was ready, or a failure
        asked = await stopping
        await api.close()
        log.info("shut down", extra={"seconds": round(time.monotonic() - asked, 3)})


Build = Callable[[Context], Awaitable[Wiring]]


def main(description: str, component: str, wiring: Callable[[argparse.Namespace], Build],
         extra_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
         argv: list[str] | None = None, listed_ahead: early.Lister | None = None) -> argparse.Namespace:
    """Parse flags, set up JSON logging and run the service; returns the parsed flags.  ``listed_ahead``: the
    entry point's lister (:mod:`shared.client.early`), whose outcome is logged."""
    parser = argparse.ArgumentParser(prog=f"python -m {component.replace('-', '_')}", description=description)
    common_arguments(parser)
    if extra_arguments is not None:
        extra_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging(args.log_level.upper())
    log_every_request(args.log_requests)
    if listed_ahead is not None:
        listed_ahead.report()
    if memory.pin_mmap_threshold():
        log.info("large blocks are mmapped, and leave the process when freed",
                 extra={"mmap_threshold_bytes": memory.MMAP_THRESHOLD})
    else:
        log.info("the allocator is not glibc's: large freed blocks follow its own policy")
    logging.getLogger("kopf").setLevel(logging.WARNING)
    with asyncio.Runner(loop_factory=EVENT_LOOPS[args.event_loop]) as runner:
        runner.run(run(args, component, wiring(args)))
    return args
