"""Front-proxy authentication, with certificates made by shared.tls and real TLS handshakes."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from multidict import CIMultiDict

from shared.api import errors
from shared.api.rest import User
from shared.security import tls
from shared.security.authn import RequestHeaderConfig, common_name

CA = tls.new_ca("front-proxy-ca")
OTHER_CA = tls.new_ca("someone-else")

# The shape ssl.SSLSocket.getpeercert() returns for a verified certificate.
PEERCERT: dict[str, Any] = {
    "subject": ((("organizationName", "system"),), (("commonName", "front-proxy-client"),)),
    "issuer": ((("commonName", "front-proxy-ca"),),),
    "version": 3,
    "serialNumber": "01",
    "notBefore": "Jan  1 00:00:00 2025 GMT",
    "notAfter": "Jan  1 00:00:00 2035 GMT",
}

CONFIG = RequestHeaderConfig.from_configmap_data(
    {
        "requestheader-client-ca-file": CA.cert_pem.decode(),
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
        "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
    }
)


def test_from_configmap_defaults() -> None:
    config = RequestHeaderConfig.from_configmap_data({"requestheader-client-ca-file": "PEM"})
    assert config.client_ca == "PEM"
    assert config.allowed_names == ()
    assert config.username_headers == ("X-Remote-User",)
    assert config.group_headers == ("X-Remote-Group",)
    assert config.extra_headers_prefixes == ("X-Remote-Extra-",)
    custom = RequestHeaderConfig.from_configmap_data(
        {"requestheader-username-headers": '["X-User","X-Other"]', "requestheader-allowed-names": "[]"}
    )
    assert custom.client_ca is None
    assert custom.username_headers == ("X-User", "X-Other")


@pytest.mark.parametrize("bad", ["not json", '{"a": 1}', "[1, 2]"])
def test_from_configmap_rejects_malformed_lists(bad: str) -> None:
    with pytest.raises(ValueError):
        RequestHeaderConfig.from_configmap_data({"requestheader-allowed-names": bad})


def test_common_name() -> None:
    assert common_name(PEERCERT) == "front-proxy-client"
    assert common_name({"subject": ()}) is None


def test_authenticate_full_identity() -> None:
    headers = CIMultiDict(
        [
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "devs"),
            ("x-remote-group", "system:authenticated"),
            ("X-Remote-Extra-Scopes", "a"),
            ("X-Remote-Extra-Scopes", "b"),
            ("X-Remote-Extra-Example.com%2Fteam", "blue"),
            ("Other", "ignored"),
        ]
    )
    user = CONFIG.authenticate(PEERCERT, headers)
    assert user == User(
        name="alice",
        groups=("devs", "system:authenticated"),
        extra={"scopes": ("a", "b"), "example.com/team": ("blue",)},
    )


def test_authenticate_uses_the_first_username_header_present() -> None:
    config = RequestHeaderConfig(client_ca="PEM", username_headers=("X-A", "X-B"))
    assert config.authenticate(PEERCERT, {"X-B": "bob"}).name == "bob"
    assert config.authenticate(PEERCERT, {"X-A": "amy", "X-B": "bob"}).name == "amy"


@pytest.mark.parametrize(
    ("config", "peercert", "headers"),
    [
        (CONFIG, None, {"X-Remote-User": "alice"}),  # no client certificate
        (CONFIG, {}, {"X-Remote-User": "alice"}),  # unverified certificate
        (
            CONFIG,
            {**PEERCERT, "subject": ((("commonName", "mallory"),),)},
            {"X-Remote-User": "alice"},
        ),  # CN not allowed
        (CONFIG, PEERCERT, {}),  # no user name
        (CONFIG, PEERCERT, {"X-Remote-User": "  "}),  # blank user name
        (RequestHeaderConfig(client_ca=None), PEERCERT, {"X-Remote-User": "alice"}),  # not configured
    ],
)
def test_authenticate_rejects(config: RequestHeaderConfig, peercert: Any, headers: dict[str, str]) -> None:
    with pytest.raises(errors.ApiError) as err:
        config.authenticate(peercert, headers)
    assert err.value.code == 401


def test_empty_allowed_names_accepts_any_verified_cn() -> None:
    config = RequestHeaderConfig(client_ca="PEM", allowed_names=())
    peercert = {"subject": ((("commonName", "anyone"),),)}
    assert config.authenticate(peercert, {"X-Remote-User": "alice"}).name == "alice"


# --- real handshakes: what Python actually hands the authenticator -----------------------------


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[int, asyncio.Queue[Any]]]:
    files = tls.write_serving_cert(tmp_path / "serving", ["localhost"], ["127.0.0.1"])
    context = tls.server_context(files.cert_file, files.key_file, CA.cert_pem)
    seen: asyncio.Queue[Any] = asyncio.Queue()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await seen.put(writer.get_extra_info("peercert"))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    (tmp_path / "ca.pem").write_bytes(files.ca_pem)
    yield port, seen
    server.close()
    await server.wait_closed()


def _client_files(tmp_path: Path, ca: tls.CertKey, cn: str) -> tuple[Path, Path]:
    leaf = tls.new_cert(ca, cn, server=False, client=True)
    cert, key = tmp_path / f"{cn}.crt", tmp_path / f"{cn}.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    return cert, key


async def _connect(port: int, context: ssl.SSLContext) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    data = await reader.read()
    writer.close()
    return data


async def test_handshake_with_front_proxy_certificate(
    tls_server: tuple[int, asyncio.Queue[Any]], tmp_path: Path
) -> None:
    port, seen = tls_server
    cert, key = _client_files(tmp_path, CA, "front-proxy-client")
    context = tls.client_context((tmp_path / "ca.pem").read_bytes(), cert, key)
    assert await _connect(port, context) == b"ok"
    peercert = await asyncio.wait_for(seen.get(), 5)
    assert common_name(peercert) == "front-proxy-client"
    assert CONFIG.authenticate(peercert, {"X-Remote-User": "alice"}).name == "alice"


async def test_handshake_without_certificate_gives_none(
    tls_server: tuple[int, asyncio.Queue[Any]], tmp_path: Path
) -> None:
    port, seen = tls_server
    context = tls.client_context((tmp_path / "ca.pem").read_bytes())
    assert await _connect(port, context) == b"ok"
    peercert = await asyncio.wait_for(seen.get(), 5)
    assert peercert is None
    with pytest.raises(errors.ApiError) as err:
        CONFIG.authenticate(peercert, {"X-Remote-User": "alice"})
    assert err.value.code == 401


async def test_handshake_with_foreign_certificate_is_refused(
    tls_server: tuple[int, asyncio.Queue[Any]], tmp_path: Path
) -> None:
    port, seen = tls_server
    cert, key = _client_files(tmp_path, OTHER_CA, "front-proxy-client")
    context = tls.client_context((tmp_path / "ca.pem").read_bytes(), cert, key)
    # With TLS 1.3 the client may only learn of the rejection when it reads; either way the
    # server never gets to handle the connection.
    try:
        answer: bytes | None = await _connect(port, context)
    except (ssl.SSLError, ConnectionError):
        answer = None
    assert answer != b"ok"
    await asyncio.sleep(0.05)
    assert seen.empty()


def test_write_serving_cert_sans_and_key_mode(tmp_path: Path) -> None:
    from cryptography import x509

    files = tls.write_serving_cert(tmp_path, ["localhost", "svc.ns.svc"], ["127.0.0.1"])
    assert files.key_file.stat().st_mode & 0o777 == 0o600
    cert = x509.load_pem_x509_certificate(files.cert_file.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "svc.ns.svc"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert json.loads(json.dumps(files.ca_pem.decode())).startswith("-----BEGIN CERTIFICATE-----")
