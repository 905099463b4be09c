"""Cluster DNS for the local node: CoreDNS in a pod, behind the ``kube-dns`` Service kubelet names in every pod.

CoreDNS is built from the Go module proxy (:func:`build.coredns_target`) into an image ``FROM scratch`` holding only
its static binary, run as 65532 on an unprivileged port (the Service maps 53 to it, so the pod needs no
capability). It answers for ``cluster.local`` from the API (``kubernetes`` plugin) and forwards nothing: there is
no name server it may ask outside the node's namespace, so any other name is NXDOMAIN / SERVFAIL.
"""

from __future__ import annotations

import json
import time
from typing import Any

from . import build, images, nodeconfig, versions
from .build import log
from .cluster import Cluster
from .images import ImageArchive

NAME = "coredns"
NAMESPACE = "kube-system"
PORT = 1053
COREFILE = f"""\
.:{PORT} {{
    errors
    health :8080
    ready :8181
    kubernetes {nodeconfig.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 30
}}
"""
IMAGE_CONFIG = ("--entrypoint", '["/coredns"]', "--user", "65532:65532")


def coredns_target() -> build.GoTarget:
    """CoreDNS with its default plugins (``kubernetes``, ``cache``, ``health``, ``ready``, ...), linked statically to
    run ``FROM scratch`` in a pod."""
    module = "github.com/coredns/coredns"
    return build.GoTarget("coredns", module, versions.COREDNS, module, static=True)


def ensure_image() -> ImageArchive:
    """Build (or reuse) CoreDNS's image: ``localhost/agl-coredns:<version>-<hash of the binary's recipe>``."""
    binary = build.build(coredns_target())
    ref = f"localhost/agl-coredns:{versions.COREDNS}-{images.short_hash(versions.COREDNS, *IMAGE_CONFIG)}"
    archive = images.images_dir() / f"agl-coredns-{ref.rsplit(':', 1)[1]}.oci.tar"
    if archive.is_file():
        return ImageArchive(ref, archive)
    if not images.image_exists(ref):
        images.commit_from_scratch(ref, [(binary, "/coredns")], IMAGE_CONFIG)
    return images.save(ref, archive.name.removesuffix(".oci.tar"))


def manifests(image_ref: str) -> list[dict[str, Any]]:
    """CoreDNS's ServiceAccount, the read access its ``kubernetes`` plugin needs, its Corefile, Deployment and the
    ``kube-dns`` Service at :data:`nodeconfig.DNS_IP`."""
    labels = {"k8s-app": "kube-dns"}
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": labels}
    probe = {"scheme": "HTTP"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "agl:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "agl:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "agl:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
            "replicas": 1, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "serviceAccountName": NAME, "priorityClassName": "system-cluster-critical",
                "dnsPolicy": "Default",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "coredns", "image": image_ref, "imagePullPolicy": "Never",
                    "args": ["-conf", "/etc/coredns/Corefile"],
                    "ports": [{"name": "dns", "containerPort": PORT, "protocol": "UDP"},
                              {"name": "dns-tcp", "containerPort": PORT, "protocol": "TCP"}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181, **probe}, "periodSeconds": 2},
                    "livenessProbe": {"httpGet": {"path": "/health", "port": 8080, **probe}},
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                }],
                "volumes": [{"name": "config", "configMap": {"name": NAME}}],
            }}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "namespace": NAMESPACE,
                                                             "labels": labels},
         "spec": {"selector": labels, "clusterIP": nodeconfig.DNS_IP, "ports": [
             {"name": "dns", "port": 53, "targetPort": PORT, "protocol": "UDP"},
             {"name": "dns-tcp", "port": 53, "targetPort": PORT, "protocol": "TCP"}]}},
    ]


def start(cluster: Cluster, image: ImageArchive) -> None:
    """Apply CoreDNS (its image already imported into the node) and wait until its Deployment is Available."""
    started = time.monotonic()
    cluster.kubectl("apply", "--server-side", "--field-manager=agl-localcluster", "-f", "-",
                    input="\n---\n".join(json.dumps(m) for m in manifests(image.ref)))
    cluster.kubectl("rollout", "status", f"deployment/{NAME}", "-n", NAMESPACE, "--timeout=90s")
    log(f"node: cluster DNS ({NAME} behind kube-dns {nodeconfig.DNS_IP}) ready after "
        f"{time.monotonic() - started:.1f}s")
