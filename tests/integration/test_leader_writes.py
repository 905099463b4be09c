"""A service that starts (or a replica that becomes the leader) writes nothing before it has listed every definition.

kopf hands the reconciler the definitions one event at a time and never says when its first list is complete.
Until a new leader listed them itself (shared/service/definitions.py), it synced the kinds' ClusterRoles from the
first few it had heard of: on every start, the roles of every kind it had not heard of yet were deleted, and created
again a moment later. A user bound to one of them lost the kind meanwhile.

Each test restarts the session's service, against the real kube-apiserver, and reads from its watch cache every
change to the service's kind roles from before the stop until the new process has written them: there must be no
deletion but the test's own. One role is deleted by the test while no process runs (the old one would write it back
at its next sync of the roles, which any definition's change starts), so that the new process has one to write back;
that write is what shows its roles' sync ran.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from localcluster import aggregation, services
from localcluster.cluster import Cluster

from shared.service import kindroles
from tests.kube import Api, get_json, kubectl, load_fixture, wait_for

#: Per stack: its service, and two of its definitions with their kinds' plurals. Two, so that a process writing
#: the roles after hearing of one definition would delete the other's.
STACKS = {
    "helm_agl": ("helm_service", services.HELM_AGL, "apps.cozystack.io",
                 {"redis.yaml": "redises", "postgres.yaml": "postgreses"}),
    "tofu_agl": ("tofu_service", services.TOFU_AGL, "tofu.apps.cozystack.io",
                 {"vpc.yaml": "vpcs", "bucket.yaml": "s3buckets"}),
}


def role_events(api: Api, group: str, resource_version: str) -> list[tuple[str, str]]:
    """(type, name) of every change to ``group``'s kind roles after ``resource_version``, in order, from
    kube-apiserver's watch cache (a watch that ends after 2 s)."""
    selector = f"{kindroles.OWNER_LABEL}={group}".replace("/", "%2F").replace("=", "%3D")
    req = urllib.request.Request(
        api.cluster.server + "/apis/rbac.authorization.k8s.io/v1/clusterroles?watch=true&timeoutSeconds=2"
        f"&resourceVersion={resource_version}&labelSelector={selector}", headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=30, context=api.ctx) as resp:
        events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    return [(event["type"], event["object"]["metadata"]["name"]) for event in events]


def role_names(cluster: Cluster, group: str) -> set[str]:
    listed = get_json(cluster, "clusterroles", "-l", f"{kindroles.OWNER_LABEL}={group}")
    return {item["metadata"]["name"] for item in listed["items"]}


@pytest.mark.parametrize("stack", list(STACKS))
def test_a_restart_deletes_no_kind_role(control_plane: Cluster, api: Api, request: pytest.FixtureRequest,
                                        stack: str) -> None:
    fixture, service, group, definitions = STACKS[stack]
    request.getfixturevalue(fixture)
    for definition in definitions:
        kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture(definition)))
    plurals = list(definitions.values())
    expected = {kindroles.role_name(group, plural, role) for plural in plurals for role in ("view", "edit", "admin")}
    wait_for(lambda: expected <= role_names(control_plane, group), f"the kind roles of {plurals}", timeout=60)
    plural = plurals[0]
    removed = kindroles.role_name(group, plural, "view")
    # From kube-apiserver itself: kubectl's own List of the items carries no resourceVersion to watch from.
    code, before = api.request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles?labelSelector="
                               + f"{kindroles.OWNER_LABEL}={group}".replace("/", "%2F").replace("=", "%3D"))
    assert code == 200 and before["metadata"]["resourceVersion"]
    others = {item["metadata"]["name"] for item in before["items"]} - {removed}
    assert others and expected - {removed} <= others

    def delete_the_role() -> None:
        code, answer = api.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{removed}")
        assert code == 200, answer

    services.restart(control_plane, service, while_stopped=delete_the_role)
    wait_for(lambda: removed in role_names(control_plane, group), f"{removed} written back by the new process",
             timeout=90)
    try:
        events = role_events(api, group, before["metadata"]["resourceVersion"])
        deletions = [i for i, (kind, _name) in enumerate(events) if kind == "DELETED"]
        assert [events[i] for i in deletions] == [("DELETED", removed)]  # the test's own, and no other
        assert ("ADDED", removed) in events[deletions[0]:]
        assert others <= role_names(control_plane, group)
    finally:
        aggregation.wait_available(control_plane, service.group, service.version, timeout=90)
        wait_for(lambda: _served(api, group, plural), f"{plural} served again", timeout=60)


def _served(api: Api, group: str, plural: str) -> bool:
    code, _body = api.request("GET", f"/apis/{group}/v1alpha1/{plural}?limit=1")
    return code == 200
