"""What the early lister reads of a kubeconfig (:mod:`shared.client.early.login`), and what it leaves to the client.

Logging in for real, as each kind of user, is checked against kube-apiserver in
``tests/integration/test_listed_ahead.py``; here, the reading of the file and the refusals, without a cluster.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.client.early import login as logins
from shared.security import tls


def kubeconfig(directory: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path = directory / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "here",
        "contexts": [{"name": "elsewhere", "context": {"cluster": "other", "user": "other"}},
                     {"name": "here", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}]}))
    return path


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A CA and a client certificate, written next to where the kubeconfig goes (named relative to it)."""
    ca = tls.new_ca()
    client = tls.new_cert(ca, "someone", server=False, client=True)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "client.crt").write_bytes(client.cert_pem)
    (tmp_path / "client.key").write_bytes(client.key_pem)
    return tmp_path


def test_the_current_context_and_files_relative_to_the_kubeconfig_are_read(pki: Path) -> None:
    path = kubeconfig(pki, {"server": "https://[::1]:6443/prefix/", "certificate-authority": "ca.crt"},
                      {"client-certificate": "client.crt", "client-key": "client.key"})
    login = logins.load(str(path))
    assert (login.host, login.port, login.prefix) == ("::1", 6443, "/prefix")
    assert login.context.verify_mode == ssl.CERT_REQUIRED and login.context.check_hostname
    # The cluster's CA alone, as the client trusts it: not the system's too.
    assert [ca["subject"] for ca in login.context.get_ca_certs()] == [((("commonName", "agl-ca"),),)]
    assert login.headers == {}


def test_a_token_file_is_read_without_its_newline(pki: Path) -> None:
    (pki / "token").write_text("abc.def\n")
    path = kubeconfig(pki, {"server": "https://example.test", "insecure-skip-tls-verify": True},
                      {"tokenFile": "token"})
    login = logins.load(str(path))
    assert login.headers == {"Authorization": "Bearer abc.def"} and login.port == 443
    assert login.context.verify_mode == ssl.CERT_NONE


@pytest.mark.parametrize(("cluster", "user", "reason"), [
    ({"server": "https://k:6443"}, {"exec": {"command": "x"}}, "exec"),
    ({"server": "https://k:6443"}, {"auth-provider": {"name": "oidc"}}, "auth-provider"),
    ({"server": "https://k:6443", "proxy-url": "http://proxy:3128"}, {}, "proxy-url"),
    ({"server": "https://k:6443", "tls-server-name": "kubernetes"}, {}, "tls-server-name"),
    ({"server": "http://k:8080"}, {}, "not an https URL"),
])
def test_what_only_the_client_can_do_is_left_to_it(tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any],
                                                   reason: str) -> None:
    with pytest.raises(logins.Unsupported, match=reason):
        logins.load(str(kubeconfig(tmp_path, cluster, user)))


def test_no_kubeconfig_outside_a_pod_is_left_to_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(logins.Unsupported, match="not in a pod"):
        logins.load(None)
