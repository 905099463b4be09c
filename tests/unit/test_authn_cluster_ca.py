"""A certificate from the cluster's client CA reaches the server but never authenticates.

The TLS layer trusts kube-apiserver's ``client-ca-file`` as well as the request-header CA, so a
user who talks to the service port directly with their kubectl certificate gets a 401 Status
rather than a handshake failure; the authenticator then insists on the request-header CA.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from shared.api import errors
from shared.security import tls
from shared.security.authn import RequestHeaderConfig

FRONT_PROXY_CA = tls.new_ca("front-proxy-ca")
CLUSTER_CA = tls.new_ca("cluster-ca")
FOREIGN_CA = tls.new_ca("foreign-ca")

CONFIG = RequestHeaderConfig.from_configmap_data({
    "client-ca-file": CLUSTER_CA.cert_pem.decode(),
    "requestheader-client-ca-file": FRONT_PROXY_CA.cert_pem.decode(),
    "requestheader-allowed-names": "[]",  # the CA alone must keep the cluster's users out
})
HEADERS = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}


def test_configmap_client_ca_is_kept_for_tls_only() -> None:
    assert CONFIG.cluster_client_ca == CLUSTER_CA.cert_pem.decode()
    bundle = CONFIG.tls_client_cas()
    assert bundle is not None
    assert FRONT_PROXY_CA.cert_pem.decode().strip() in bundle and CLUSTER_CA.cert_pem.decode().strip() in bundle
    assert RequestHeaderConfig(client_ca=None).tls_client_cas() is None


def test_issuer_check() -> None:
    proxy = tls.new_cert(FRONT_PROXY_CA, "front-proxy-client", server=False, client=True)
    user = tls.new_cert(CLUSTER_CA, "front-proxy-client", server=False, client=True)
    assert CONFIG.signed_by_request_header_ca(_der(proxy.cert_pem))
    assert not CONFIG.signed_by_request_header_ca(_der(user.cert_pem))
    assert not CONFIG.signed_by_request_header_ca(b"not a certificate")


def test_issuer_verdict_is_remembered_per_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """One signature check per certificate and config: kube-apiserver presents the same certificate on
    every request; a config built for a rotated CA decides afresh."""
    proxy = _der(tls.new_cert(FRONT_PROXY_CA, "front-proxy-client", server=False, client=True).cert_pem)
    config = RequestHeaderConfig(client_ca=FRONT_PROXY_CA.cert_pem.decode())
    checks: list[bytes] = []
    check = RequestHeaderConfig._issued_by_front_proxy_ca

    def counted(self: RequestHeaderConfig, der: bytes) -> bool:
        checks.append(der)
        return check(self, der)

    monkeypatch.setattr(RequestHeaderConfig, "_issued_by_front_proxy_ca", counted)
    assert all(config.signed_by_request_header_ca(proxy) for _ in range(5))
    assert checks == [proxy]
    rotated = RequestHeaderConfig(client_ca=tls.new_ca("rotated-front-proxy-ca").cert_pem.decode())
    assert not rotated.signed_by_request_header_ca(proxy)
    assert len(checks) == 2


def test_dict_only_certificate_is_refused_when_tls_trusts_more() -> None:
    peercert = {"subject": ((("commonName", "front-proxy-client"),),)}
    with pytest.raises(errors.ApiError) as err:
        CONFIG.authenticate(peercert, HEADERS)
    assert err.value.code == 401


def _der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


# --- real handshakes ------------------------------------------------------------------------------


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[int, asyncio.Queue[Any], bytes]]:
    files = tls.write_serving_cert(tmp_path / "serving", ["localhost"], ["127.0.0.1"])
    context = tls.server_context(files.cert_file, files.key_file, CONFIG.tls_client_cas())
    seen: asyncio.Queue[Any] = asyncio.Queue()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ssl_object = writer.get_extra_info("ssl_object")
        await seen.put((writer.get_extra_info("peercert"), ssl_object.getpeercert(binary_form=True)))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    yield server.sockets[0].getsockname()[1], seen, files.ca_pem
    server.close()
    await server.wait_closed()


async def _handshake(port: int, server_ca: bytes, tmp_path: Path, ca: tls.CertKey, cn: str) -> bytes | None:
    leaf = tls.new_cert(ca, cn, server=False, client=True)
    cert, key = tmp_path / f"{cn}.crt", tmp_path / f"{cn}.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    context = tls.client_context(server_ca, cert, key)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        data = await reader.read()
        writer.close()
        return data
    except (ssl.SSLError, ConnectionError):
        return None


async def test_cluster_user_certificate_completes_handshake_then_401(
    tls_server: tuple[int, asyncio.Queue[Any], bytes], tmp_path: Path
) -> None:
    port, seen, server_ca = tls_server
    assert await _handshake(port, server_ca, tmp_path, CLUSTER_CA, "front-proxy-client") == b"ok"
    peercert, der = await asyncio.wait_for(seen.get(), 5)
    assert peercert  # verified by TLS (against the wider bundle) ...
    with pytest.raises(errors.ApiError) as err:
        CONFIG.authenticate(peercert, HEADERS, der)  # ... but not a front proxy
    assert err.value.code == 401 and "front-proxy" in err.value.message


async def test_front_proxy_certificate_authenticates(
    tls_server: tuple[int, asyncio.Queue[Any], bytes], tmp_path: Path
) -> None:
    port, seen, server_ca = tls_server
    assert await _handshake(port, server_ca, tmp_path, FRONT_PROXY_CA, "front-proxy-client") == b"ok"
    peercert, der = await asyncio.wait_for(seen.get(), 5)
    user = CONFIG.authenticate(peercert, HEADERS, der)
    assert user.name == "system:admin" and user.groups == ("system:masters",)


async def test_foreign_certificate_is_still_refused_by_tls(
    tls_server: tuple[int, asyncio.Queue[Any], bytes], tmp_path: Path
) -> None:
    port, seen, server_ca = tls_server
    assert await _handshake(port, server_ca, tmp_path, FOREIGN_CA, "front-proxy-client") != b"ok"
    await asyncio.sleep(0.05)
    assert seen.empty()
