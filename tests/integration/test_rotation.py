"""Certificates and front-proxy trust change under a running service (SPEC §5), against the real control plane.

Nothing is restarted: the serving certificate files are replaced in place (as cert-manager renews a
Secret), and ``kube-system/extension-apiserver-authentication`` is edited the way a control-plane
upgrade would change it.  kube-apiserver keeps writing its own CA and allowed name back into that
ConfigMap (it merges, never removes what others added), so these tests add a CA or a name of their
own, then take it away again, and put the ConfigMap back as they found it.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from localcluster import aggregation, pki, services
from localcluster.cluster import Cluster

from shared.security import tls
from tests.kube import wait_for

GROUP, VERSION = "apps.cozystack.io", "v1alpha1"
DISCOVERY = f"/apis/{GROUP}/{VERSION}"
ADMIN = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}
REFUSED = "refused"


def served_fingerprint(port: int) -> str:
    """SHA-256 of the certificate a fresh TLS handshake with the service presents."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, ctx.wrap_socket(sock) as conn:
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def pem_fingerprint(cert_pem: bytes) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(cert_pem.decode())).hexdigest()


def as_front_proxy(port: int, cert: pki.KeyPair, path: str = DISCOVERY) -> int | str:
    """The status code of a request with ``cert`` as the client certificate, or :data:`REFUSED` when the
    TLS layer turned the certificate away (TLS 1.3 reports that on the first read)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.load_cert_chain(str(cert.cert), str(cert.key))
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers={"Accept": "application/json", **ADMIN})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, http.client.HTTPException):
        return REFUSED


# ------------------------------------------------------------------------------ the ConfigMap


def auth_configmap(cluster: Cluster) -> dict[str, Any]:
    out = cluster.kubectl("get", "configmap", "extension-apiserver-authentication", "-n", "kube-system", "-o", "json")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def edit_auth_configmap(cluster: Cluster, change: Callable[[dict[str, str]], None]) -> None:
    """Read-modify-replace, again on a conflict (kube-apiserver writes the same object)."""
    def attempt() -> bool:
        cm = auth_configmap(cluster)
        change(cm["data"])
        return cluster.kubectl("replace", "-f", "-", input=json.dumps(cm), check=False).returncode == 0

    wait_for(attempt, "the authentication ConfigMap to be replaced")


def names_of(data: dict[str, str]) -> list[str]:
    return list(json.loads(data.get("requestheader-allowed-names") or "[]"))


@pytest.fixture
def restore_configmap(control_plane: Cluster) -> Iterator[None]:
    original = auth_configmap(control_plane)["data"]
    yield

    def back(data: dict[str, str]) -> None:
        data["requestheader-allowed-names"] = original["requestheader-allowed-names"]
        data["requestheader-client-ca-file"] = original["requestheader-client-ca-file"]

    edit_auth_configmap(control_plane, back)


@pytest.fixture
def helm_now(control_plane: Cluster, helm_service: services.Running) -> services.Running:
    """The helm_agl serving now: an earlier module may have replaced the session's (test_leader_election gives
    a new process back, on a new port), so the session fixture's port can be stale."""
    return services.start(control_plane, services.HELM_AGL)


# ---------------------------------------------------------------------------------- the tests


def test_rotated_serving_certificate_is_served_without_restart(control_plane: Cluster,
                                                               helm_now: services.Running) -> None:
    port, pid = helm_now.port, helm_now.pid
    directory = control_plane.dir / "aggregated" / f"{services.NAMESPACE}-{helm_now.service.name}"
    before = served_fingerprint(port)
    assert before == pem_fingerprint((directory / "serving.crt").read_bytes())
    # A new CA and a new certificate for the same names, written over the files the service was started with
    # (the CA too, so a later restart of the service registers a matching caBundle).
    ca = tls.new_ca(f"{helm_now.service.name}-ca-rotated", days=3650)
    leaf = tls.new_cert(ca, f"{helm_now.service.name}.{services.NAMESPACE}.svc", server=True,
                        dns_names=("localhost", f"{helm_now.service.name}.{services.NAMESPACE}.svc"),
                        ip_addresses=("127.0.0.1",))
    for path, data in (("ca.key", ca.key_pem), ("ca.crt", ca.cert_pem),
                       ("serving.key", leaf.key_pem), ("serving.crt", leaf.cert_pem)):
        scratch = directory / f".{path}.new"
        scratch.write_bytes(data)
        scratch.replace(directory / path)
    wait_for(lambda: served_fingerprint(port) == pem_fingerprint(leaf.cert_pem), "the new certificate to be served",
             timeout=60, interval=0.5)
    # kube-apiserver, told the new CA, reaches the service through the new certificate.
    aggregation.register(control_plane, group=GROUP, version=VERSION, service=helm_now.service.name,
                         namespace=services.NAMESPACE, port=port, ca_bundle=directory / "ca.crt")
    aggregation.wait_available(control_plane, GROUP, VERSION)
    wait_for(lambda: control_plane.kubectl("get", "--raw", DISCOVERY, check=False).returncode == 0,
             "kube-apiserver to proxy to the rotated service", timeout=60, interval=0.5)
    assert helm_now.pid == pid and services.start(control_plane, services.HELM_AGL).pid == pid  # no restart


def test_allowed_names_change_while_serving(control_plane: Cluster, helm_now: services.Running,
                                            restore_configmap: None, tmp_path: Path) -> None:
    front_ca = pki.ensure_ca(control_plane.pki_dir, "front-proxy-ca", "agl-local-front-proxy-ca")
    newcomer = pki.issue(front_ca, tmp_path, "newcomer", "agl-rotation-proxy")
    port = helm_now.port
    assert as_front_proxy(port, newcomer) == 401
    edit_auth_configmap(control_plane, lambda data: data.update(
        {"requestheader-allowed-names": json.dumps([*names_of(data), "agl-rotation-proxy"])}))
    wait_for(lambda: as_front_proxy(port, newcomer) == 200, "the newly allowed name to get through",
             timeout=60, interval=0.5)
    edit_auth_configmap(control_plane, lambda data: data.update(
        {"requestheader-allowed-names": json.dumps([n for n in names_of(data) if n != "agl-rotation-proxy"])}))
    wait_for(lambda: as_front_proxy(port, newcomer) == 401, "the name no longer allowed to be refused",
             timeout=60, interval=0.5)
    # kube-apiserver's own front proxy was never affected.
    assert control_plane.kubectl("get", "--raw", DISCOVERY).returncode == 0


def test_front_proxy_ca_replaced_while_serving(control_plane: Cluster, helm_now: services.Running,
                                               restore_configmap: None, tmp_path: Path) -> None:
    port = helm_now.port
    original = auth_configmap(control_plane)["data"]["requestheader-client-ca-file"]
    olds, news = tmp_path / "old", tmp_path / "new"
    olds.mkdir()
    news.mkdir()
    old_ca = pki.ensure_ca(olds, "ca", "agl-rotation-old-ca")
    new_ca = pki.ensure_ca(news, "ca", "agl-rotation-new-ca")
    # CN front-proxy-client: an allowed name, so only the issuing CA decides.
    from_old = pki.issue(old_ca, olds, "proxy", "front-proxy-client")
    from_new = pki.issue(new_ca, news, "proxy", "front-proxy-client")
    assert as_front_proxy(port, from_old) == REFUSED and as_front_proxy(port, from_new) == REFUSED

    def trust(ca: pki.KeyPair) -> Callable[[dict[str, str]], None]:
        return lambda data: data.update(
            {"requestheader-client-ca-file": original.rstrip("\n") + "\n" + ca.cert.read_text()})

    edit_auth_configmap(control_plane, trust(old_ca))
    wait_for(lambda: as_front_proxy(port, from_old) == 200, "the added CA to be trusted", timeout=60, interval=0.5)
    edit_auth_configmap(control_plane, trust(new_ca))
    wait_for(lambda: as_front_proxy(port, from_new) == 200, "the replacing CA to be trusted", timeout=60, interval=0.5)
    assert as_front_proxy(port, from_old) == REFUSED
    assert control_plane.kubectl("get", "--raw", DISCOVERY).returncode == 0
