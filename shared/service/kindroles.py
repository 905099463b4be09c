"""Per-kind ClusterRoles: ``view``, ``edit`` and ``admin`` (and Tofu's ``approver``) for each Accepted kind.

Why per kind: a group-wide rule (``resources: ["*"]``) would let every tenant editor create and
delete every kind, present and future, including kinds that destroy infrastructure.  Instead the
leader keeps, for exactly the kinds it serves, roles labelled to aggregate into the cluster's
``view``/``edit``/``admin`` (``rbac.authorization.k8s.io/aggregate-to-*``), as Crossplane's RBAC
manager does for composite resources: a new kind is usable by a namespace's editors as soon as
its definition is Accepted, and a kind that goes takes its roles with it.

Each role is complete on its own (``edit`` repeats the reads of ``view``), so binding one role
directly works the same as getting it through aggregation.  ``approver`` holds only the
``approve`` verb and the reads: it is granted on top of ``edit`` (``admin`` aggregates it), so
approving is never a side effect of being able to write.

The roles are written by server-side apply under the service's field manager and carry labels
that mark them as the service's own (:data:`OWNER_LABEL` = the group it serves): one list by that
label finds roles of kinds that are gone, whatever happened while no replica led.  kube-apiserver
lets the service write a role only if it holds every permission the role grants (RBAC escalation
prevention); the chart grants the service those verbs on its own group rather than ``escalate``,
which would let it grant anything (docs/operating.md).

:func:`kind_roles` is pure; :class:`KindRoles` does the writing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence

from shared.api.errors import ApiError
from shared.api.rest import ResourceInfo
from shared.bodies import JSON
from shared.client.kube import GVR, ObjectClient

log = logging.getLogger(__name__)

CLUSTERROLES = GVR("rbac.authorization.k8s.io", "v1", "clusterroles")
#: The group whose kinds a role is for: marks the role as the service's own.
OWNER_LABEL = "cozystack.io/kind-role-of"
#: The kind's resource (plural), for people reading the roles.
RESOURCE_LABEL = "cozystack.io/kind-role-resource"
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"

READ_VERBS = ("get", "list", "watch")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
#: The custom verb Tofu's plan approval needs (:mod:`tofu_agl.approval`).
APPROVE_VERB = "approve"
#: Bounds of the wait before a failed sync is tried again (doubled each time it fails again).
RETRY_FIRST = 1.0
RETRY_MAX = 60.0


def role_name(group: str, plural: str, role: str) -> str:
    """``cozystack:<plural>.<group>:<role>``: one name per kind and role, cluster-wide unique as the resource is."""
    return f"cozystack:{plural}.{group}:{role}"


def _role(group: str, plural: str, role: str, aggregate_to: Sequence[str], rules: list[JSON]) -> JSON:
    labels = {OWNER_LABEL: group, RESOURCE_LABEL: plural}
    labels.update({AGGREGATE + target: "true" for target in aggregate_to})
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": role_name(group, plural, role), "labels": labels},
        "rules": rules,
    }


def kind_roles(info: ResourceInfo, approvable: bool = False) -> list[JSON]:
    """The ClusterRoles of one served kind: view, edit, admin, and approver for a kind with plan approval.

    The reads cover the kind's resource and the read-only subresources it serves (Tofu's ``plan``).
    """
    group, plural = info.group, info.plural
    readable = [plural, *(f"{plural}/{sub}" for sub in info.read_only_subresources)]
    reads: JSON = {"apiGroups": [group], "resources": readable, "verbs": list(READ_VERBS)}
    writes: JSON = {"apiGroups": [group], "resources": [plural], "verbs": list(WRITE_VERBS)}
    roles = [
        _role(group, plural, "view", ["view"], [reads]),
        _role(group, plural, "edit", ["edit"], [reads, writes]),
        _role(group, plural, "admin", ["admin"], [reads, writes]),
    ]
    if approvable:
        approve: JSON = {"apiGroups": [group], "resources": [plural], "verbs": [APPROVE_VERB]}
        roles.append(_role(group, plural, "approver", ["admin"], [reads, approve]))
    return roles


def desired_roles(kinds: Iterable[ResourceInfo], approvable: bool = False) -> dict[str, JSON]:
    """Every role the service should hold for the served ``kinds``, by name."""
    return {role["metadata"]["name"]: role for info in kinds for role in kind_roles(info, approvable)}


def up_to_date(live: JSON, wanted: JSON) -> bool:
    """Whether ``live`` already grants and is labelled as ``wanted`` (other labels are left alone)."""
    labels = (live.get("metadata") or {}).get("labels") or {}
    wanted_labels = wanted["metadata"]["labels"]
    return live.get("rules") == wanted["rules"] and all(labels.get(k) == v for k, v in wanted_labels.items())


class KindRoles:
    """Keeps the ClusterRoles of a service's Accepted kinds; called by the leading reconciler."""

    def __init__(self, clusterroles: ObjectClient, group: str, *, approvable: bool = False) -> None:
        self._roles = clusterroles
        self.group = group
        #: Whether the kinds have plan approval (Tofu): then each also gets an ``approver`` role.
        self.approvable = approvable
        self._retry: asyncio.Task[bool] | None = None
        self._retry_delay = RETRY_FIRST

    async def sync(self, kinds: Iterable[ResourceInfo]) -> bool:
        """Create or update the roles of ``kinds`` and delete the service's roles of other kinds; False when a
        write failed.

        A failure is logged and the same sync tried again after a growing wait (:data:`RETRY_FIRST` up to
        :data:`RETRY_MAX`), until it succeeds, a newer sync replaces it, or :meth:`cancel_retry` (the replica
        stopped leading). The kinds keep being served meanwhile, and an administrator can bind roles by hand.
        """
        self.cancel_retry()
        served = list(kinds)
        done = await self._write(desired_roles(served, self.approvable))
        if done:
            self._retry_delay = RETRY_FIRST
        else:
            delay, self._retry_delay = self._retry_delay, min(self._retry_delay * 2, RETRY_MAX)
            log.info("kind ClusterRoles will be tried again", extra={"group": self.group, "seconds": delay})
            self._retry = asyncio.create_task(self._again(delay, served), name=f"kind roles of {self.group}")
        return done

    def cancel_retry(self) -> None:
        """Drop a pending retry (the writer is no longer the leader, or a newer sync runs)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    async def _again(self, delay: float, kinds: list[ResourceInfo]) -> bool:
        await asyncio.sleep(delay)
        self._retry = None  # this task is the retry: the sync below must not cancel it
        return await self.sync(kinds)

    async def _write(self, wanted: dict[str, JSON]) -> bool:
        try:
            listing = await self._roles.list(None, label_selector=f"{OWNER_LABEL}={self.group}")
        except ApiError as exc:
            log.warning("cannot list the kinds' ClusterRoles", extra={"group": self.group, "error": exc.message})
            return False
        done = True
        live = {item["metadata"]["name"]: item for item in listing.get("items") or []}
        for name, role in wanted.items():
            if name in live and up_to_date(live[name], role):
                continue
            try:
                await self._roles.apply(None, name, role)
                log.info("kind ClusterRole applied", extra={"clusterrole": name})
            except ApiError as exc:
                done = False
                log.warning("cannot apply a kind's ClusterRole", extra={"clusterrole": name, "error": exc.message})
        for name in sorted(set(live) - set(wanted)):
            try:
                await self._roles.delete(None, name)
                log.info("kind ClusterRole deleted", extra={"clusterrole": name})
            except ApiError as exc:
                if exc.code != 404:
                    done = False
                    log.warning("cannot delete a kind's ClusterRole", extra={"clusterrole": name,
                                                                            "error": exc.message})
        return done
