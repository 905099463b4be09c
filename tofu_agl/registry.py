"""The live set of Tofu-backed kinds: which definitions are accepted and which kinds are served.

Acceptance of one definition depends on the others (kind names must not collide), so every
change re-decides all of them; the served set in :class:`shared.server.apiserver.ApiServer` is then
brought in line, which is what makes kinds appear and disappear without a restart.  Shaped like
helm_agl's registry on purpose; the differences are the configurable group and the status
schema (plan, outputs, phase).
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

from .definition import TofuApplicationDefinition, acceptance
from .names import APPROVE_ANNOTATION, VERSION, backing_selector
from .plan import SUBRESOURCE as PLAN_SUBRESOURCE
from .project import COLUMNS

log = logging.getLogger(__name__)

#: Builds the storage of a kind; the informer, when given, is the cache of the storage it replaces.
StorageFactory = Callable[[TofuApplicationDefinition, ResourceInfo, Informer | None], Any]

_CONDITIONS: JSON = {
    "type": "array",
    "description": "Ready, Reconciling and Stalled as kstatus reads them, derived from the Terraform; Planned "
    "and Applied from the Terraform; AwaitingApproval while a plan waits for the user.",
    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}

_STATUS: JSON = {
    "type": "object",
    "description": "Projected from the Terraform.",
    "properties": {
        "phase": {"type": "string", "description": "Ready, Planning, AwaitingApproval, Applying, Retrying, "
                  "Failed, Drifted or Deleting."},
        "observedGeneration": {"type": "integer", "format": "int64",
                               "description": "The generation tofu-controller last finished (-1 while its first "
                               "run is under way); absent until it has seen the Application."},
        "version": {"type": "string", "description": "The source revision last applied."},
        "conditions": _CONDITIONS,
        "plan": {
            "type": "object",
            "description": "Plans of the module run.",
            "properties": {
                "pending": {"type": "string", "description": "Id of the plan waiting to be applied; approve "
                            f"it with the {APPROVE_ANNOTATION} annotation."},
                "lastApplied": {"type": "string", "description": "Id of the plan applied last."},
                "summary": {
                    "type": "object",
                    "description": "What the pending plan changes, from the readable plan tofu-controller keeps "
                    "(storeReadablePlan); the whole plan is the plan subresource.",
                    "properties": {
                        "add": {"type": "integer", "description": "Resources to add."},
                        "change": {"type": "integer", "description": "Resources to change in place."},
                        "destroy": {"type": "integer", "description": "Resources to destroy."},
                        "resources": {
                            "type": "array",
                            "description": "Each resource the plan changes.",
                            "items": {"type": "object", "properties": {
                                "address": {"type": "string"},
                                "action": {"type": "string", "description": "create, update, delete or replace."},
                            }},
                        },
                    },
                },
            },
        },
        "outputs": {
            "type": "object",
            "description": "Where the module outputs are (names only, never values).",
            "properties": {
                "secretName": {"type": "string", "description": "Secret holding the outputs."},
                "names": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}


def resource_info(defn: TofuApplicationDefinition, group: str) -> ResourceInfo:
    """Discovery and OpenAPI facts for the kind ``defn`` publishes in ``group``."""
    spec_schema = structural(defn.schema) if defn.schema else {"type": "object"}
    schema: JSON = {
        "type": "object",
        "description": f"{defn.kind} is an application served by the Tofu-backed AGL "
        f"(TofuApplicationDefinition {defn.name}); its spec is the input of an OpenTofu module.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": _STATUS,
        },
    }
    return ResourceInfo(
        group=group, version=VERSION, kind=defn.kind, plural=defn.plural,
        singular=defn.singular, schema=schema, columns=COLUMNS, categories=("cozystack",),
        read_only_subresources=(PLAN_SUBRESOURCE,),
    )


@dataclass
class Served:
    definition: TofuApplicationDefinition
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
        self.definitions: dict[str, TofuApplicationDefinition] = {}
        self.verdicts: dict[str, Verdict] = {}
        self.served: dict[str, Served] = {}

    def upsert(self, obj: JSON) -> TofuApplicationDefinition:
        defn = TofuApplicationDefinition.from_object(obj)
        self.definitions[defn.name] = defn
        return defn

    def remove(self, name: str) -> None:
        self.definitions.pop(name, None)
        self.verdicts.pop(name, None)

    def accepted(self, name: str) -> TofuApplicationDefinition | None:
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


def _changed(old: TofuApplicationDefinition, new: TofuApplicationDefinition) -> bool:
    """Whether the served kind must be rebuilt (the spec changed; status writes do not count)."""
    return bool(old.to_object().get("spec") != new.to_object().get("spec"))
