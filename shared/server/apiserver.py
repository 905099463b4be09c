"""The aggregated API server (what ``k8s.io/apiserver``'s GenericAPIServer is for Go servers): a thin facade.

One :class:`ApiServer` serves every kind a service registers.  Kinds can be registered and
unregistered while serving: every request looks its storage up afresh.  The work is done by
modules with one concern each, in the order a request meets them:

* :mod:`~shared.server.middleware` -- errors rendered as ``Status``, request logs and metrics;
* :mod:`~shared.server.routes` -- probes, OpenAPI, discovery and ``/apis`` wiring;
* :mod:`~shared.server.auth` -- authentication and authorization, fail closed;
* :mod:`~shared.server.requestinfo` -- the request resolved once into frozen data;
* :mod:`~shared.server.reads`, :mod:`~shared.server.writes`, :mod:`~shared.server.watch` -- the verbs;
* :mod:`~shared.server.documents` -- discovery and OpenAPI documents with their cache.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from shared.api.rest import ResourceInfo, Storage
from shared.server.auth import Authenticator, AuthorizerLike, Gate
from shared.server.body import MAX_BODY_BYTES
from shared.server.catalog import Catalog
from shared.server.documents import Documents
from shared.server.metrics import Metrics
from shared.server.routes import Limits, Readiness, Routes

__all__ = ["ApiServer", "Authenticator", "AuthorizerLike", "Readiness"]

log = logging.getLogger(__name__)


class ApiServer:
    """Serves every registered :class:`~shared.api.rest.Storage` the way kube-apiserver serves a CRD.

    Typical wiring in a service::

        config = await authn.load_request_header_config(api_client)
        server = ApiServer(
            authenticator=authn.FrontProxyAuthenticator(config),
            authorizer=authz.from_api_client(api_client),
            group_versions=[("apps.cozystack.io", "v1alpha1")],
        )
        server.register(storage)                      # any time, also while serving
        ssl_ctx = tls.server_context(cert_file, key_file, config.tls_client_cas())
        runner = await server.serve("0.0.0.0", 8443, ssl_ctx)
    """

    def __init__(
        self,
        *,
        authenticator: Authenticator | None = None,
        authorizer: AuthorizerLike | None = None,
        readiness: Readiness | None = None,
        group_versions: Iterable[tuple[str, str]] = (),
        metrics: Metrics | None = None,
        title: str = "agl",
        max_body_bytes: int = MAX_BODY_BYTES,
        request_timeout: float = 50.0,
        watch_start_grace: float = 0.1,
        conflict_retries: int = 5,
    ) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self._catalog = Catalog(group_versions)
        self._gate = Gate(authenticator, authorizer, self.metrics)
        limits = Limits(max_body_bytes, request_timeout, watch_start_grace, conflict_retries)
        self._routes = Routes(self._catalog, self._gate, Documents(self._catalog, title), self.metrics, limits)
        self._routes.readiness = readiness

    # --- what is served --------------------------------------------------------------------------

    def register(self, storage: Storage) -> None:
        """Serve ``storage`` (replacing any storage of the same group/version/plural)."""
        self._catalog.register(storage)

    def unregister(self, group: str, version: str, plural: str) -> bool:
        """Stop serving a resource; False if it was not served.  Open watches run to their end."""
        return self._catalog.unregister(group, version, plural)

    def storage(self, group: str, version: str, plural: str) -> Storage | None:
        return self._catalog.storage(group, version, plural)

    def resources(self) -> list[ResourceInfo]:
        """The infos of every served resource."""
        return self._catalog.resources()

    def serve_group_version(self, group: str, version: str) -> None:
        """Keep ``group/version`` in discovery even with no resource.

        kube-apiserver marks an APIService unavailable (and namespace deletion stalls) when
        ``/apis/<group>/<version>`` answers 404, so a service whose kinds all come and go at
        runtime should declare its group version here.
        """
        self._catalog.keep_group_version(group, version)

    # --- who may ask, and whether we are ready -------------------------------------------------------

    def set_authenticator(self, authenticator: Authenticator | None) -> None:
        """Set how requests are authenticated; without one every request is 401."""
        self._gate.authenticator = authenticator

    def set_authorizer(self, authorizer: AuthorizerLike | None) -> None:
        """Set the authorizer; without one every resource request is 403 (fail closed)."""
        self._gate.authorizer = authorizer

    def set_readiness(self, readiness: Readiness | None) -> None:
        self._routes.readiness = readiness

    # --- serving -------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        """A fresh aiohttp application serving this server's routes."""
        return self._routes.app()

    async def serve(self, host: str, port: int, ssl_context: Any, *, reuse_port: bool = False) -> web.AppRunner:
        """Start serving; returns the runner (``await runner.cleanup()`` to stop).

        With ``port=0`` the bound port is in ``runner.addresses``. ``reuse_port`` lets other processes bind the
        same port (replicas on one host; the kernel spreads new connections over them).
        """
        runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_port=reuse_port)
        await site.start()
        log.info("serving", extra={"addresses": [str(a) for a in runner.addresses]})
        return runner
