"""Every definition at once, for a leader about to write from them.

kopf hands a reconciler the definitions one event at a time and never says when its first list is complete. A
leader that wrote from the first few would act on an incomplete set: the kind ClusterRoles of every kind it had
not heard of yet would be deleted, then created again a moment later (on every start and every change of
leader, users bound to them lost the kinds meanwhile), and verdicts that depend on the other definitions (two
claiming one kind) would be written and then turned over. So a new leader lists the definitions itself first,
and writes nothing before that list.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from shared.api.errors import ApiError
from shared.bodies import JSON
from shared.client.kube import ObjectClient

log = logging.getLogger(__name__)

#: The waits between attempts while kube-apiserver does not answer the list (seconds, doubling up to the last).
RETRY_FIRST, RETRY_MAX = 0.5, 30.0


async def list_definitions_while(definitions: ObjectClient, wanted: Callable[[], bool]) -> list[JSON] | None:
    """Every definition, as one consistent list; tried again after a growing wait while it fails and ``wanted()``
    holds (the caller still leads). None when ``wanted()`` stopped holding first."""
    delay = RETRY_FIRST
    while wanted():
        try:
            listing = await definitions.list_all()
        except ApiError as exc:
            log.warning("cannot list the definitions; the leader writes once it can",
                        extra={"resource": definitions.gvr.plural, "error": exc.message, "seconds": delay})
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX)
            continue
        items: list[JSON] = listing.get("items") or []
        return items
    return None
