"""How the lister logs in before the client library is loaded: the same kubeconfig context or service account.

The service's client logs in through kubernetes_asyncio's loader (:mod:`shared.client.credentials`), which is part
of the imports the lister runs alongside, so it cannot be used here.  This reads the plain cases the same way the
loader reads them (the current context's server and CA; a client certificate, a ``token`` or a ``tokenFile``; or
the pod's service account) with the standard library, and gives up on anything else (exec plugins, auth
providers, proxies, a server name override): the service then lists as usual, once its client has loaded.
Written by hand because the only libraries that read a kubeconfig are the clients whose import it runs beside.
"""

from __future__ import annotations

import base64
import http.client
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: Where a pod's service account is mounted, and the variables that name the in-cluster server.
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: User fields the lister cannot log in with: the service's own client loads those.
UNSUPPORTED_USER = ("exec", "auth-provider", "username", "password", "as", "as-groups", "impersonate")
UNSUPPORTED_CLUSTER = ("proxy-url", "tls-server-name")


class Unsupported(Exception):
    """This login is left to the service's client; the message says why."""


@dataclass(frozen=True)
class Login:
    """One server and one identity, as an HTTPS connection factory."""

    host: str
    port: int
    prefix: str
    context: ssl.SSLContext
    headers: dict[str, str] = field(default_factory=dict)

    def connect(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)


def load(kubeconfig: str | None) -> Login:
    """The login of ``--kubeconfig``'s current context, or the pod's service account without one."""
    return from_kubeconfig(Path(kubeconfig)) if kubeconfig else in_cluster()


def in_cluster() -> Login:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise Unsupported("no kubeconfig and not in a pod")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    token = (SERVICE_ACCOUNT / "token").read_text().strip()
    return Login(host, int(port), "", context, {"Authorization": f"Bearer {token}"})


def from_kubeconfig(path: Path) -> Login:
    import yaml  # only here: an in-cluster start does not need it

    config = yaml.safe_load(path.read_text()) or {}
    current = config.get("current-context")
    context = _named(config, "contexts", current, "context")
    cluster = _named(config, "clusters", context.get("cluster"), "cluster")
    user = _named(config, "users", context.get("user"), "user") if context.get("user") else {}
    refused = [key for key in UNSUPPORTED_USER if user.get(key)] + [k for k in UNSUPPORTED_CLUSTER if cluster.get(k)]
    if refused:
        raise Unsupported(f"the kubeconfig uses {', '.join(refused)}")
    server = urlsplit(str(cluster.get("server") or ""))
    if server.scheme != "https" or not server.hostname:
        raise Unsupported(f"server {cluster.get('server')!r} is not an https URL")
    base = path.parent
    # A cluster's CA is the only one trusted for it, as the client trusts it; the system's only without one.
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cluster.get("insecure-skip-tls-verify"):
        tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    elif cluster.get("certificate-authority-data"):
        tls.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        tls.load_verify_locations(cafile=str(base / cluster["certificate-authority"]))
    else:
        tls.load_default_certs()
    _client_certificate(tls, user, base)
    headers = {}
    token = user.get("token") or (_read(base / user["tokenFile"]) if user.get("tokenFile") else None)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return Login(server.hostname, server.port or 443, server.path.rstrip("/"), tls, headers)


def _named(config: dict[str, Any], section: str, name: Any, field_name: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            value: dict[str, Any] = entry.get(field_name) or {}
            return value
    raise Unsupported(f"the kubeconfig has no {section} entry {name!r}")


def _client_certificate(tls: ssl.SSLContext, user: dict[str, Any], base: Path) -> None:
    cert, key = user.get("client-certificate"), user.get("client-key")
    if cert and key:
        tls.load_cert_chain(str(base / cert), str(base / key))
        return
    cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
    if cert_data and key_data:
        # ssl loads a certificate chain only from files: written where only this user can read, and removed at once.
        with tempfile.TemporaryDirectory() as scratch:
            cert_file, key_file = Path(scratch) / "tls.crt", Path(scratch) / "tls.key"
            cert_file.write_bytes(base64.b64decode(cert_data))
            key_file.write_bytes(base64.b64decode(key_data))
            tls.load_cert_chain(str(cert_file), str(key_file))


def _read(path: Path) -> str:
    return path.read_text().strip()
