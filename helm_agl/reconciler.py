"""The reconciler: ApplicationDefinition events -> served kinds, Accepted status, HelmRelease rollout.

kopf delivers every definition event (including the initial listing); each one re-decides the
registry, writes the ``Accepted`` condition where it changed, and rolls a changed, accepted
definition out to the HelmReleases of its kind.  Deleting a definition never touches a
HelmRelease: the kind just stops being served, so no user data is lost.

A rollout runs in a task of its own and is repeated with backoff until every HelmRelease took the
definition's generation: a rejected patch or a failed list is not forgotten.  Only a complete
rollout is remembered; a newer generation, a deleted definition or a lost election cancels it.
Progress is in the definition's ``status.rollout`` and in its Events.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import kopf
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, retry_if_result, wait_exponential_jitter

from shared.api.errors import ApiError
from shared.api.rollout import Settled
from shared.bodies import JSON
from shared.client.events import EventRecorder
from shared.client.kube import GVR, ObjectClient
from shared.client.leader import AlwaysLeader, Leadership
from shared.service.acceptance import ACCEPTED, Verdict, conditions_changed, status_conditions
from shared.service.definitions import list_definitions_while
from shared.service.kindroles import KindRoles

from .definition import ApplicationDefinition
from .names import DEFINITIONS_GVR, backing_selector
from .registry import KindRegistry
from .rollout import rollout_key, rollout_patch

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFINITIONS = GVR(*DEFINITIONS_GVR)
#: HelmRelease writes in flight at once during a rollout.
ROLLOUT_CONCURRENCY = 8
#: Attempts per HelmRelease when a concurrent writer makes the patch conflict.
ROLLOUT_ATTEMPTS = 5
#: Wait between rollout rounds: 0.5 s doubling up to 30 s, plus up to 1 s of jitter so definitions
#: failing together do not retry in step.
ROLLOUT_BACKOFF = wait_exponential_jitter(multiplier=0.5, max=30, jitter=1)

#: Seconds a rollout round waits for the kind's cache to sync first (it then goes ahead anyway).
CACHE_SYNC_WAIT = 60.0
Outcome = Literal["patched", "unchanged", "failed"]


@dataclass
class Rollout:
    """What one rollout round did; ``error`` says why the HelmReleases could not be listed."""

    patched: int = 0
    unchanged: int = 0
    failed: int = 0
    error: str | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def instances(self) -> int:
        return self.patched + self.unchanged + self.failed

    @property
    def complete(self) -> bool:
        return self.error is None and self.failed == 0

    def count(self, outcome: Outcome, failure: str | None = None) -> None:
        if outcome == "patched":
            self.patched += 1
        elif outcome == "unchanged":
            self.unchanged += 1
        else:
            self.failed += 1
            if failure:
                self.failures.append(failure)

    def summary(self, generation: int | None) -> str:
        if self.error is not None:
            return f"cannot list the HelmReleases of generation {generation}: {self.error}"
        text = (f"rolled out generation {generation} to {self.instances} HelmRelease(s): {self.patched} patched, "
                f"{self.unchanged} already up to date, {self.failed} failed")
        return text + (f" (first: {self.failures[0]})" if self.failures else "")


class DefinitionReconciler:
    """Keeps the registry, the definitions' status and existing HelmReleases in line."""

    def __init__(self, registry: KindRegistry, definitions: ObjectClient, releases: ObjectClient,
                 events: EventRecorder, leader: Leadership | None = None, roles: KindRoles | None = None) -> None:
        self.registry = registry
        #: The per-kind ClusterRoles, kept by the leader (:mod:`shared.service.kindroles`).
        self.roles = roles
        #: Only the leader writes (status, definition Events, rollouts); every replica keeps the registry.
        self.leader: Leadership = leader if leader is not None else AlwaysLeader()
        self._definitions = definitions
        self._releases = releases
        self._events = events
        self._lock = asyncio.Lock()
        #: Whether this replica listed every definition as leader (:meth:`resync`); it writes nothing before.
        self._listed = False
        #: Set by :meth:`close`: the service is stopping, and definition changes change nothing any more.
        self._closed = False
        #: Definition name -> the :func:`rollout_key` completely rolled out (status writes do not re-trigger).
        self._rolled_out: dict[str, tuple[object, ...]] = {}
        #: Definition name -> (rollout key, task) of the rollout in progress.
        self._rollouts: dict[str, tuple[tuple[object, ...], asyncio.Task[None]]] = {}

    @property
    def group(self) -> str:
        return self.registry.group

    async def on_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        """Handle one definition event; serialised so verdicts are decided on a consistent set."""
        async with self._lock:
            if self._closed:
                return
            name = body.get("metadata", {}).get("name", "")
            if event_type == "DELETED":
                self.registry.remove(name)
                self._rolled_out.pop(name, None)
            else:
                self._take(body)
            await self._sync()

    def _take(self, body: JSON) -> None:
        """Hold one definition as it now is; one that cannot be parsed is not served (the leader says why)."""
        name = body.get("metadata", {}).get("name", "")
        try:
            self.registry.upsert(body)
        except ValueError as exc:
            self.registry.remove(name)
            if self.leader.is_leader:
                self._events.emit(body, "Warning", "Malformed", f"definition cannot be parsed: {exc}")

    async def resync(self) -> None:
        """Redo the writes for the current definitions: status, and a rollout of each accepted one.

        Run when this replica becomes the leader. It first lists every definition, and writes nothing before
        (:mod:`shared.service.definitions`). The rollout memo only holds what this replica
        rolled out during its current term (it is emptied whenever it is not the leader), so every
        accepted definition is rolled out again; rollouts are idempotent, so one that already
        happened under the previous leader only re-checks the objects.
        """
        async with self._lock:
            if self._closed:
                return
            listed = await list_definitions_while(self._definitions, lambda: self.leader.is_leader)
            if listed is None:
                return
            names = {item.get("metadata", {}).get("name", "") for item in listed}
            for name in set(self.registry.definitions) - names:
                self.registry.remove(name)
            for item in listed:
                self._take(item)
            self._listed = True
            log.info("leading: listed every definition", extra={"definitions": len(listed)})
            await self._sync()

    async def close(self) -> None:
        """Stop serving the kinds and end the rollouts, for good: at a stop, while kopf lets its handlers
        finish. A handler under way finishes first (it holds the lock); one that comes later changes nothing,
        so no kind's cache or rollout starts again after this."""
        async with self._lock:
            self._closed = True
            self._forget_rollouts()
            await self.registry.close()

    async def lead(self) -> None:
        """Forever: on each election, resync; then wait until leadership is lost (and maybe regained)."""
        try:
            while True:
                await self.leader.wait_elected()
                log.info("leading: re-running writes for every definition",
                         extra={"definitions": len(self.registry.definitions)})
                await self.resync()
                await self.leader.wait_deposed()
                async with self._lock:
                    self._forget_rollouts()
        finally:
            self._forget_rollouts()

    async def _sync(self) -> None:
        verdicts = await self.registry.sync()
        if not self.leader.is_leader:
            # Another replica writes now; what this one rolled out before says nothing about later.
            self._forget_rollouts()
            return
        if not self._listed:
            return  # a new leader writes once it has listed every definition (resync)
        for name in list(self._rollouts):
            verdict = verdicts.get(name)
            if verdict is None or not verdict.accepted:
                self._cancel_rollout(name)
        for name, verdict in verdicts.items():
            defn = self.registry.definitions[name]
            await self._write_status(defn, verdict)
            if verdict.accepted:
                self._start_rollout(defn)
        if self.roles is not None:
            await self.roles.sync(served.storage.info for served in self.registry.served.values())

    def _start_rollout(self, defn: ApplicationDefinition) -> None:
        """Start rolling ``defn`` out unless its :func:`rollout_key` is rolled out or on its way."""
        key = rollout_key(defn)
        if self._rolled_out.get(defn.name) == key:
            return
        running = self._rollouts.get(defn.name)
        if running is not None and running[0] == key:
            return
        self._cancel_rollout(defn.name)
        task = asyncio.create_task(self._roll_out_until_done(defn), name=f"rollout of {defn.name}")
        self._rollouts[defn.name] = (key, task)

    def _cancel_rollout(self, name: str) -> None:
        running = self._rollouts.pop(name, None)
        if running is not None:
            running[1].cancel()

    def _forget_rollouts(self) -> None:
        for name in list(self._rollouts):
            self._cancel_rollout(name)
        self._rolled_out.clear()
        if self.roles is not None:
            self.roles.cancel_retry()  # the next leader keeps the roles

    async def _roll_out_until_done(self, defn: ApplicationDefinition) -> None:
        """Repeat :meth:`rollout` with backoff until it is complete, then remember the generation."""
        attempts = 0
        served = self.registry.served.get(defn.name)
        if served is not None:
            # At a start, the kind's cache lists every backing object, and so does a rollout round: one
            # after the other, the kind is served sooner and the peak of decoded objects stays one list's.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CACHE_SYNC_WAIT):
                    await served.storage.wait_synced()

        async def attempt() -> Rollout:
            nonlocal attempts
            attempts += 1
            result = await self.rollout(defn)
            await self._report(defn, result, attempts)
            return result

        async def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            log.info("rollout incomplete, retrying", extra={"definition": defn.name, "attempt": attempts,
                                                             "delay": state.upcoming_sleep, "error": repr(error)})

        # Anything unexpected (a dropped connection, a bug) is retried too: giving up would leave
        # instances behind until the next definition change, which may never come.
        retrying = AsyncRetrying(wait=ROLLOUT_BACKOFF, before_sleep=before_sleep,
                                 retry=retry_if_result(lambda r: not r.complete) | retry_if_exception_type(Exception))
        await retrying(attempt)
        self._rolled_out[defn.name] = rollout_key(defn)
        if self._rollouts.get(defn.name, (None, None))[1] is asyncio.current_task():
            del self._rollouts[defn.name]

    async def _report(self, defn: ApplicationDefinition, result: Rollout, attempts: int) -> None:
        """Write ``status.rollout`` and an Event for one rollout round."""
        progress: dict[str, Any] = {
            "observedGeneration": defn.generation, "attempts": attempts, "complete": result.complete,
            "instances": result.instances, "rolledOut": result.patched + result.unchanged, "failed": result.failed,
            "message": result.summary(defn.generation),
        }
        try:
            await self._definitions.patch_merge(None, defn.name, {"status": {"rollout": progress}},
                                                subresource="status")
        except ApiError as exc:
            log.warning("could not write rollout status", extra={"definition": defn.name, "error": exc.message})
        if result.complete:
            if result.instances:
                self._events.emit(defn.to_object(), "Normal", "RolledOut", progress["message"])
        else:
            self._events.emit(defn.to_object(), "Warning", "RolloutIncomplete",
                                      f"attempt {attempts}: {progress['message']}; retrying")

    async def _write_status(self, defn: ApplicationDefinition, verdict: Verdict) -> None:
        """``Accepted``, ``Ready``, ``Reconciling``, ``Stalled`` and ``observedGeneration`` (the generation
        decided on), written only when one of them changed."""
        status = defn.status or {}
        previous = status.get("conditions") or []
        now = datetime.datetime.now(datetime.UTC)
        conditions = status_conditions(verdict, self.registry.accepted(defn.name) is not None, defn.generation,
                                       previous, now)
        new = conditions[[c["type"] for c in conditions].index(ACCEPTED)]
        old = next((c for c in previous if c.get("type") == ACCEPTED), None)
        if not conditions_changed(previous, conditions) and status.get("observedGeneration") == defn.generation:
            return
        patch = {"status": {"observedGeneration": defn.generation, "conditions": conditions}}
        try:
            await self._definitions.patch_merge(None, defn.name, patch, subresource="status")
        except ApiError as exc:
            log.warning("could not write definition status", extra={"definition": defn.name, "error": exc.message})
            return
        if old is None or old.get("status") != new["status"] or old.get("reason") != new["reason"]:
            kind: Literal["Normal", "Warning"] = "Normal" if verdict.accepted else "Warning"
            self._events.emit(defn.to_object(), kind, verdict.reason, verdict.message)

    async def rollout(self, defn: ApplicationDefinition) -> Rollout:
        """One round: patch every HelmRelease of ``defn``'s kind that is not up to date."""
        result = Rollout()

        def stale(hr: dict[str, Any]) -> dict[str, Any] | Settled:
            return hr if rollout_patch(defn, hr, group=self.group)[0] is not None else Settled()

        try:
            items = await self._backing(defn, stale)
        except ApiError as exc:
            result.error = exc.message
            return result
        gate = asyncio.Semaphore(ROLLOUT_CONCURRENCY)

        async def one(hr: dict[str, Any]) -> None:
            async with gate:
                result.count(*await self._patch_one(defn, hr))

        for _settled in (item for item in items if isinstance(item, Settled)):
            result.count("unchanged", None)
        await asyncio.gather(*(one(hr) for hr in items if not isinstance(hr, Settled)))
        log.info("rollout round done", extra={"definition": defn.name, "patched": result.patched,
                                              "unchanged": result.unchanged, "failed": result.failed})
        return result

    async def _backing(self, defn: ApplicationDefinition, keep: Callable[[JSON], T]) -> list[T]:
        """What ``keep`` makes of each HelmRelease of ``defn``'s kind: from the kind's cache when it can answer
        as a consistent list would (no second list of every object after a start), else listed."""
        served = self.registry.served.get(defn.name)
        kept: list[T] | None = await served.storage.kept_backing(keep) if served is not None else None
        if kept is not None:
            return kept
        listing = await self._releases.list_all(None, backing_selector(defn, self.group),
                                                keep=lambda hr, _page: keep(hr))
        return list(listing.get("items") or [])

    async def _patch_one(self, defn: ApplicationDefinition, hr: dict[str, Any]) -> tuple[Outcome, str | None]:
        meta = hr["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        for _attempt in range(ROLLOUT_ATTEMPTS):
            patch, _ = rollout_patch(defn, hr, group=self.group)
            if patch is None:
                return "unchanged", None
            try:
                await self._releases.patch_merge(meta["namespace"], meta["name"], patch)
                return "patched", None
            except ApiError as exc:
                if exc.code == 404:
                    return "unchanged", None
                if exc.code != 409:
                    log.warning("rollout patch failed", extra={"helmrelease": where, "error": exc.message})
                    return "failed", f"{where}: {exc.message}"
            # Someone else wrote in between: read it again and recompute (the patch carries the RV).
            try:
                hr = await self._releases.get(meta["namespace"], meta["name"])
            except ApiError as exc:
                return ("unchanged", None) if exc.code == 404 else ("failed", f"{where}: {exc.message}")
        return "failed", f"{where}: still conflicting after {ROLLOUT_ATTEMPTS} attempts"


def operator_registry(reconciler: DefinitionReconciler, login: Any) -> kopf.OperatorRegistry:
    """kopf handlers of this service, in a registry of its own (nothing global)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def _login(**kwargs: Any) -> Any:
        return await login(**kwargs)

    @kopf.on.event(DEFINITIONS.group, DEFINITIONS.version, DEFINITIONS.plural, registry=registry)
    async def _definition_event(*, type: str, body: Any, **_: Any) -> None:
        await reconciler.on_event(type, dict(body))

    return registry
