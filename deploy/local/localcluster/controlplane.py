"""What the local control plane runs with: its recorded state, certificates, authorization and kube-apiserver's flags.

Pure configuration, apart from writing the certificate and authorization files into the cluster's directories;
:mod:`localcluster.cluster` starts and stops the processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from . import netns, pki

SERVICE_CIDR = "10.0.0.0/24"
#: Users in this group (and only they) are also authorized by a webhook that a test may serve on
#: :attr:`State.authz_webhook_port`: decisions RBAC cannot express (e.g. by a user's extras).
#: Nothing is asked of the webhook for anyone else, and when none is listening it has no opinion,
#: so every other request is decided by RBAC alone, as without it.
AUTHZ_WEBHOOK_GROUP = "agl-test:authz-webhook"
#: kube-apiserver's port inside a node's network namespace, the same at every start: it is the ``kubernetes``
#: Service's endpoint, which every pod's in-cluster client reaches, and a kube-apiserver started after a crash on
#: another port left the EndpointSlice at the old one. The machine reaches it through a free loopback port
#: (``State.api_port``, forwarded).
NODE_API_PORT = 6443


@dataclass
class State:
    etcd_port: int
    etcd_peer_port: int
    api_port: int
    etcd_pid: int = 0
    api_pid: int = 0
    authz_webhook_port: int = 0
    #: A node cluster: the control plane runs in :mod:`netns`, reached on 127.0.0.1 through ``forward_pid``.
    node: bool = False
    forward_pid: int = 0



def certificates(pki_dir: Path) -> dict[str, pki.KeyPair]:
    """The control plane's CAs and certificates, made once and kept in ``pki_dir``."""
    ca = pki.ensure_ca(pki_dir, "ca", "agl-local-ca")
    front_ca = pki.ensure_ca(pki_dir, "front-proxy-ca", "agl-local-front-proxy-ca")
    return {
        "ca": ca,
        "front-proxy-ca": front_ca,
        "serving": pki.issue(ca, pki_dir, "apiserver", "kube-apiserver", server=True,
                             dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
                             ips=("127.0.0.1", "10.0.0.1", netns.NODE_IP)),
        "front-proxy-client": pki.issue(front_ca, pki_dir, "front-proxy-client", "front-proxy-client"),
        "admin": pki.issue(ca, pki_dir, "admin", "agl-admin", orgs=("system:masters",)),
        "authz-webhook-ca": pki.ensure_ca(pki_dir, "authz-webhook-ca", "agl-local-authz-webhook-ca"),
    }



def authorization_config(directory: Path, pki_dir: Path, state: State) -> Path:
    """RBAC, preceded by the test authorization webhook for :data:`AUTHZ_WEBHOOK_GROUP` only, and on a node by
    the Node authorizer (what a kubelet may read and write, as on any real cluster)."""
    kubeconfig = directory / "authz-webhook.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "authz-webhook", "cluster": {
            "server": f"https://127.0.0.1:{state.authz_webhook_port}/authorize",
            "certificate-authority": str(certificates(pki_dir)["authz-webhook-ca"].cert)}}],
        "users": [{"name": "kube-apiserver", "user": {}}],
        "contexts": [{"name": "authz-webhook", "context": {"cluster": "authz-webhook", "user": "kube-apiserver"}}],
        "current-context": "authz-webhook",
    }))
    webhook = {"type": "Webhook", "name": "agl-test-webhook", "webhook": {
        "timeout": "3s", "failurePolicy": "NoOpinion",
        "subjectAccessReviewVersion": "v1", "matchConditionSubjectAccessReviewVersion": "v1",
        # Every question reaches the test: it may answer the same one differently.
        "cacheAuthorizedRequests": False, "cacheUnauthorizedRequests": False,
        "connectionInfo": {"type": "KubeConfigFile", "kubeConfigFile": str(kubeconfig)},
        "matchConditions": [{"expression": f"'{AUTHZ_WEBHOOK_GROUP}' in request.groups"}],
    }}
    rbac = {"type": "RBAC", "name": "rbac"}
    config = directory / "authorization.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AuthorizationConfiguration",
        # A state file from before the webhook existed has no port for it.
        "authorizers": [*([{"type": "Node", "name": "node"}] if state.node else []),
                        *([webhook] if state.authz_webhook_port else []), rbac],
    }))
    return config



def apiserver_argv(binary: Path, directory: Path, pki_dir: Path, state: State) -> list[str]:
    """kube-apiserver's command line: envtest's flags plus what aggregation needs, and on a node what kubelet,
    kube-proxy and the pods need."""
    certs = certificates(pki_dir)
    sa_key, sa_pub = pki.ensure_service_account_keys(pki_dir)
    if state.node:
        # The node's kubelet, kube-proxy and pods reach kube-apiserver at the node's address (the ``kubernetes``
        # Service's endpoint, kept by kube-apiserver itself), aggregation goes to the services' pod IPs, and
        # kube-apiserver reaches the kubelet (logs, exec) with a client certificate of its own.
        kubelet_client = pki.issue(certs["ca"], pki_dir, "apiserver-kubelet-client",
                                   "kube-apiserver-kubelet-client", orgs=("system:masters",))
        placement = ["--bind-address=0.0.0.0", f"--advertise-address={netns.NODE_IP}",
                     "--enable-admission-plugins=NodeRestriction", "--enable-aggregator-routing=true",
                     f"--kubelet-client-certificate={kubelet_client.cert}",
                     f"--kubelet-client-key={kubelet_client.key}",
                     "--kubelet-preferred-address-types=InternalIP"]
    else:
        placement = ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                     "--enable-aggregator-routing=false"]
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{state.etcd_port}",
        *placement, f"--secure-port={NODE_API_PORT if state.node else state.api_port}",
        f"--tls-cert-file={certs['serving'].cert}", f"--tls-private-key-file={certs['serving'].key}",
        f"--client-ca-file={certs['ca'].cert}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={sa_pub}", f"--service-account-signing-key-file={sa_key}",
        f"--authorization-config={authorization_config(directory, pki_dir, state)}",
        "--allow-privileged=true",
        # API aggregation: kube-apiserver proxies to extension servers with this client cert, and
        # tells them who the user is through the request headers named here.
        f"--requestheader-client-ca-file={certs['front-proxy-ca'].cert}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={certs['front-proxy-client'].cert}",
        f"--proxy-client-key-file={certs['front-proxy-client'].key}",
        "--v=1",
    ]

