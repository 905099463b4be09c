"""The live set of Helm-backed kinds: which definitions are accepted and which kinds are served.

Acceptance of one definition depends on the others (kind names must not collide), so every
change re-decides all of them; the served set in :class:`shared.server.apiserver.ApiServer` is then
brought in line, which is what makes kinds appear and disappear without a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shared.api.rest import ResourceInfo, Storage
from shared.bodies import JSON
from shared.client.informer import Informer
from shared.schema.structural import structural
from shared.service.acceptance import Verdict

from .definition import ApplicationDefinition, acceptance
from .names import VERSION, backing_selector
from .project import COLUMNS

log = logging.getLogger(__name__)

#: Builds the storage of a kind; the informer, when given, is the cache of the storage it replaces.
StorageFactory = Callable[[ApplicationDefinition, ResourceInfo, Informer | None], Any]


def resource_info(defn: ApplicationDefinition, group: str) -> ResourceInfo:
    """Discovery and OpenAPI facts for the kind ``defn`` publishes in ``group``."""
    spec_schema = structural(defn.schema) if defn.schema else {"type": "object"}
    schema: JSON = {
        "type": "object",
        "description": f"{defn.kind} is an application served by the Helm-backed AGL "
        f"(ApplicationDefinition {defn.name}).",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": {
                "type": "object",
                "description": "Projected from the HelmRelease.",
                "properties": {
                    "observedGeneration": {"type": "integer", "format": "int64",
                                           "description": "The generation helm-controller last finished (-1 "
                                           "while its first run is under way); absent until it has seen the "
                                           "Application."},
                    "version": {"type": "string", "description": "The chart revision last attempted."},
                    "conditions": {"type": "array", "description": "Ready, Reconciling and Stalled as "
                                   "kstatus reads them, derived from the HelmRelease; Released from the HelmRelease.",
                                   "items": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}},
                },
            },
        },
    }
    return ResourceInfo(
        group=group, version=VERSION, kind=defn.kind, plural=defn.plural,
        singular=defn.singular, schema=schema, columns=COLUMNS, categories=("cozystack",),
    )


@dataclass
class Served:
    definition: ApplicationDefinition
    storage: Any


class KindRegistry:
    """Definitions by name, their verdicts, and the storages of the accepted ones."""

    def __init__(self, group: str, register: Callable[[Storage], None],
                 unregister: Callable[[str, str, str], object], make_storage: StorageFactory,
                 kinds_changed: Callable[[], Awaitable[None]]) -> None:
        self.group = group
        self._kinds_changed = kinds_changed
        self._register = register
        self._unregister = unregister
        self._make_storage = make_storage
        self.definitions: dict[str, ApplicationDefinition] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.served: dict[str, Served] = {}

    def upsert(self, obj: JSON) -> ApplicationDefinition:
        defn = ApplicationDefinition.from_object(obj)
        self.definitions[defn.name] = defn
        return defn

    def remove(self, name: str) -> None:
        self.definitions.pop(name, None)
        self.verdicts.pop(name, None)

    def accepted(self, name: str) -> ApplicationDefinition | None:
        served = self.served.get(name)
        return served.definition if served else None

    async def sync(self) -> dict[str, Verdict]:
        """Re-decide every definition and serve exactly the accepted kinds; returns all verdicts."""
        defs = list(self.definitions.values())
        before = {name: served.storage.info for name, served in self.served.items()}
        self.verdicts = {d.name: acceptance(d, defs) for d in defs}
        kept: dict[str, Informer] = {}
        for name in list(self.served):
            current = self.definitions.get(name)
            served = self.served[name]
            if current is None or not self.verdicts[name].accepted:
                await self._stop(name)
            elif _changed(served.definition, current):
                if backing_selector(served.definition, self.group) == backing_selector(current, self.group):
                    # Same backing objects: the new storage takes the running cache over.
                    kept[name] = self._unserve(name).hand_over()
                else:
                    await self._stop(name)
        for defn in defs:
            if self.verdicts[defn.name].accepted and defn.name not in self.served:
                storage = self._make_storage(defn, resource_info(defn, self.group), kept.pop(defn.name, None))
                storage.start()
                self._register(storage)
                self.served[defn.name] = Served(defn, storage)
                log.info("serving kind", extra={"kind": defn.kind, "plural": defn.plural, "definition": defn.name})
        if before != {name: served.storage.info for name, served in self.served.items()}:
            await self._kinds_changed()
        return dict(self.verdicts)

    def _unserve(self, name: str) -> Any:
        """Take ``name``'s kind off the API server; returns its storage."""
        served = self.served.pop(name)
        info = served.storage.info
        self._unregister(info.group, info.version, info.plural)
        log.info("stopped serving kind", extra={"kind": info.kind, "definition": name})
        return served.storage

    async def _stop(self, name: str) -> None:
        await self._unserve(name).stop()

    async def close(self) -> None:
        for name in list(self.served):
            await self._stop(name)


def _changed(old: ApplicationDefinition, new: ApplicationDefinition) -> bool:
    """Whether the served kind must be rebuilt (spec or the release annotations changed)."""
    before, after = old.to_object(), new.to_object()
    return bool(
        before.get("spec") != after.get("spec")
        or before.get("metadata", {}).get("annotations") != after.get("metadata", {}).get("annotations")
    )
