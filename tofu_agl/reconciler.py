"""The reconciler: TofuApplicationDefinition events -> served kinds, Accepted status, Terraform rollout.

kopf delivers every definition event (including the initial listing); each one re-decides the
registry, writes the ``Accepted`` condition where it changed, and rolls a changed, accepted
definition out to the Terraforms of its kind.  Deleting a definition never touches a Terraform:
the kind just stops being served, so no user data (nor infrastructure) is lost.

What differs from helm_agl's reconciler: a change of ``workspace`` or ``backendConfig`` is never
rolled out (it would point an instance at different state and plan to re-create everything), so
the instances that kept their old values are listed in the definition's ``status.notRolledOut``.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import kopf

from shared.api.errors import ApiError
from shared.client.events import EventRecorder
from shared.client.kube import GVR, ObjectClient
from shared.client.leader import AlwaysLeader, Leadership
from shared.service.acceptance import Verdict, condition, set_condition

from .definition import TofuApplicationDefinition
from .names import backing_selector
from .registry import KindRegistry
from .rollout import not_rolled_out, rollout_patch

log = logging.getLogger(__name__)

DEFINITIONS = GVR("cozystack.io", "v1alpha1", "tofuapplicationdefinitions")
#: Terraform writes in flight at once during a rollout.
ROLLOUT_CONCURRENCY = 8
#: Attempts per Terraform when a concurrent writer makes the patch conflict.
ROLLOUT_ATTEMPTS = 5

Outcome = Literal["patched", "unchanged", "failed"]


@dataclass
class Rollout:
    """What one rollout did; ``pinned`` lists instances that kept their state location."""

    patched: int = 0
    unchanged: int = 0
    failed: int = 0
    pinned: list[dict[str, Any]] = field(default_factory=list)

    def count(self, outcome: Outcome) -> None:
        if outcome == "patched":
            self.patched += 1
        elif outcome == "unchanged":
            self.unchanged += 1
        else:
            self.failed += 1


class DefinitionReconciler:
    """Keeps the registry, the definitions' status and existing Terraforms in line."""

    def __init__(self, registry: KindRegistry, definitions: ObjectClient, terraforms: ObjectClient,
                 events: EventRecorder, leader: Leadership | None = None) -> None:
        self.registry = registry
        #: Only the leader writes (status, definition Events, rollouts); every replica keeps the registry.
        self.leader: Leadership = leader if leader is not None else AlwaysLeader()
        self._definitions = definitions
        self._terraforms = terraforms
        self._events = events
        self._lock = asyncio.Lock()
        #: Definition name -> the generation last rolled out (so status writes do not re-trigger).
        self._rolled_out: dict[str, int | None] = {}

    @property
    def group(self) -> str:
        return self.registry.group

    async def on_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        """Handle one definition event; serialised so verdicts are decided on a consistent set."""
        async with self._lock:
            name = body.get("metadata", {}).get("name", "")
            if event_type == "DELETED":
                self.registry.remove(name)
                self._rolled_out.pop(name, None)
                await self._sync()
                return
            try:
                self.registry.upsert(body)
            except ValueError as exc:
                self.registry.remove(name)
                if self.leader.is_leader:
                    await self._events.record(body, "Warning", "Malformed",
                                              f"definition cannot be parsed: {exc}")
                await self._sync()
                return
            await self._sync()

    async def resync(self) -> None:
        """Redo the writes for the current definitions: status, and a rollout of each accepted one.

        Run when this replica becomes the leader. The rollout memo only holds what this replica
        rolled out during its current term (it is emptied whenever it is not the leader), so every
        accepted definition is rolled out again; rollouts are idempotent, so one that already
        happened under the previous leader only re-checks the objects.
        """
        async with self._lock:
            await self._sync()

    async def lead(self) -> None:
        """Forever: on each election, resync; then wait until leadership is lost (and maybe regained)."""
        while True:
            await self.leader.wait_elected()
            log.info("leading: re-running writes for every definition",
                     extra={"definitions": len(self.registry.definitions)})
            await self.resync()
            await self.leader.wait_deposed()
            async with self._lock:
                self._rolled_out.clear()

    async def _sync(self) -> None:
        verdicts = await self.registry.sync()
        if not self.leader.is_leader:
            # Another replica writes now; what this one rolled out before says nothing about later.
            self._rolled_out.clear()
            return
        for name, verdict in verdicts.items():
            defn = self.registry.definitions[name]
            await self._write_status(defn, verdict)
            if verdict.accepted and self._rolled_out.get(name, -1) != defn.generation:
                self._rolled_out[name] = defn.generation
                await self.rollout(defn)

    async def _write_status(self, defn: TofuApplicationDefinition, verdict: Verdict) -> None:
        status = defn.status or {}
        previous = status.get("conditions") or []
        now = datetime.datetime.now(datetime.UTC)
        new = condition(verdict, defn.generation, previous, now)
        old = next((c for c in previous if c.get("type") == new["type"]), None)
        unchanged = old is not None and all(old.get(k) == new.get(k) for k in ("status", "reason", "message",
                                                                                "observedGeneration"))
        if unchanged and status.get("observedGeneration") == defn.generation:
            return
        patch = {"status": {"observedGeneration": defn.generation, "conditions": set_condition(previous, new)}}
        try:
            await self._definitions.patch_merge(None, defn.name, patch, subresource="status")
        except ApiError as exc:
            log.warning("could not write definition status", extra={"definition": defn.name, "error": exc.message})
            return
        if old is None or old.get("status") != new["status"] or old.get("reason") != new["reason"]:
            kind: Literal["Normal", "Warning"] = "Normal" if verdict.accepted else "Warning"
            await self._events.record(defn.to_object(), kind, verdict.reason, verdict.message)

    async def rollout(self, defn: TofuApplicationDefinition) -> Rollout:
        """Patch every Terraform of ``defn``'s kind and record which kept their state location."""
        result = Rollout()
        try:
            listing = await self._terraforms.list_all(None, backing_selector(defn, self.group))
        except ApiError as exc:
            await self._events.record(defn.to_object(), "Warning", "RolloutFailed", f"cannot list: {exc.message}")
            return result
        terraforms = listing.get("items") or []
        gate = asyncio.Semaphore(ROLLOUT_CONCURRENCY)

        async def one(tf: dict[str, Any]) -> tuple[Outcome, dict[str, Any] | None]:
            async with gate:
                outcome, pinned = await self._patch_one(defn, tf)
            return outcome, not_rolled_out(defn, tf, pinned) if pinned else None

        for outcome, entry in await asyncio.gather(*(one(tf) for tf in terraforms)):
            result.count(outcome)
            if entry is not None:
                result.pinned.append(entry)
        result.pinned.sort(key=lambda e: (e["namespace"], e["name"]))
        await self._write_not_rolled_out(defn, result.pinned)
        if terraforms:
            message = (f"rolled out generation {defn.generation} to {len(terraforms)} Terraform(s): "
                       f"{result.patched} patched, {result.unchanged} already up to date, {result.failed} failed")
            if result.pinned:
                message += (f"; {len(result.pinned)} kept their workspace/backendConfig "
                            "(see status.notRolledOut)")
            await self._events.record(defn.to_object(), "Warning" if result.failed else "Normal", "RolledOut",
                                      message)
        log.info("rollout done", extra={"definition": defn.name, "patched": result.patched,
                                        "unchanged": result.unchanged, "failed": result.failed,
                                        "not_rolled_out": len(result.pinned)})
        return result

    async def _patch_one(self, defn: TofuApplicationDefinition, tf: dict[str, Any]) -> tuple[Outcome, list[str]]:
        meta = tf["metadata"]
        pinned: list[str] = []
        for _attempt in range(ROLLOUT_ATTEMPTS):
            patch, pinned = rollout_patch(defn, tf)
            if patch is None:
                return "unchanged", pinned
            try:
                await self._terraforms.patch_merge(meta["namespace"], meta["name"], patch)
                return "patched", pinned
            except ApiError as exc:
                if exc.code == 404:
                    return "unchanged", []
                if exc.code != 409:
                    log.warning("rollout patch failed", extra={"terraform": f"{meta['namespace']}/{meta['name']}",
                                                               "error": exc.message})
                    return "failed", pinned
            # Someone else wrote in between: read it again and recompute.
            try:
                tf = await self._terraforms.get(meta["namespace"], meta["name"])
            except ApiError as exc:
                return ("unchanged", []) if exc.code == 404 else ("failed", pinned)
        return "failed", pinned

    async def _write_not_rolled_out(self, defn: TofuApplicationDefinition, entries: list[dict[str, Any]]) -> None:
        """Record on the definition which instances kept an older workspace/backendConfig."""
        current = (defn.status or {}).get("notRolledOut") or []
        if current == entries:
            return
        patch = {"status": {"notRolledOut": entries or None}}
        try:
            await self._definitions.patch_merge(None, defn.name, patch, subresource="status")
        except ApiError as exc:
            log.warning("could not write notRolledOut", extra={"definition": defn.name, "error": exc.message})


def operator_registry(reconciler: DefinitionReconciler, login: Any) -> kopf.OperatorRegistry:
    """kopf handlers of this service, in a registry of its own (nothing global)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> Any:
        return login(**kwargs)

    @kopf.on.event(DEFINITIONS.group, DEFINITIONS.version, DEFINITIONS.plural, registry=registry)
    async def _definition_event(*, type: str, body: Any, **_: Any) -> None:
        await reconciler.on_event(type, dict(body))

    return registry
