"""Cluster DNS on the node: a pod resolves Service names through CoreDNS behind ``kube-dns``, as pods do on a cluster.

The pod runs the project's image (nothing else can be pulled here) and asks the C library's resolver, so the
answer comes from the resolv.conf kubelet wrote into the pod (``nameserver 10.0.0.10``, ``search`` domains), through
kube-proxy's rules for the ``kube-dns`` Service, from CoreDNS reading Services from kube-apiserver.
"""

from __future__ import annotations

import json

from localcluster import nodeconfig

from tests.kube import get_json, kubectl, wait_for
from tests.node.conftest import Node

SCRIPT = ("import json,socket;print(json.dumps({n: socket.gethostbyname(n) for n in "
          "['kubernetes.default.svc.cluster.local', 'kubernetes.default', 'kube-dns.kube-system']}))")


def test_pods_resolve_service_names(node_cluster: Node) -> None:
    cluster = node_cluster.cluster
    dns = get_json(cluster, "service", "kube-dns", "-n", "kube-system")
    assert dns["spec"]["clusterIP"] == nodeconfig.DNS_IP
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns-probe", "namespace": "default"},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "probe", "image": node_cluster.image, "imagePullPolicy": "Never",
               "command": ["python", "-c", SCRIPT],
               "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False}}]}}
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(pod))
    try:
        phase = wait_for(lambda: (p := get_json(cluster, "pod", "dns-probe", "-n", "default")["status"]
                                  .get("phase")) in ("Succeeded", "Failed") and p, "the DNS probe pod to end",
                         timeout=90)
        log = kubectl(cluster, "logs", "dns-probe", "-n", "default").stdout
        assert phase == "Succeeded", log
        answers = json.loads(log.strip().splitlines()[-1])
        kubernetes = get_json(cluster, "service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
        assert answers == {"kubernetes.default.svc.cluster.local": kubernetes, "kubernetes.default": kubernetes,
                           "kube-dns.kube-system": nodeconfig.DNS_IP}
    finally:
        kubectl(cluster, "delete", "pod", "dns-probe", "-n", "default", "--wait=false", check=False)
