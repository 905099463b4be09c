"""One way to log in: kubernetes_asyncio's loader, for the service's own client and for kopf alike.

The kubeconfig (or the pod's service account) is read once, by kubernetes_asyncio, into a
``Configuration``: server, CA, client certificate and key (inline data is written to files by
the loader), bearer token from ``token``/``tokenFile`` or an exec plugin, proxy.  kopf gets its
``ConnectionInfo`` from that same ``Configuration``, so both halves of the process always talk to
the same server as the same user, and every kubeconfig feature the loader supports works for both.

What the loader leaves to its caller is refreshing: it runs an exec plugin and reads a token file
once.  :func:`load` installs a refresh hook (kubernetes_asyncio calls it before each request)
that runs the plugin again when its credential expires and re-reads a token file every minute,
as client-go does; the in-cluster loader installs its own hook for the projected token.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from pathlib import Path
from typing import Any

import kopf
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio import config as kconfig

#: How often a ``tokenFile`` is read again (client-go re-reads it every minute too).
TOKEN_FILE_PERIOD = 60.0
#: An exec credential is renewed this long before it expires.
EXPIRY_MARGIN = datetime.timedelta(seconds=30)
#: The key kubernetes_asyncio keeps the ``Authorization`` value under.
AUTHORIZATION = "BearerToken"


class Credentials:
    """The loaded ``Configuration`` (what kubernetes_asyncio's ``ApiClient`` uses) and, for kopf, the same
    credentials as a ``ConnectionInfo``."""

    def __init__(self, configuration: kclient.Configuration, loader: Any = None) -> None:
        self.configuration = configuration
        self._loader = loader

    @property
    def expiration(self) -> datetime.datetime | None:
        """When an exec plugin's credential expires (kopf logs in again before then); None otherwise."""
        return _expiry(self._loader) if self._loader is not None else None

    async def connection_info(self) -> kopf.ConnectionInfo:
        """kopf's credentials, taken from the ``Configuration`` after the same refresh a request gets."""
        configuration = self.configuration
        authorization = await configuration.get_api_key_with_prefix(AUTHORIZATION)
        scheme, _, token = (authorization or "").partition(" ")
        return kopf.ConnectionInfo(
            server=str(configuration.host),
            ca_path=configuration.ssl_ca_cert or None,
            insecure=not configuration.verify_ssl,
            certificate_path=configuration.cert_file or None,
            private_key_path=configuration.key_file or None,
            scheme=scheme or None,
            token=token or None,
            proxy_url=configuration.proxy or None,
            expiration=self.expiration,
        )


async def load(kubeconfig: str | None) -> Credentials:
    """The process's credentials, from a kubeconfig's current context or the pod's service account."""
    configuration = kclient.Configuration()
    if not kubeconfig:
        await asyncio.to_thread(kconfig.load_incluster_config, client_configuration=configuration)
        return Credentials(configuration)
    loader = await kconfig.load_kube_config(config_file=kubeconfig, client_configuration=configuration,
                                            persist_config=False)
    # The loader keeps the current context's user as a node of the parsed file (``_user``); reading it
    # back is the only way to learn which kind of credential it loaded.
    node = getattr(loader, "_user", None)
    user = node.value if node is not None and isinstance(node.value, dict) else {}
    if "exec" in user:
        configuration.refresh_api_key_hook = _exec_refresher(loader)
    elif user.get("tokenFile") and not user.get("token"):
        base = Path(loader._get_base_path(node.path)) if node is not None else Path()
        configuration.refresh_api_key_hook = refresh = _token_file_refresher(base, str(user["tokenFile"]))
        refresh(configuration)
    return Credentials(configuration, loader)


def _expiry(loader: Any) -> datetime.datetime | None:
    value = getattr(loader, "exec_plugin_expiry", None)
    if not isinstance(value, datetime.datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)


def _exec_refresher(loader: Any) -> Any:
    """Run the exec plugin again once its credential is about to expire (never per request: a
    credential without an expiry is kept, as client-go keeps it)."""

    async def refresh(configuration: kclient.Configuration) -> None:
        expiry = _expiry(loader)
        if expiry is None or datetime.datetime.now(datetime.UTC) + EXPIRY_MARGIN < expiry:
            return
        del loader.exec_plugin_expiry  # the loader reuses an unexpired credential; this one is due
        await loader.load_from_exec_plugin()
        token = getattr(loader, "token", None)
        if token:
            configuration.api_key[AUTHORIZATION] = token

    return refresh


def _token_file_refresher(base: Path, token_file: str) -> Any:
    """Read the token file again every :data:`TOKEN_FILE_PERIOD` seconds, stripped of the newline the
    loader keeps (client-go trims it too: it is no part of the token)."""
    path = Path(token_file) if Path(token_file).is_absolute() else base / token_file
    read_at: float | None = None

    def refresh(configuration: kclient.Configuration) -> None:
        nonlocal read_at
        if read_at is not None and time.monotonic() - read_at < TOKEN_FILE_PERIOD:
            return
        read_at = time.monotonic()
        token = path.read_text().strip()
        if token:
            configuration.api_key[AUTHORIZATION] = f"Bearer {token}"

    return refresh
