"""Run a kopf operator inside a service's own event loop, next to its API server.

Each service is one process (API server + reconciler), so kopf runs embedded: its own handler
registry, no peering CRDs required, and credentials from the same kubeconfig (or service
account) the rest of the service uses.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path
from typing import Any

import kopf
import yaml

log = logging.getLogger(__name__)


def _data_or_path(entry: dict[str, Any], key: str, base: Path) -> tuple[str | None, bytes | None]:
    if entry.get(f"{key}-data"):
        return None, base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        path = Path(entry[key])
        return str(path if path.is_absolute() else base / path), None
    return None, None


def connection_info(kubeconfig: str | None, **kwargs: Any) -> Any:
    """kopf credentials from a kubeconfig's current context, or from the pod's service account.

    kopf's own kubeconfig login needs the synchronous ``kubernetes`` package; reading the few
    fields it needs is simpler than adding that dependency to the image.
    """
    if not kubeconfig:
        return kopf.login_with_service_account(**kwargs)
    path = Path(kubeconfig)
    config = yaml.safe_load(path.read_text())
    context_name = config.get("current-context")
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    base = path.parent
    ca_path, ca_data = _data_or_path(cluster, "certificate-authority", base)
    cert_path, cert_data = _data_or_path(user, "client-certificate", base)
    key_path, key_data = _data_or_path(user, "client-key", base)
    return kopf.ConnectionInfo(
        server=cluster["server"],
        ca_path=ca_path,
        ca_data=ca_data,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        certificate_path=cert_path,
        certificate_data=cert_data,
        private_key_path=key_path,
        private_key_data=key_data,
        token=user.get("token"),
        default_namespace=context.get("namespace"),
    )


async def run_operator(registry: kopf.OperatorRegistry, stop: asyncio.Event, ready: asyncio.Event) -> None:
    """Run kopf until ``stop`` is set; ``ready`` is set once kopf has started its watches."""
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    stop_future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def relay() -> None:
        await stop.wait()
        if not stop_future.done():
            stop_future.set_result(None)

    relay_task = asyncio.create_task(relay())
    ready_flag: asyncio.Event = asyncio.Event()

    async def mark_ready() -> None:
        await ready_flag.wait()
        ready.set()

    ready_task = asyncio.create_task(mark_ready())
    try:
        await kopf.operator(
            registry=registry,
            settings=settings,
            clusterwide=True,
            stop_flag=stop_future,
            ready_flag=ready_flag,
        )
    finally:
        relay_task.cancel()
        ready_task.cancel()
