"""``helm install --wait`` of the chart for each set of feature flags, on the real node, as a user installs it.

Each install is checked where it really happens: the pods kubelet runs (Ready, never restarted, as uid 65532 with a
read-only root file system), the APIServices kube-apiserver marks Available through each Service's endpoints (pod
IPs on the node's bridge), the Lease each service's leader writes with the pod's own identity and service-account
token, and kubectl's requests through the services.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from localcluster import chartinstall, netns
from localcluster.chartinstall import BOTH, HELM_ONLY, NAMESPACE, RELEASE, TOFU_ONLY, Flags
from localcluster.demo import applied_definitions

from tests.kube import FIXTURES, get_json, kubectl, wait_for
from tests.node.conftest import Node

#: How long an install may take to be Ready here (about 10 s when it works).
WAIT = "120s"
#: component -> (APIService, group) as the chart names them.
SERVICES = {"helm-agl": ("v1alpha1.apps.cozystack.io", "apps.cozystack.io"),
            "tofu-agl": ("v1alpha1.tofu.apps.cozystack.io", "tofu.apps.cozystack.io")}


def enabled(flags: Flags) -> list[str]:
    return [name for name, on in (("helm-agl", flags.helm_agl), ("tofu-agl", flags.tofu_agl)) if on]


def pods(node: Node, component: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = get_json(node.cluster, "pods", "-n", NAMESPACE, "-l",
                                           f"app.kubernetes.io/component={component}")["items"]
    return [pod for pod in found if "helm.sh/hook" not in pod["metadata"].get("annotations", {})]


def uninstall(node: Node) -> None:
    chartinstall.helm(node.cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=120s", check=False)
    wait_for(lambda: not any(pods(node, c) for c in SERVICES), "the release's pods to be gone", timeout=120)


def assert_serving(node: Node, component: str, *, restarts_allowed: bool = False) -> None:
    """The service's pods run and serve kube-apiserver's aggregation through their Service's pod endpoints (and, unless
    ``restarts_allowed``, were never restarted)."""
    running = pods(node, component)
    assert len(running) == 2, [p["metadata"]["name"] for p in running]
    subnet = ipaddress.ip_network(netns.POD_SUBNET)
    for pod in running:
        status = pod["status"]
        ready = {c["type"]: c["status"] for c in status.get("conditions", [])}
        assert ready.get("Ready") == "True", status
        (container,) = status["containerStatuses"]
        # The uid crash (kopf asking the passwd database for a uid that has no entry) restarted every pod.
        assert restarts_allowed or container["restartCount"] == 0, (pod["metadata"]["name"], container)
        assert ipaddress.ip_address(status["podIP"]) in subnet
        spec = pod["spec"]
        assert spec["securityContext"]["runAsUser"] == 65532
        assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert spec["nodeName"] == "agl-node"
    apiservice_name, group = SERVICES[component]
    apiservice = get_json(node.cluster, "apiservice", apiservice_name)
    assert apiservice["spec"]["service"] == {"name": f"{RELEASE}-{component}", "namespace": NAMESPACE, "port": 443}
    available = {c["type"]: c for c in apiservice["status"]["conditions"]}["Available"]
    assert available["status"] == "True", available
    service = get_json(node.cluster, "service", f"{RELEASE}-{component}", "-n", NAMESPACE)
    assert service["spec"]["type"] == "ClusterIP" and "externalName" not in service["spec"]
    slices = get_json(node.cluster, "endpointslices", "-n", NAMESPACE, "-l",
                      f"kubernetes.io/service-name={RELEASE}-{component}")["items"]
    addresses = {a for s in slices for e in s["endpoints"] if e["conditions"].get("ready") for a in e["addresses"]}
    assert addresses == {pod["status"]["podIP"] for pod in running}
    # Discovery through the aggregation layer, answered by a pod.
    discovery = json.loads(kubectl(node.cluster, "get", "--raw", f"/apis/{group}/v1alpha1").stdout)
    assert discovery["groupVersion"] == f"{group}/v1alpha1"


def assert_leader_is_a_pod(node: Node, component: str) -> None:
    """The leader's Lease names one of the pods (the Downward API's pod name, not ``user@host``): written with the
    pod's own service-account token, the only credential the pod has (the chart passes no kubeconfig)."""
    names = {pod["metadata"]["name"] for pod in pods(node, component)}

    def holder() -> str | None:
        lease = get_json(node.cluster, "lease", f"{RELEASE}-{component}-reconciler", "-n", NAMESPACE)
        found: str | None = lease["spec"].get("holderIdentity")
        return found if found in names else None

    wait_for(holder, f"{component}'s Lease to be held by one of its pods {sorted(names)}", timeout=60)
    args = pods(node, component)[0]["spec"]["containers"][0]["args"]
    assert not any(arg.startswith("--kubeconfig") for arg in args), args


@pytest.mark.parametrize("flags", [HELM_ONLY, TOFU_ONLY], ids=["helm-only", "tofu-only"])
def test_install_one_service(node_cluster: Node, flags: Flags) -> None:
    try:
        chartinstall.install(node_cluster.cluster, node_cluster.image, flags, wait=WAIT)
        (component,) = enabled(flags)
        assert_serving(node_cluster, component)
        assert_leader_is_a_pod(node_cluster, component)
        (other,) = set(SERVICES) - {component}
        assert not pods(node_cluster, other)
        missing = kubectl(node_cluster.cluster, "get", "apiservice", SERVICES[other][0], check=False)
        assert missing.returncode != 0 and "NotFound" in missing.stderr
    finally:
        uninstall(node_cluster)


def test_install_both_and_use_them(node_cluster: Node) -> None:
    """Both services, then what a tenant does: the sample definitions Accepted, Applications created through the
    services, their HelmRelease and Terraform written by the pods."""
    chartinstall.install(node_cluster.cluster, node_cluster.image, BOTH, wait=WAIT)
    for component in SERVICES:
        assert_serving(node_cluster, component)
        assert_leader_is_a_pod(node_cluster, component)
    cluster = node_cluster.cluster
    # The repository's sample definitions, unchanged.
    definitions = sorted((FIXTURES / "definitions").glob("*.yaml"))
    kubectl(cluster, "apply", *[arg for path in definitions for arg in ("-f", str(path))])
    applied = applied_definitions(definitions)
    assert len(applied) == 4, applied
    for plural, name in applied:
        kubectl(cluster, "wait", f"{plural}/{name}", "--for=condition=Accepted", "--timeout=60s")
    resources = {group: kubectl(cluster, "api-resources", f"--api-group={group}", "-o", "name").stdout.split()
                 for _, group in SERVICES.values()}
    assert {"redises.apps.cozystack.io", "postgreses.apps.cozystack.io"} <= set(resources["apps.cozystack.io"])
    assert {"vpcs.tofu.apps.cozystack.io"} <= set(resources["tofu.apps.cozystack.io"])
    kubectl(cluster, "apply", "-f", str(FIXTURES / "tenants"))
    kubectl(cluster, "apply", "-f", str(FIXTURES / "applications" / "redis-cache.yaml"),
            "-f", str(FIXTURES / "applications" / "vpc-network.yaml"))
    release = wait_for(lambda: get_json(cluster, "helmreleases", "-n", "tenant-demo", "redis-cache"),
                       "the Redis Application's HelmRelease", timeout=60)
    redis = get_json(cluster, "redis", "cache", "-n", "tenant-demo")
    assert_backs(release, redis)
    terraform = wait_for(lambda: get_json(cluster, "terraforms", "-n", "tenant-demo", "vpc-network"),
                         "the VPC Application's Terraform", timeout=60)
    vpc = get_json(cluster, "vpc", "network", "-n", "tenant-demo")
    assert_backs(terraform, vpc)


def assert_backs(backing: dict[str, Any], application: dict[str, Any]) -> None:
    """The Application is the projection of its backing object (same uid), which names it in its labels."""
    assert backing["metadata"]["uid"] == application["metadata"]["uid"]
    labels = backing["metadata"]["labels"]
    assert labels["apps.cozystack.io/application.kind"] == application["kind"]
    assert labels["apps.cozystack.io/application.name"] == application["metadata"]["name"]


def test_helm_test_runs_its_pods(node_cluster: Node) -> None:
    """``helm test``: a Pod per service, run by kubelet from the chart's image, asks kube-apiserver for the
    service's discovery document through the aggregation layer with its own token."""
    result = chartinstall.helm(node_cluster.cluster, "test", RELEASE, "-n", NAMESPACE, "--timeout=180s")
    for component in SERVICES:
        assert f"TEST SUITE:     {RELEASE}-{component}-test" in result.stdout, result.stdout
    assert result.stdout.count("Phase:          Succeeded") == 2, result.stdout
