"""Installs that go wrong on the real node, what a user is told, and the way back to a healthy release.

What decides each assertion is a real program: kubelet and containerd decide that an image that is not there is
``ErrImageNeverPull``; helm's ``--wait`` that the upgrade failed; the Deployment controller that the old pods stay
while the new ones cannot start; kube-apiserver's aggregation proxy (Go's x509 verification against the
APIService's caBundle) that a certificate from another CA is refused, and kube-aggregator's availability check
(which does not verify it) that the APIService still reads Available; the chart's test Pod, answered by
kube-apiserver, that ``helm test`` fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from localcluster import chartinstall
from localcluster.chartinstall import BOTH, NAMESPACE, RELEASE

from shared.security import tls
from tests.kube import Api, get_json, kubectl, wait_for
from tests.node.conftest import Node
from tests.node.test_install import SERVICES, assert_serving, pods

WAIT = "120s"


def release_status(node: Node) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(chartinstall.helm(node.cluster, "status", RELEASE, "-n", NAMESPACE,
                                                          "-o", "json").stdout)
    return status


def available(node: Node, component: str) -> dict[str, Any]:
    """The APIService's Available condition as kube-aggregator wrote it."""
    apiservice = get_json(node.cluster, "apiservice", SERVICES[component][0])
    condition: dict[str, Any] = {c["type"]: c for c in apiservice["status"]["conditions"]}["Available"]
    return condition


def assert_healthy(node: Node) -> None:
    """The release deployed, every pod of it Ready, both APIServices Available through their pods."""
    assert release_status(node)["info"]["status"] == "deployed"
    for component in SERVICES:
        kubectl(node.cluster, "rollout", "status", f"deployment/{RELEASE}-{component}", "-n", NAMESPACE,
                "--timeout=120s")
        wait_for(lambda c=component: available(node, c)["status"] == "True", f"{component}'s APIService Available",
                 timeout=90)
        # The rolled-out pods only: the old ones drain for shutdownDelaySeconds before they go.
        wait_for(lambda c=component: len(pods(node, c)) == 2, f"{component}'s old pods to be gone", timeout=60)
        assert_serving(node, component)


def test_missing_image_fails_the_upgrade_and_is_named(node_cluster: Node) -> None:
    """An image tag that is not on the node (pullPolicy Never): helm's --wait fails, the new pods say
    ErrImageNeverPull, the old pods go on serving, and an upgrade with the good image makes the release healthy."""
    cluster = node_cluster.cluster
    chartinstall.install(cluster, node_cluster.image, BOTH, wait=WAIT)
    good = release_status(node_cluster)["version"]
    result = chartinstall.helm(cluster, *chartinstall.install_args(
        node_cluster.image, BOTH, upgrade=True, wait="40s", extra=["--set", "image.tag=does-not-exist"]), check=False)
    why = chartinstall.pods_not_ready(cluster)
    print(f"helm: {result.returncode} {result.stderr.strip()}\npods: {why}")
    assert result.returncode != 0, result.stdout
    assert "UPGRADE FAILED" in result.stderr, result.stderr
    status = release_status(node_cluster)
    assert (status["version"], status["info"]["status"]) == (good + 1, "failed"), status["info"]
    for component in SERVICES:
        new = [line for line in why.splitlines() if line.startswith(f"pod {RELEASE}-{component}-")]
        assert new and all("ErrImageNeverPull" in line for line in new), why
        assert any("localhost/agl-parallel:does-not-exist" in line for line in new), why
        # maxUnavailable 0 of the rolling update: the old pods still serve the API.
        assert available(node_cluster, component)["status"] == "True", available(node_cluster, component)
    chartinstall.install(cluster, node_cluster.image, BOTH, wait=WAIT)
    assert release_status(node_cluster)["version"] == good + 2
    assert_healthy(node_cluster)
    assert chartinstall.pods_not_ready(cluster) == "every pod is Ready"


def tls_values(directory: Path, component: str, serving_ca: tls.CertKey, trusted_ca: tls.CertKey) -> list[str]:
    """``--set-file`` arguments of one service's tls.mode=values material: a serving certificate from
    ``serving_ca`` for the Service's DNS names, and ``trusted_ca`` as the caBundle."""
    service = f"{RELEASE}-{component}"
    names = [service, f"{service}.{NAMESPACE}", f"{service}.{NAMESPACE}.svc",
             f"{service}.{NAMESPACE}.svc.cluster.local"]
    serving = tls.new_cert(serving_ca, f"{service}.{NAMESPACE}.svc", dns_names=names, server=True)
    key = "helmAgl" if component == "helm-agl" else "tofuAgl"
    files = {"caBundle": trusted_ca.cert_pem, "cert": serving.cert_pem, "key": serving.key_pem}
    args = []
    for name, pem in files.items():
        path = directory / f"{component}-{name}.pem"
        path.write_bytes(pem)
        args += ["--set-file", f"{key}.tls.{name}={path}"]
    return args


def test_mismatched_ca_bundle_is_reported(node_cluster: Node, tmp_path: Path) -> None:
    """tls.mode=values with helm-agl's caBundle from another CA than its serving certificate (tofu-agl's matching,
    as the control): helm's --wait succeeds (kubelet's probes do not check the CA), kube-apiserver's proxy refuses
    the service's certificate (Go's x509 verification against the APIService's caBundle) and answers 503 with the
    reason, and ``helm test`` fails. kube-aggregator's availability check does not verify the certificate, so the
    APIService stays Available: only a request through it (``helm test``) shows the break."""
    cluster = node_cluster.cluster
    chartinstall.install(cluster, node_cluster.image, BOTH, wait=WAIT)
    good = release_status(node_cluster)["version"]
    serving_ca, other_ca = tls.new_ca("agl-test-serving-ca", days=2), tls.new_ca("agl-test-other-ca", days=2)
    extra = ["--set", "tls.mode=values",
             *tls_values(tmp_path, "helm-agl", serving_ca, other_ca),
             *tls_values(tmp_path, "tofu-agl", serving_ca, serving_ca)]
    api = Api(cluster)
    try:
        chartinstall.helm(cluster, *chartinstall.install_args(node_cluster.image, BOTH, upgrade=True, wait=WAIT,
                                                              extra=extra))
        answer = wait_for(lambda: (a := api.request("GET", "/apis/apps.cozystack.io/v1alpha1"))[0] == 503 and a,
                          "kube-apiserver to refuse helm-agl's certificate", timeout=60)
        print(f"GET /apis/apps.cozystack.io/v1alpha1 through the APIService: {answer}")
        assert answer[1] == ("error trying to reach service: tls: failed to verify certificate: "
                             "x509: certificate signed by unknown authority\n"), answer
        assert api.request("GET", "/apis/tofu.apps.cozystack.io/v1alpha1")[0] == 200
        condition = available(node_cluster, "helm-agl")
        print(f"helm-agl's APIService meanwhile: {condition}")
        assert (condition["status"], condition["reason"]) == ("True", "Passed"), condition
        result = chartinstall.helm(cluster, "test", RELEASE, "-n", NAMESPACE, "--timeout=180s", check=False)
        logs = kubectl(cluster, "logs", "-n", NAMESPACE, f"{RELEASE}-helm-agl-test").stdout
        print(f"helm test: {result.returncode}\n{result.stdout}\n{result.stderr}\ntest pod log:\n{logs}")
        assert result.returncode != 0, result.stdout
        suites = result.stdout.split("TEST SUITE:")
        assert any(s.strip().startswith(f"{RELEASE}-helm-agl-test") and "Phase:          Failed" in s
                   for s in suites), result.stdout
        assert f"pod {RELEASE}-helm-agl-test failed" in result.stderr, result.stderr
        assert "attempt 10: HTTP Error 503: Service Unavailable" in logs, logs
    finally:
        # Back to the release's last good revision: an upgrade to tls.mode=generate alone would keep the broken
        # material, since generate reuses whatever complete Secret it finds (the chart's lookup).
        chartinstall.helm(cluster, "rollback", RELEASE, str(good), "-n", NAMESPACE, "--wait", "--timeout=120s")
    chartinstall.install(cluster, node_cluster.image, BOTH, wait=WAIT)
    assert_healthy(node_cluster)
    assert wait_for(lambda: api.request("GET", "/apis/apps.cozystack.io/v1alpha1")[0] == 200,
                    "helm-agl reachable through its APIService again", timeout=60)
    result = chartinstall.helm(cluster, "test", RELEASE, "-n", NAMESPACE, "--timeout=180s")
    assert result.stdout.count("Phase:          Succeeded") == 2, result.stdout
