"""What the real kube-controller-manager on the node does with the services' Applications.

Each assertion is decided by one of its controllers, through kube-apiserver's aggregation layer and the services'
pods: the garbage collector (which finds the aggregated kinds through discovery and looks owners up live), the
namespace controller (which deletes every namespaced kind discovery lists, and refuses to finish while a group's
discovery fails) and the clusterrole-aggregation controller (which folds the per-kind roles the services write into
the built-in ``edit``/``view``).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from localcluster import chartinstall
from localcluster.chartinstall import BOTH, NAMESPACE
from localcluster.demo import applied_definitions

from tests.kube import FIXTURES, get_json, kubectl, load_fixture, wait_for
from tests.node.conftest import Node

WAIT = "120s"
TOFU_APISERVICE = "v1alpha1.tofu.apps.cozystack.io"


def ready(node: Node) -> None:
    """The release with both services, the sample definitions Accepted."""
    chartinstall.install(node.cluster, node.image, BOTH, wait=WAIT)
    definitions = sorted((FIXTURES / "definitions").glob("*.yaml"))
    kubectl(node.cluster, "apply", *[arg for path in definitions for arg in ("-f", str(path))])
    for plural, name in applied_definitions(definitions):
        kubectl(node.cluster, "wait", f"{plural}/{name}", "--for=condition=Accepted", "--timeout=60s")


def apply(node: Node, *objects: dict[str, Any]) -> None:
    kubectl(node.cluster, "apply", "-f", "-", input=yaml.safe_dump_all(objects))


def redis(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"replicas": 1}}


def vpc(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "tofu.apps.cozystack.io/v1alpha1", "kind": "VPC",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"region": "eu-west-1"}}


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def gone(node: Node, *args: str) -> bool:
    result = kubectl(node.cluster, "get", *args, check=False)
    return result.returncode != 0 and "NotFound" in result.stderr


def delete_namespace(node: Node, name: str) -> None:
    kubectl(node.cluster, "delete", "namespace", name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def namespaces(node_cluster: Node) -> Iterator[list[str]]:
    """Namespaces a test creates, deleted afterwards (not waited for)."""
    created: list[str] = []
    yield created
    for name in created:
        delete_namespace(node_cluster, name)


def test_garbage_collector_follows_an_application_owner(node_cluster: Node, namespaces: list[str]) -> None:
    """kube-controller-manager's garbage collector: a ConfigMap owned by a Redis stays while the Redis exists (the
    GC's live lookup of the owner through the service answers the same uid), one naming a wrong uid is collected
    (proof that the GC looked), and the owned one goes when the Redis is deleted."""
    ready(node_cluster)
    cluster = node_cluster.cluster
    ns = "gc-owner"
    namespaces.append(ns)
    apply(node_cluster, namespace(ns), redis(ns, "owner"))
    owner = get_json(cluster, "redis", "owner", "-n", ns)

    def owned(name: str, uid: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}, "metadata": {
            "name": name, "namespace": ns, "ownerReferences": [{
                "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis", "name": "owner", "uid": uid}]}}

    apply(node_cluster, owned("dependent", owner["metadata"]["uid"]),
          owned("orphan", "00000000-0000-0000-0000-000000000000"))
    # The GC resyncs discovery every 30 s and retries an owner of a kind it does not know yet.
    wait_for(lambda: gone(node_cluster, "configmap", "orphan", "-n", ns),
             "the GC to collect the ConfigMap whose owner uid does not exist", timeout=120, interval=1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert get_json(cluster, "configmap", "dependent", "-n", ns)["metadata"]["uid"]
        time.sleep(1)
    kubectl(cluster, "delete", "redis", "owner", "-n", ns)
    wait_for(lambda: gone(node_cluster, "configmap", "dependent", "-n", ns),
             "the GC to collect the ConfigMap of the deleted Redis", timeout=120, interval=1)


def test_namespace_deletion_deletes_applications(node_cluster: Node) -> None:
    """The namespace controller deletes a namespace holding a Redis and a VPC: it lists and deletes both kinds
    through the services and the namespace disappears."""
    ready(node_cluster)
    ns = "ns-delete-both"
    apply(node_cluster, namespace(ns), redis(ns, "cache"), vpc(ns, "net"))
    wait_for(lambda: get_json(node_cluster.cluster, "terraforms", "vpc-net", "-n", ns), "the VPC's Terraform")
    wait_for(lambda: get_json(node_cluster.cluster, "helmreleases", "redis-cache", "-n", ns), "the HelmRelease")
    delete_namespace(node_cluster, ns)
    wait_for(lambda: gone(node_cluster, "namespace", ns), f"namespace {ns} to be deleted", timeout=90, interval=1)


def conditions(node: Node, ns: str) -> dict[str, dict[str, Any]]:
    found = get_json(node.cluster, "namespace", ns)
    return {c["type"]: c for c in found.get("status", {}).get("conditions", [])}


def apiservice_available(node: Node, name: str) -> str:
    status = get_json(node.cluster, "apiservice", name).get("status", {})
    return str({c["type"]: c["status"] for c in status.get("conditions", [])}.get("Available"))


def test_namespace_deletion_waits_for_a_stopped_service(node_cluster: Node) -> None:
    """With tofu-agl scaled to 0, kube-apiserver marks its APIService unavailable and the namespace controller
    cannot discover the Tofu group: the namespace stays Terminating with NamespaceDeletionDiscoveryFailure naming
    the group, and is deleted once the service is back (helm restores the Deployment's replicas)."""
    ready(node_cluster)
    cluster = node_cluster.cluster
    ns = "ns-delete-stopped"
    apply(node_cluster, namespace(ns), vpc(ns, "net"))
    wait_for(lambda: get_json(cluster, "terraforms", "vpc-net", "-n", ns), "the VPC's Terraform")
    try:
        kubectl(cluster, "scale", "deploy", "agl-tofu-agl", "-n", NAMESPACE, "--replicas=0")
        wait_for(lambda: apiservice_available(node_cluster, TOFU_APISERVICE) == "False",
                 "the Tofu APIService to be unavailable", timeout=90, interval=1)
        delete_namespace(node_cluster, ns)
        failure = wait_for(lambda: conditions(node_cluster, ns).get("NamespaceDeletionDiscoveryFailure"),
                           "the namespace controller's discovery failure", timeout=90, interval=1)
        assert failure["status"] == "True", failure
        assert failure["reason"] == "DiscoveryFailed", failure
        # kube-controller-manager's words: "Discovery failed for some groups, 1 failing: unable to retrieve the
        # complete list of server APIs: tofu.apps.cozystack.io/v1alpha1: stale GroupVersion discovery: ..."
        assert "1 failing" in failure["message"], failure
        assert failure["message"].endswith("stale GroupVersion discovery: tofu.apps.cozystack.io/v1alpha1"), failure
        time.sleep(10)
        still = get_json(cluster, "namespace", ns)
        assert still["status"]["phase"] == "Terminating", still["status"]
    finally:
        chartinstall.install(cluster, node_cluster.image, BOTH, wait=WAIT)
    deployment = get_json(cluster, "deployment", "agl-tofu-agl", "-n", NAMESPACE)
    assert deployment["spec"]["replicas"] == 2, deployment["spec"]
    wait_for(lambda: apiservice_available(node_cluster, TOFU_APISERVICE) == "True",
             "the Tofu APIService to be Available again", timeout=90, interval=1)
    wait_for(lambda: gone(node_cluster, "namespace", ns), f"namespace {ns} to be deleted once the service is back",
             timeout=180, interval=1)


MEMO = "memo"


def memo_definition() -> dict[str, Any]:
    """The sample Redis definition as another kind (Memo) of its own release prefix."""
    definition = copy.deepcopy(load_fixture("redis.yaml"))
    definition["metadata"]["name"] = MEMO
    definition["spec"]["application"].update(kind="Memo", plural="memos", singular="memo")
    definition["spec"]["release"]["prefix"] = "memo-"
    definition["spec"]["dashboard"].update(singular="Memo", plural="Memos")
    for section in ("secrets", "services"):
        definition["spec"][section]["include"] = []
    return definition


def memo(ns: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Memo", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 1}}


def bind(ns: str, user: str, role: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"{user}-{role}", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}


def test_new_kind_aggregates_into_edit_and_view(node_cluster: Node, namespaces: list[str]) -> None:
    """A kind Accepted moments ago: the leader writes its per-kind roles labelled aggregate-to-edit/view, the
    clusterrole-aggregation controller folds them into the built-in roles, and RBAC then lets a namespace editor
    create a Memo and a viewer read it but not create one (403)."""
    ready(node_cluster)
    cluster = node_cluster.cluster
    ns = "rbac-memo"
    namespaces.append(ns)
    try:
        apply(node_cluster, memo_definition())
        kubectl(cluster, "wait", f"applicationdefinitions/{MEMO}", "--for=condition=Accepted", "--timeout=60s")
        apply(node_cluster, namespace(ns), bind(ns, "alice", "edit"), bind(ns, "bob", "view"))
        alice = cluster.user_kubeconfig("alice")
        bob = cluster.user_kubeconfig("bob")
        body = json.dumps(memo(ns, "note"))
        wait_for(lambda: kubectl(cluster, "create", "-f", "-", input=body, kubeconfig=alice, check=False
                                 ).returncode == 0, "the editor's create of a Memo to be allowed", timeout=60)
        edit = get_json(cluster, "clusterrole", "edit")
        assert any("memos" in rule.get("resources", []) and "create" in rule["verbs"]
                   for rule in edit["rules"]), edit["rules"]
        wait_for(lambda: kubectl(cluster, "get", "memos", "-n", ns, kubeconfig=bob, check=False).returncode == 0,
                 "the viewer's list of Memos to be allowed", timeout=60)
        got = json.loads(kubectl(cluster, "get", "memo", "note", "-n", ns, "-o", "json", kubeconfig=bob).stdout)
        assert got["metadata"]["name"] == "note"
        denied = kubectl(cluster, "create", "-f", "-", input=json.dumps(memo(ns, "other")), kubeconfig=bob,
                         check=False)
        assert denied.returncode != 0 and "Forbidden" in denied.stderr, denied.stderr
        assert 'cannot create resource "memos"' in denied.stderr, denied.stderr
    finally:
        kubectl(cluster, "delete", "namespace", ns, "--ignore-not-found", "--timeout=90s")
        kubectl(cluster, "delete", f"applicationdefinitions/{MEMO}", "--ignore-not-found")
