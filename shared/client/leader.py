"""Lease-based leader election, so only one replica of a service writes while all of them serve.

Every replica serves the API and keeps its in-memory kind registry current; only the replica holding
a ``coordination.k8s.io/v1`` Lease writes (definition status, definition Events, rollouts). The
elector is written here rather than taken from a library: client-go's leaderelection is Go, and
neither kopf (its peering is a different, CRD-based mechanism that pauses whole operators) nor
kubernetes_asyncio offers a Lease elector for asyncio.

Safety comes from kube-apiserver's optimistic concurrency: every take-over or renewal is a PUT
carrying the resourceVersion that was read, so of two candidates racing for an expired Lease only
one write succeeds (the other gets 409 Conflict and stays a follower). A leader that cannot renew
steps down by itself once its last successful renewal is older than the renew deadline, i.e. before
any other candidate can consider the Lease expired (as long as clocks are roughly in sync).

Nothing here knows what the service writes: callers ask :attr:`is_leader` before a write and await
:meth:`wait_elected` to redo their writes after a take-over.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from kubernetes_asyncio import client as kclient

from shared.api.errors import ApiError
from shared.client.kube import GVR, ObjectClient

log = logging.getLogger(__name__)

LEASES = GVR("coordination.k8s.io", "v1", "leases")
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

Clock = Callable[[], datetime.datetime]
Sleep = Callable[[float], Awaitable[None]]


class LeaseStore(Protocol):
    """The three Lease calls the elector makes (an :class:`ObjectClient`, or a fake in tests)."""

    async def get(self, namespace: str | None, name: str) -> dict[str, Any]: ...

    async def create(self, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]: ...

    async def replace(self, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]: ...


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


def default_namespace(path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The pod's namespace (from its service account mount), or ``default`` out of cluster."""
    try:
        return path.read_text().strip() or "default"
    except OSError:
        return "default"


def default_identity() -> str:
    """Unique per process: two replicas on one host (or a restarted process) never share an identity."""
    return f"{socket.gethostname()}_{os.getpid()}"


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def format_micro_time(value: datetime.datetime) -> str:
    """``metav1.MicroTime`` wire format (RFC 3339, microseconds, UTC)."""
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


class LeaderElector:
    """Acquires and renews one Lease; exposes whether this process currently holds it."""

    def __init__(self, api: kclient.ApiClient | None, namespace: str, name: str, identity: str,
                 lease_seconds: int = 15, renew_every: float = 5, *, renew_deadline: float | None = None,
                 leases: LeaseStore | None = None, clock: Clock = _utcnow, sleep: Sleep = asyncio.sleep) -> None:
        if renew_every >= lease_seconds:
            raise ValueError("renew_every must be shorter than lease_seconds")
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        #: A leader that has not renewed for this long steps down; shorter than the lease so it stops
        #: writing before anyone else may take over.
        self.renew_deadline = renew_deadline if renew_deadline is not None else lease_seconds - renew_every
        if leases is None:
            if api is None:
                raise ValueError("either an API client or a lease store is needed")
            leases = ObjectClient(api, LEASES)
        self._leases: LeaseStore = leases
        self._clock = clock
        self._sleep = sleep
        self._elected = asyncio.Event()
        self._deposed = asyncio.Event()
        self._deposed.set()
        self._renewed_at: datetime.datetime | None = None

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
        """Try to acquire or renew every ``renew_every`` seconds until cancelled."""
        while True:
            await self.step()
            await self._sleep(self.renew_every)

    async def step(self) -> bool:
        """One attempt to acquire or renew; returns whether this process is the leader afterwards."""
        now = self._clock()
        try:
            held = await self._try(now)
        except Exception as exc:  # any failure must leave the loop running
            conflict = isinstance(exc, ApiError) and exc.code == 409
            held = False
            if not conflict:
                log.warning("leader election: lease call failed",
                            extra={"lease": self.name, "error": getattr(exc, "message", str(exc))})
                # API server unreachable: keep leading only while the last renewal is recent enough.
                if self.is_leader and self._renewed_at is not None:
                    held = (now - self._renewed_at).total_seconds() < self.renew_deadline
        self._set(held)
        return held

    async def _try(self, now: datetime.datetime) -> bool:
        try:
            lease = await self._leases.get(self.namespace, self.name)
        except ApiError as exc:
            if exc.code != 404:
                raise
            body = {"apiVersion": LEASES.api_version, "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, acquire=True, transitions=0)}
            await self._leases.create(self.namespace, body)
            self._renewed_at = now
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder == self.identity:
            new_spec = {**spec, "renewTime": format_micro_time(now), "leaseDurationSeconds": self.lease_seconds}
        elif holder and not self._expired(spec, now):
            return False
        else:
            new_spec = self._spec(now, acquire=True, transitions=int(spec.get("leaseTransitions") or 0) + 1)
        # The read resourceVersion travels with the PUT: a concurrent taker makes one of us get 409.
        body = {**lease, "spec": new_spec}
        await self._leases.replace(self.namespace, self.name, body)
        self._renewed_at = now
        return True

    def _spec(self, now: datetime.datetime, *, acquire: bool, transitions: int) -> dict[str, Any]:
        stamp = format_micro_time(now)
        spec: dict[str, Any] = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                                "renewTime": stamp, "leaseTransitions": transitions}
        if acquire:
            spec["acquireTime"] = stamp
        return spec

    @staticmethod
    def _expired(spec: dict[str, Any], now: datetime.datetime) -> bool:
        renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        if renewed is None:
            return True
        duration = float(spec.get("leaseDurationSeconds") or 0)
        return renewed + datetime.timedelta(seconds=duration) < now

    def _set(self, leader: bool) -> None:
        if leader and not self.is_leader:
            log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
            self._deposed.clear()
            self._elected.set()
        elif not leader and self.is_leader:
            log.warning("lost leadership", extra={"lease": f"{self.namespace}/{self.name}",
                                                  "identity": self.identity})
            self._elected.clear()
            self._deposed.set()
        if not leader:
            self._renewed_at = None

    async def release(self) -> None:
        """Give the Lease up on shutdown so another replica takes over at once, not after it expires."""
        if not self.is_leader:
            return
        self._set(False)
        try:
            lease = await self._leases.get(self.namespace, self.name)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            body = {**lease, "spec": {**spec, "holderIdentity": None, "leaseDurationSeconds": 1,
                                      "renewTime": format_micro_time(self._clock())}}
            await self._leases.replace(self.namespace, self.name, body)
        except ApiError as exc:
            log.warning("could not release the lease", extra={"lease": self.name, "error": exc.message})
