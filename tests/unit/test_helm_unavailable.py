"""kube-apiserver unavailable -> 503 with Retry-After, never a hang (SPEC §5).

The real control plane cannot be made unreachable on demand without disturbing everybody using
it, so helm_agl's storage is wired exactly as in the service (ApiServer + ApplicationStorage +
ObjectClient + EventRecorder + Informer) but pointed at fake network targets: a closed port
(connection refused) and a port that accepts connections and never answers (a hung server).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from kubernetes_asyncio import client as kclient

from helm_agl import names
from helm_agl.definition import ApplicationDefinition
from helm_agl.registry import resource_info
from helm_agl.storage import ApplicationStorage
from shared.api.attributes import ResourceAttributes
from shared.api.rest import User
from shared.client.events import EventRecorder
from shared.client.kube import GVR, ObjectClient
from shared.security import authz
from shared.server.apiserver import ApiServer
from tests.kube import FIXTURES

BASE = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/tenant/redises"
#: Every answer must come well within this (the client timeout below is 1 s).
DEADLINE = 5.0


class AllowAll:
    async def authorize(self, user: User, attrs: ResourceAttributes) -> bool:
        return True


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def silent_server() -> tuple[asyncio.Server, int]:
    """Accepts TCP connections and never says anything (not even a TLS handshake)."""
    held: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until the client gives up

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def redis_definition() -> ApplicationDefinition:
    return ApplicationDefinition.from_object(yaml.safe_load((FIXTURES / "definitions" / "redis.yaml").read_text()))


async def make_client(port: int, *, real_authorizer: bool = False) -> AsyncIterator[TestClient[Any, Any]]:
    config = kclient.Configuration(host=f"https://127.0.0.1:{port}")
    config.verify_ssl = False
    api = kclient.ApiClient(configuration=config)
    authorizer = authz.Authorizer(authz.subject_access_review(api), review_timeout=1.0) if real_authorizer \
        else AllowAll()
    defn = redis_definition()
    releases = ObjectClient(api, GVR(*names.HR_GVR), timeout=1.0, field_manager="helm-agl")
    storage = ApplicationStorage(defn, resource_info(defn, names.GROUP), releases,
                                 EventRecorder(api, "helm-agl", "test"))
    storage.start()
    server = ApiServer(authenticator=lambda request: User("alice", ("system:authenticated",)), authorizer=authorizer)
    server.register(storage)
    test_client: TestClient[Any, Any] = TestClient(TestServer(server.app()))
    await test_client.start_server()
    try:
        yield test_client
    finally:
        await test_client.close()
        await storage.stop()
        await api.close()


@pytest.fixture
async def refused() -> AsyncIterator[TestClient[Any, Any]]:
    async for test_client in make_client(closed_port()):
        yield test_client


@pytest.fixture
async def hung() -> AsyncIterator[TestClient[Any, Any]]:
    server, port = await silent_server()
    try:
        async for test_client in make_client(port):
            yield test_client
    finally:
        server.close()


@pytest.fixture(params=["refused", "silent"])
async def unreviewed(request: pytest.FixtureRequest) -> AsyncIterator[TestClient[Any, Any]]:
    """The real SubjectAccessReview authorizer, against an unreachable kube-apiserver."""
    if request.param == "refused":
        async for test_client in make_client(closed_port(), real_authorizer=True):
            yield test_client
        return
    server, port = await silent_server()
    try:
        async for test_client in make_client(port, real_authorizer=True):
            yield test_client
    finally:
        server.close()


def app(name: str = "cache") -> dict[str, Any]:
    return {"apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": "Redis",
            "metadata": {"name": name}, "spec": {"replicas": 2}}


REQUESTS: list[tuple[str, str, Any, str]] = [
    ("GET", f"{BASE}/cache", None, "application/json"),
    ("GET", BASE, None, "application/json"),
    ("GET", f"/apis/{names.GROUP}/{names.VERSION}/redises", None, "application/json"),
    ("GET", f"{BASE}?watch=true", None, "application/json"),
    ("POST", BASE, app(), "application/json"),
    ("PUT", f"{BASE}/cache", app(), "application/json"),
    ("PATCH", f"{BASE}/cache", {"spec": {"replicas": 3}}, "application/merge-patch+json"),
    ("DELETE", f"{BASE}/cache", None, "application/json"),
]


async def expect_503(test_client: TestClient[Any, Any], method: str, path: str, body: Any,
                     content_type: str) -> None:
    started = time.monotonic()
    resp = await asyncio.wait_for(
        test_client.request(method, path, json=body, headers={"Content-Type": content_type}), DEADLINE)
    status = await resp.json()
    elapsed = time.monotonic() - started
    assert resp.status == 503, (method, path, status)
    assert status["kind"] == "Status" and status["reason"] == "ServiceUnavailable", status
    assert int(resp.headers["Retry-After"]) >= 1
    assert status["details"]["retryAfterSeconds"] >= 1
    assert elapsed < DEADLINE, elapsed


@pytest.mark.parametrize(("method", "path", "body", "content_type"), REQUESTS)
async def test_connection_refused_is_503(refused: TestClient[Any, Any], method: str, path: str, body: Any,
                                         content_type: str) -> None:
    await expect_503(refused, method, path, body, content_type)


@pytest.mark.parametrize(("method", "path", "body", "content_type"), REQUESTS)
async def test_silent_server_is_503_not_a_hang(hung: TestClient[Any, Any], method: str, path: str, body: Any,
                                               content_type: str) -> None:
    await expect_503(hung, method, path, body, content_type)


async def test_bad_input_is_still_rejected_first(refused: TestClient[Any, Any]) -> None:
    """Validation needs no kube-apiserver: a bad body is a 4xx even while it is unreachable."""
    bad = app()
    bad["spec"] = {"replicas": "x"}
    resp = await refused.post(BASE, json=bad)
    assert resp.status == 422, await resp.text()


@pytest.mark.parametrize(("method", "path", "body", "content_type"), REQUESTS[:2] + REQUESTS[4:5])
async def test_authorization_check_unreachable_is_503_not_403(
        unreviewed: TestClient[Any, Any], method: str, path: str, body: Any, content_type: str) -> None:
    """Failing closed must not look like a missing permission, and must not hang."""
    await expect_503(unreviewed, method, path, body, content_type)
