"""kopf's ConnectionInfo comes from the Configuration kubernetes_asyncio loads, for every kind of kubeconfig user.

Each kubeconfig is written by the test; the exec plugin is a tiny script that prints an
ExecCredential and counts how often it ran.
"""

from __future__ import annotations

import base64
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.client import credentials
from shared.security import tls

SERVER = "https://kube.example:6443"


@pytest.fixture(scope="module")
def material() -> dict[str, bytes]:
    ca = tls.new_ca("test-ca")
    user = tls.new_cert(ca, "alice", server=False, client=True)
    return {"ca": ca.cert_pem, "cert": user.cert_pem, "key": user.key_pem}


def kubeconfig(directory: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> str:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "c", "cluster": {"server": SERVER, **(cluster or {})}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def read(path: Any) -> bytes:
    return Path(path).read_bytes()


async def test_client_certificate_inline(tmp_path: Path, material: dict[str, bytes]) -> None:
    path = kubeconfig(tmp_path, {"client-certificate-data": b64(material["cert"]),
                                 "client-key-data": b64(material["key"])},
                      {"certificate-authority-data": b64(material["ca"])})
    info = await (await credentials.load(path)).connection_info()
    assert info.server == SERVER and info.insecure is False
    assert read(info.ca_path) == material["ca"]
    assert read(info.certificate_path) == material["cert"] and read(info.private_key_path) == material["key"]
    assert info.token is None and info.scheme is None and info.proxy_url is None


async def test_client_certificate_files_relative_to_the_kubeconfig(tmp_path: Path,
                                                                   material: dict[str, bytes]) -> None:
    (tmp_path / "pki").mkdir()
    for name in ("ca", "cert", "key"):
        (tmp_path / "pki" / f"{name}.pem").write_bytes(material[name])
    path = kubeconfig(tmp_path, {"client-certificate": "pki/cert.pem", "client-key": "pki/key.pem"},
                      {"certificate-authority": "pki/ca.pem", "proxy-url": "http://proxy.example:3128"})
    info = await (await credentials.load(path)).connection_info()
    assert Path(str(info.ca_path)) == tmp_path / "pki" / "ca.pem"
    assert Path(str(info.certificate_path)) == tmp_path / "pki" / "cert.pem"
    assert Path(str(info.private_key_path)) == tmp_path / "pki" / "key.pem"
    assert info.proxy_url == "http://proxy.example:3128"


async def test_bearer_token(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, {"token": "static-token"}, {"insecure-skip-tls-verify": True})
    info = await (await credentials.load(path)).connection_info()
    assert (info.scheme, info.token) == ("Bearer", "static-token")
    assert info.insecure is True and info.ca_path is None and info.certificate_path is None
    assert info.as_http_headers() == {"Authorization": "Bearer static-token"}


async def test_token_file_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("first-token\n")
    path = kubeconfig(tmp_path, {"tokenFile": "token"})
    loaded = await credentials.load(path)
    info = await loaded.connection_info()
    assert (info.scheme, info.token) == ("Bearer", "first-token")
    (tmp_path / "token").write_text("rotated-token\n")  # a projected token is renewed in place
    monkeypatch.setattr(credentials, "TOKEN_FILE_PERIOD", 0.0)
    assert (await loaded.connection_info()).token == "rotated-token"
    assert loaded.configuration.api_key[credentials.AUTHORIZATION] == "Bearer rotated-token"


PLUGIN = """
import json, os, pathlib, sys
counter = pathlib.Path(os.environ["AGL_TEST_COUNTER"])
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
status = {"token": f"exec-token-{runs}"}
if os.environ.get("AGL_TEST_EXPIRES"):
    status["expirationTimestamp"] = os.environ["AGL_TEST_EXPIRES"]
json.dump({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}, sys.stdout)
"""


def exec_user(tmp_path: Path, expires: str = "") -> dict[str, Any]:
    script = tmp_path / "plugin.py"
    script.write_text(PLUGIN)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(script)], "interactiveMode": "Never",
                     "env": [{"name": "AGL_TEST_COUNTER", "value": str(tmp_path / "runs")},
                             {"name": "AGL_TEST_EXPIRES", "value": expires}]}}


def runs(tmp_path: Path) -> int:
    return int((tmp_path / "runs").read_text())


async def test_exec_plugin_credential_is_kept_while_valid(tmp_path: Path) -> None:
    expires = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    path = kubeconfig(tmp_path, exec_user(tmp_path, expires.strftime("%Y-%m-%dT%H:%M:%SZ")))
    loaded = await credentials.load(path)
    info = await loaded.connection_info()
    assert (info.scheme, info.token) == ("Bearer", "exec-token-1")
    assert info.expiration is not None and abs((info.expiration - expires).total_seconds()) < 1
    await loaded.connection_info()
    assert runs(tmp_path) == 1


async def test_exec_plugin_runs_again_when_the_credential_expires(tmp_path: Path) -> None:
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=5)  # inside the renewal margin
    path = kubeconfig(tmp_path, exec_user(tmp_path, soon.strftime("%Y-%m-%dT%H:%M:%SZ")))
    loaded = await credentials.load(path)
    assert runs(tmp_path) == 1
    info = await loaded.connection_info()
    assert info.token == "exec-token-2" and runs(tmp_path) == 2
    # The service's own requests use the same, renewed credential.
    assert await loaded.configuration.get_api_key_with_prefix(credentials.AUTHORIZATION) == "Bearer exec-token-3"


async def test_exec_plugin_without_expiry_runs_once(tmp_path: Path) -> None:
    loaded = await credentials.load(kubeconfig(tmp_path, exec_user(tmp_path)))
    for _ in range(3):
        assert (await loaded.connection_info()).token == "exec-token-1"
    assert runs(tmp_path) == 1
    assert json.loads(json.dumps(loaded.configuration.api_key)) == {credentials.AUTHORIZATION: "Bearer exec-token-1"}


async def test_service_account_in_a_pod(tmp_path: Path, material: dict[str, bytes],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a kubeconfig: the pod's projected token and CA, where kubelet mounts them."""
    from kubernetes_asyncio.config import incluster_config

    (tmp_path / "token").write_text("pod-token")
    (tmp_path / "ca.crt").write_bytes(material["ca"])
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    info = await (await credentials.load(None)).connection_info()
    assert info.server == "https://10.96.0.1:443"
    assert Path(str(info.ca_path)) == tmp_path / "ca.crt"
    assert (info.scheme, info.token) == ("Bearer", "pod-token")
    assert info.certificate_path is None and info.insecure is False
