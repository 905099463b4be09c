"""Run a kopf operator inside a service's own event loop, next to its API server.

Each service is one process (API server + reconciler), so kopf runs embedded: its own handler
registry, no peering CRDs required, and credentials from the same loaded configuration the
rest of the service uses (:mod:`shared.client.credentials`).

kopf is always given the service's identity (:func:`shared.client.leader.default_identity`, the one its
Lease is held under): left to itself, kopf makes one up with ``getpass.getuser()``, which raises
``KeyError`` in a pod running as a uid without a passwd entry.
"""

from __future__ import annotations

import asyncio
import logging

import kopf

# kopf takes its identity as ``kopf._core.engines.peering.Identity`` (a NewType of str) and does not export the
# type (it is not in ``kopf.__all__``); kopf's own CLI builds it the same way, from this module.
from kopf._core.engines.peering import Identity

log = logging.getLogger(__name__)


async def run_operator(registry: kopf.OperatorRegistry, stop: asyncio.Event, ready: asyncio.Event, *,
                       identity: str) -> None:
    """Run kopf as ``identity`` until ``stop`` is set; ``ready`` is set once kopf has started its watches."""
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
            identity=Identity(identity),
            stop_flag=stop_future,
            ready_flag=ready_flag,
        )
    finally:
        relay_task.cancel()
        ready_task.cancel()
