"""Lease-based leader election, so only one replica of a service writes while all of them serve.

Every replica serves the API and keeps its in-memory kind registry current; only the replica holding
a ``coordination.k8s.io/v1`` Lease writes (definition status, definition Events, rollouts). The
election is kubernetes_asyncio's ``leaderelection`` with its ``LeaseLock`` -- client-go's algorithm:
a candidate takes the Lease once its record has not changed for ``lease_duration`` by the candidate's
own clock, every write is a PUT carrying the resourceVersion it read (of two racing candidates one
gets 409), and the holder steps down when it has not renewed within ``renew_deadline``.

This module adapts it to what the reconcilers need and covers what the library gets wrong:

- callers ask :attr:`LeaderElector.is_leader` before a write and await ``wait_elected`` /
  ``wait_deposed`` (the library only calls back on start/stop), and a replica that lost the Lease
  stands again (the library's ``run()`` returns after one term);
- one attempt is bounded by ``retry_period``: the library's Lease calls have no timeout at all, so a
  leader whose renewal hangs would go on writing after a follower took the Lease over, and a
  transport error (not an ``ApiException``) escapes the library's loop instead of counting as a
  failed attempt (``test_hung_renewal_steps_down_before_the_lease_expires`` in
  tests/integration/test_leader_election.py);
- ``leaseTransitions`` counts changes of holder as client-go does (the library never sets it);
- :meth:`LeaderElector.release` gives the Lease up on shutdown (the library has no release), so
  another replica takes over at once instead of after the Lease expires.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from kubernetes_asyncio import client as kclient
from kubernetes_asyncio.leaderelection.electionconfig import Config
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class Leadership(Protocol):
    """What a reconciler needs to know: whether it may write now, and when it starts/stops being allowed."""

    @property
    def is_leader(self) -> bool: ...

    async def wait_elected(self) -> None: ...

    async def wait_deposed(self) -> None: ...


class AlwaysLeader:
    """Leadership when election is off: a single replica is always the leader."""

    @property
    def is_leader(self) -> bool:
        return True

    async def wait_elected(self) -> None:
        return None

    async def wait_deposed(self) -> None:
        await asyncio.Event().wait()  # never


def default_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE, environ: Mapping[str, str] | None = None) -> str:
    """The pod's namespace: ``POD_NAMESPACE`` (the chart sets it from ``metadata.namespace`` through the Downward
    API), else its service account mount, else ``default`` out of cluster."""
    pod_namespace = (os.environ if environ is None else environ).get("POD_NAMESPACE", "").strip()
    if pod_namespace:
        return pod_namespace
    try:
        return path.read_text().strip() or "default"
    except OSError:
        return "default"


def default_identity(environ: Mapping[str, str] | None = None) -> str:
    """This replica's name, for its Lease and for kopf: the pod's name (``POD_NAME``, which the chart sets from
    ``metadata.name`` through the Downward API), unique among a Deployment's live pods; out of a cluster (the local
    stack runs the services as processes) ``<hostname>_<pid>``, so two processes on one host never share one.

    Nothing here asks for the user: a pod runs as a uid without a passwd entry (65532 on python:3.11-slim), where
    ``getpass.getuser()`` -- what kopf's own ``detect_own_id`` calls -- raises ``KeyError``."""
    pod_name = (os.environ if environ is None else environ).get("POD_NAME", "").strip()
    return pod_name or f"{socket.gethostname()}_{os.getpid()}"


class _CountingLeaseLock(LeaseLock):
    """The library's Lease lock, also counting ``leaseTransitions`` when the holder changes."""

    def update_lease(self, leader_election_record: LeaderElectionRecord,
                     current_spec: kclient.V1LeaseSpec | None = None) -> kclient.V1LeaseSpec:
        previous = current_spec.holder_identity if current_spec is not None else None
        transitions = (current_spec.lease_transitions or 0) if current_spec is not None else 0
        spec: kclient.V1LeaseSpec = super().update_lease(leader_election_record, current_spec)
        changed = current_spec is not None and previous != leader_election_record.holder_identity
        spec.lease_transitions = transitions + 1 if changed else transitions
        return spec


class _BoundedElection(LeaderElection):
    """The library's election with every attempt bounded in time and any failure counted as a failed attempt."""

    async def try_acquire_or_renew(self) -> bool:
        lock = self.election_config.lock
        try:
            async with asyncio.timeout(self.election_config.retry_period):
                return await super().try_acquire_or_renew()
        except Exception as exc:  # the API server unreachable, slow or answering nonsense: try again later
            log.warning("leader election: lease call failed",
                        extra={"lease": f"{lock.namespace}/{lock.name}", "error": str(exc) or type(exc).__name__})
            return False


class LeaderElector:
    """Stands for one Lease for as long as the process runs; exposes whether this process holds it now."""

    def __init__(self, api: kclient.ApiClient, namespace: str, name: str, identity: str, *,
                 lease_duration: float = 15, renew_deadline: float = 10, retry_period: float = 2) -> None:
        # An attempt started just before the renew deadline may last one more retry period: the holder
        # must have stopped writing by then, before any follower may consider the Lease expired.
        if lease_duration <= renew_deadline + 2 * retry_period:
            raise ValueError("lease_duration must exceed renew_deadline + 2 * retry_period")
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._lock = _CountingLeaseLock(name, namespace, identity, api)
        self._election = _BoundedElection(Config(
            self._lock, lease_duration, renew_deadline, retry_period,
            onstarted_leading=self._started, onstopped_leading=self._stopped))
        self._elected = asyncio.Event()
        self._deposed = asyncio.Event()
        self._deposed.set()

    @property
    def is_leader(self) -> bool:
        return self._elected.is_set()

    async def wait_elected(self) -> None:
        """Return once this process holds the Lease (at once if it does)."""
        await self._elected.wait()

    async def wait_deposed(self) -> None:
        """Return once this process no longer holds the Lease (at once if it does not)."""
        await self._deposed.wait()

    async def run(self) -> None:
        """Acquire, renew, and after losing the Lease stand again, until cancelled."""
        while True:
            await self._election.run()
            await asyncio.sleep(self._election.election_config.retry_period)

    async def _started(self) -> None:
        if not self.is_leader:
            log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
            self._deposed.clear()
            self._elected.set()

    async def _stopped(self) -> None:
        if self.is_leader:
            log.warning("lost leadership", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
            self._elected.clear()
            self._deposed.set()

    async def release(self) -> None:
        """Give the Lease up on shutdown so another replica takes over at once, not after it expires."""
        if not self.is_leader:
            return
        await self._stopped()
        try:
            async with asyncio.timeout(self._election.election_config.retry_period):
                found, record = await self._lock.get(self.name, self.namespace)
                lease: Any = self._lock.lease_reference
                if not found or not isinstance(record, LeaderElectionRecord) or lease is None \
                        or record.holder_identity != self.identity:
                    return
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                await self._lock.api_instance.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as exc:  # shutting down anyway: the Lease then expires on its own
            log.warning("could not release the lease", extra={"lease": self.name, "error": str(exc)})
