"""The per-kind ClusterRoles (shared/service/kindroles.py): what each grants, how it aggregates, how it is named.

What kube-apiserver does with them (escalation prevention, the tenants they admit) is tested through the real
control plane in tests/integration/test_tenant_rbac.py and test_chart.py.
"""

from __future__ import annotations

import asyncio

import pytest

from shared.api.errors import ApiError
from shared.api.rest import ResourceInfo
from shared.bodies import JSON
from shared.service import kindroles
from tests.unit.waiting import eventually

VPCS = ResourceInfo(group="tofu.example.io", version="v1alpha1", kind="VPC", plural="vpcs", singular="vpc",
                    schema={}, read_only_subresources=("plan",))
REDISES = ResourceInfo(group="apps.example.io", version="v1alpha1", kind="Redis", plural="redises",
                       singular="redis", schema={})

READ = ["get", "list", "watch"]
WRITE = ["create", "update", "patch", "delete", "deletecollection"]


def by_role(roles: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(r["metadata"]["name"]).rsplit(":", 1)[1]: r for r in roles}  # type: ignore[index]


def test_roles_grant_exactly_the_kind_and_its_served_subresources() -> None:
    roles = by_role(kindroles.kind_roles(VPCS, approvable=True))
    reads = {"apiGroups": ["tofu.example.io"], "resources": ["vpcs", "vpcs/plan"], "verbs": READ}
    writes = {"apiGroups": ["tofu.example.io"], "resources": ["vpcs"], "verbs": WRITE}
    assert roles["view"]["rules"] == [reads]
    assert roles["edit"]["rules"] == roles["admin"]["rules"] == [reads, writes]
    assert roles["approver"]["rules"] == [reads, {"apiGroups": ["tofu.example.io"], "resources": ["vpcs"],
                                                  "verbs": ["approve"]}]
    # Approving is never part of edit.
    assert all("approve" not in rule["verbs"] for rule in roles["edit"]["rules"])  # type: ignore[attr-defined]


def test_helm_kinds_have_no_approver_and_no_subresources() -> None:
    roles = by_role(kindroles.kind_roles(REDISES))
    assert set(roles) == {"view", "edit", "admin"}
    assert roles["view"]["rules"] == [{"apiGroups": ["apps.example.io"], "resources": ["redises"], "verbs": READ}]


def test_names_and_labels_mark_the_service_and_aggregate() -> None:
    roles = by_role(kindroles.kind_roles(VPCS, approvable=True))
    assert roles["edit"]["metadata"]["name"] == "cozystack:vpcs.tofu.example.io:edit"  # type: ignore[index]
    aggregate = {name: {k.removeprefix(kindroles.AGGREGATE) for k in r["metadata"]["labels"]  # type: ignore[index]
                        if k.startswith(kindroles.AGGREGATE)} for name, r in roles.items()}
    assert aggregate == {"view": {"view"}, "edit": {"edit"}, "admin": {"admin"}, "approver": {"admin"}}
    for role in roles.values():
        labels = role["metadata"]["labels"]  # type: ignore[index]
        assert labels[kindroles.OWNER_LABEL] == "tofu.example.io" and labels[kindroles.RESOURCE_LABEL] == "vpcs"


def test_up_to_date_ignores_foreign_labels_but_not_rules() -> None:
    wanted = kindroles.kind_roles(REDISES)[0]
    live = {**wanted, "metadata": {**wanted["metadata"], "labels": {**wanted["metadata"]["labels"], "x": "y"}}}
    assert kindroles.up_to_date(live, wanted)
    assert not kindroles.up_to_date({**live, "rules": []}, wanted)
    stripped = {**wanted, "metadata": {"name": wanted["metadata"]["name"], "labels": {}}}
    assert not kindroles.up_to_date(stripped, wanted)


def test_desired_roles_cover_every_kind() -> None:
    names = set(kindroles.desired_roles([VPCS, REDISES]))
    assert "cozystack:vpcs.tofu.example.io:view" in names and "cozystack:redises.apps.example.io:admin" in names
    assert len(names) == 6


class FlakyRoles:
    """ClusterRoles whose writes fail ``failures`` times first: a fault (kube-apiserver briefly refusing the
    service's writes) that a real server does not produce on demand."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.live: dict[str, JSON] = {}
        self.attempts = 0

    async def list(self, _namespace: None, *, label_selector: str) -> JSON:
        return {"items": list(self.live.values())}

    async def apply(self, _namespace: None, name: str, body: JSON) -> JSON:
        self.attempts += 1
        if self.failures > 0:
            self.failures -= 1
            raise ApiError(503, "ServiceUnavailable", "try again")
        self.live[name] = body
        return body

    async def delete(self, _namespace: None, name: str) -> JSON:
        return self.live.pop(name)


async def test_a_failed_sync_is_tried_again_until_the_roles_are_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kindroles, "RETRY_FIRST", 0.01)
    clusterroles = FlakyRoles(failures=5)
    roles = kindroles.KindRoles(clusterroles, "tofu.example.io", approvable=True)  # type: ignore[arg-type]
    assert await roles.sync([VPCS]) is False
    wanted = set(kindroles.desired_roles([VPCS], approvable=True))
    await eventually(lambda: set(clusterroles.live) == wanted)  # no second sync: the retry did it
    roles.cancel_retry()


async def test_a_retry_ends_when_the_writer_stops_leading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kindroles, "RETRY_FIRST", 0.01)
    clusterroles = FlakyRoles(failures=10**6)
    roles = kindroles.KindRoles(clusterroles, "tofu.example.io")  # type: ignore[arg-type]
    assert await roles.sync([VPCS]) is False
    await eventually(lambda: clusterroles.attempts > 3 * len(kindroles.kind_roles(VPCS)))
    roles.cancel_retry()
    await asyncio.sleep(0.05)
    stopped_at = clusterroles.attempts
    await asyncio.sleep(0.2)
    assert clusterroles.attempts == stopped_at and not clusterroles.live
