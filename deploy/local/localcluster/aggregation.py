"""Register an aggregated API server that runs on this machine with the local kube-apiserver.

kube-apiserver reaches an APIService's backend through a Service; an ExternalName Service whose
name resolves to ``localhost`` lets it proxy to a process listening on 127.0.0.1 without pods or
endpoints, the same way it would reach an in-cluster service.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from . import pki
from .cluster import Cluster, ClusterError


def serving_cert(cluster: Cluster, service: str, namespace: str) -> tuple[pki.KeyPair, pki.KeyPair]:
    """A CA and a serving cert for the extension server (SANs localhost, 127.0.0.1, <svc>.<ns>.svc)."""
    directory = cluster.dir / "aggregated" / f"{namespace}-{service}"
    directory.mkdir(parents=True, exist_ok=True)
    ca = pki.ensure_ca(directory, "ca", f"{service}-ca")
    cert = pki.issue(ca, directory, "serving", f"{service}.{namespace}.svc", server=True,
                     dns=("localhost", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"),
                     ips=("127.0.0.1",))
    return ca, cert


#: The user kube-apiserver's aggregator fetches every APIService's ``/openapi/v2`` and ``/openapi/v3``
#: as (no groups): the servers authorize those paths with a SubjectAccessReview, and kube-apiserver's
#: default RBAC grants this user nothing, so whoever registers an aggregated server grants it.
AGGREGATOR_OPENAPI_USER = "system:aggregator"
OPENAPI_READER = "agl-local:aggregator-openapi"


def openapi_reader() -> list[dict[str, object]]:
    """ClusterRole and binding that let kube-apiserver's aggregator read the servers' OpenAPI
    (the chart's ``<service>:aggregator-openapi`` does the same in a cluster)."""
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": OPENAPI_READER},
         "rules": [{"nonResourceURLs": ["/openapi", "/openapi/*"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": OPENAPI_READER},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": OPENAPI_READER},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": AGGREGATOR_OPENAPI_USER}]},
    ]


def register(cluster: Cluster, *, group: str, version: str, service: str, namespace: str, port: int,
             ca_bundle: Path, priority: int = 1000) -> None:
    """Create/replace the namespace, ExternalName Service and APIService for one group version, and let
    the aggregator read the server's OpenAPI."""
    documents = [
        *openapi_reader(),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": namespace},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": f"{version}.{group}"},
         "spec": {"group": group, "version": version, "groupPriorityMinimum": priority, "versionPriority": 15,
                  "service": {"name": service, "namespace": namespace, "port": port},
                  "caBundle": base64.b64encode(ca_bundle.read_bytes()).decode()}},
    ]
    manifest = "\n---\n".join(json.dumps(doc) for doc in documents)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=agl-localcluster",
                    "-f", "-", input=manifest)


def wait_available(cluster: Cluster, group: str, version: str, timeout: float = 60) -> None:
    """Wait until kube-apiserver reports the APIService Available (it probed our discovery)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        result = cluster.kubectl("get", "apiservice", f"{version}.{group}", "-o", "json", check=False)
        if result.returncode == 0:
            conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
            for cond in conditions:
                if cond.get("type") == "Available":
                    last = f"{cond.get('status')} {cond.get('reason')}: {cond.get('message')}"
                    if cond.get("status") == "True":
                        return
        time.sleep(0.5)
    raise ClusterError(f"APIService {version}.{group} not Available within {timeout:.0f}s: {last}")


def unregister(cluster: Cluster, group: str, version: str) -> None:
    cluster.kubectl("delete", "apiservice", f"{version}.{group}", "--ignore-not-found", check=False)
