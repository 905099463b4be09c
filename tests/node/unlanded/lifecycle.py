"""What the real helm does to users' Applications when the release changes: upgrade, rollback, uninstall, install.

The Applications are projections of their backing objects (HelmRelease, Terraform), which are not the release's:
helm's three-way patches and its uninstall touch only what the chart renders. The definitions' CRDs carry
``helm.sh/resource-policy: keep`` (``crds.keep``), which helm's uninstall honours. Each assertion reads what helm
left in kube-apiserver and what the services' pods then serve through the aggregation layer.
"""

from __future__ import annotations

import json

import yaml
from localcluster import chartinstall
from localcluster.chartinstall import BOTH, NAMESPACE, RELEASE
from localcluster.demo import applied_definitions

from tests.kube import FIXTURES, get_json, kubectl, wait_for
from tests.node.conftest import Node

WAIT = "180s"
APISERVICES = ("v1alpha1.apps.cozystack.io", "v1alpha1.tofu.apps.cozystack.io")
CRDS = ("applicationdefinitions.cozystack.io", "tofuapplicationdefinitions.cozystack.io")
DEFINITIONS = sorted((FIXTURES / "definitions").glob("*.yaml"))


def ready(node: Node) -> None:
    """The release with both services, the sample definitions Accepted."""
    chartinstall.install(node.cluster, node.image, BOTH, wait=WAIT)
    kubectl(node.cluster, "apply", *[arg for path in DEFINITIONS for arg in ("-f", str(path))])
    wait_accepted(node)


def wait_accepted(node: Node) -> None:
    for plural, name in applied_definitions(DEFINITIONS):
        kubectl(node.cluster, "wait", f"{plural}/{name}", "--for=condition=Accepted", "--timeout=90s")


def tenant(node: Node, ns: str) -> None:
    """A namespace with a Redis ``cache`` and a VPC ``net``, and their backing objects written."""
    objects = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
               {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis",
                "metadata": {"name": "cache", "namespace": ns}, "spec": {"replicas": 1}},
               {"apiVersion": "tofu.apps.cozystack.io/v1alpha1", "kind": "VPC",
                "metadata": {"name": "net", "namespace": ns}, "spec": {"region": "eu-west-1"}}]
    kubectl(node.cluster, "apply", "-f", "-", input=yaml.safe_dump_all(objects))
    for kind, name in BACKING:
        wait_for(lambda: get_json(node.cluster, kind, name, "-n", ns),  # noqa: B023 (called at once)
                 f"{kind}/{name} in {ns}")


#: The backing objects of the tenant's Applications, and the Applications.
BACKING = (("helmreleases", "redis-cache"), ("terraforms", "vpc-net"))
APPLICATIONS = (("redis", "cache"), ("vpc", "net"))


def uids(node: Node, ns: str, which: tuple[tuple[str, str], ...]) -> dict[str, str]:
    return {f"{kind}/{name}": get_json(node.cluster, kind, name, "-n", ns)["metadata"]["uid"] for kind, name in which}


def served(node: Node, ns: str) -> dict[str, str]:
    """The Applications' uids as the services answer them, waiting for the services to serve them."""
    found: dict[str, str] = wait_for(lambda: uids(node, ns, APPLICATIONS), f"the services to serve {ns}'s Applications",
                                     timeout=90)
    return found


def service_pods(node: Node) -> dict[str, list[str]]:
    """Name -> container args of the services' pods (not helm test hooks), running or not."""
    found = get_json(node.cluster, "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component in (helm-agl,tofu-agl)")
    return {pod["metadata"]["name"]: pod["spec"]["containers"][0]["args"] for pod in found["items"]
            if "helm.sh/hook" not in pod["metadata"].get("annotations", {})
            and not pod["metadata"].get("deletionTimestamp")}


def revision(node: Node) -> int:
    status = json.loads(chartinstall.helm(node.cluster, "status", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    return int(status["version"])


def test_upgrade_and_rollback_keep_applications(node_cluster: Node) -> None:
    """``helm upgrade`` with a value that rolls the pods (logLevel DEBUG), then ``helm rollback --wait`` to the
    revision before it: helm replaces the services' pods both times, the HelmRelease and Terraform keep their uids,
    and the new pods serve the same Applications."""
    ready(node_cluster)
    cluster = node_cluster.cluster
    ns = "life-upgrade"
    try:
        tenant(node_cluster, ns)
        backing, applications = uids(node_cluster, ns, BACKING), served(node_cluster, ns)
        before, pods_before = revision(node_cluster), service_pods(node_cluster)
        assert all("--log-level=INFO" in args for args in pods_before.values()), pods_before
        chartinstall.helm(cluster, *chartinstall.install_args(
            node_cluster.image, BOTH, upgrade=True, wait=WAIT,
            extra=["--set", "helmAgl.logLevel=DEBUG", "--set", "tofuAgl.logLevel=DEBUG"]))
        assert revision(node_cluster) == before + 1
        upgraded = wait_for(lambda: (lambda p: p if len(p) == 4 else None)(service_pods(node_cluster)),
                            "the upgraded pods alone", timeout=60)
        assert not set(upgraded) & set(pods_before), (sorted(upgraded), sorted(pods_before))
        assert all("--log-level=DEBUG" in args for args in upgraded.values()), upgraded
        assert uids(node_cluster, ns, BACKING) == backing
        assert served(node_cluster, ns) == applications

        chartinstall.helm(cluster, "rollback", RELEASE, str(before), "-n", NAMESPACE, "--wait", f"--timeout={WAIT}")
        assert revision(node_cluster) == before + 2
        rolled = wait_for(lambda: (lambda p: p if len(p) == 4 else None)(service_pods(node_cluster)),
                          "the rolled-back pods alone", timeout=60)
        assert not set(rolled) & set(upgraded), (sorted(rolled), sorted(upgraded))
        assert all("--log-level=INFO" in args for args in rolled.values()), rolled
        assert uids(node_cluster, ns, BACKING) == backing
        assert served(node_cluster, ns) == applications
        # Written through the rolled-back pods: the service still writes the backing object in place.
        kubectl(cluster, "patch", "redis", "cache", "-n", ns, "--type=merge", "-p", '{"spec":{"replicas":3}}')
        release = get_json(cluster, "helmreleases", "redis-cache", "-n", ns)
        assert release["metadata"]["uid"] == backing["helmreleases/redis-cache"]
        assert release["spec"]["values"]["replicas"] == 3, release["spec"]
    finally:
        kubectl(cluster, "delete", "namespace", ns, "--ignore-not-found", "--wait=false")
        chartinstall.install(cluster, node_cluster.image, BOTH, wait=WAIT)


def test_uninstall_keeps_definitions_and_reinstall_serves_again(node_cluster: Node) -> None:
    """``helm uninstall --wait`` removes the services and their APIServices but, by the keep policy, not the
    definition CRDs (so not the definitions), and never the HelmReleases/Terraforms, which are not the release's.
    ``helm install`` again adopts the kept CRDs and the new pods serve the same Applications (same uids)."""
    ready(node_cluster)
    cluster = node_cluster.cluster
    ns = "life-uninstall"
    definitions = [(plural, name) for plural, name in applied_definitions(DEFINITIONS)]
    try:
        tenant(node_cluster, ns)
        backing, applications = uids(node_cluster, ns, BACKING), served(node_cluster, ns)
        crds_before = {name: get_json(cluster, "crd", name)["metadata"] for name in CRDS}
        defs_before = {f"{p}/{n}": get_json(cluster, p, n)["metadata"]["uid"] for p, n in definitions}
        for meta in crds_before.values():
            assert meta["annotations"]["helm.sh/resource-policy"] == "keep", meta["annotations"]

        result = chartinstall.helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", f"--timeout={WAIT}")
        assert "These resources were kept due to the resource policy" in result.stdout, result.stdout
        for name in CRDS:
            assert f"[CustomResourceDefinition] {name}" in result.stdout, result.stdout
        for name in APISERVICES:
            missing = kubectl(cluster, "get", "apiservice", name, check=False)
            assert missing.returncode != 0 and "NotFound" in missing.stderr, missing
        assert not service_pods(node_cluster)
        for name, meta in crds_before.items():
            assert get_json(cluster, "crd", name)["metadata"]["uid"] == meta["uid"]
        assert {f"{p}/{n}": get_json(cluster, p, n)["metadata"]["uid"] for p, n in definitions} == defs_before
        assert uids(node_cluster, ns, BACKING) == backing
        unserved = kubectl(cluster, "get", "redis", "cache", "-n", ns, check=False)
        assert unserved.returncode != 0, unserved.stdout

        chartinstall.install(cluster, node_cluster.image, BOTH, wait=WAIT)
        wait_accepted(node_cluster)
        assert served(node_cluster, ns) == applications
        assert uids(node_cluster, ns, BACKING) == backing
        for name, meta in crds_before.items():
            adopted = get_json(cluster, "crd", name)["metadata"]
            assert adopted["uid"] == meta["uid"]
            assert adopted["annotations"]["meta.helm.sh/release-name"] == RELEASE
    finally:
        kubectl(cluster, "delete", "namespace", ns, "--ignore-not-found", "--wait=false")
        chartinstall.install(cluster, node_cluster.image, BOTH, wait=WAIT)
