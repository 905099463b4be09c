"""EventRecorder against a fake core/v1 events endpoint: body shape, aggregation, best effort."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as kclient

from shared.client.events import EventRecorder, involved_ref

APP = {
    "apiVersion": "apps.cozystack.io/v1alpha1",
    "kind": "Postgres",
    "metadata": {"name": "db", "namespace": "tenant-a", "uid": "u-1", "resourceVersion": "42", "labels": {}},
    "spec": {},
}


class FakeEvents:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str | None, Any]] = []
        self.fail_with: int | None = None
        self.stored: dict[str, dict[str, Any]] = {}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: dict[str, Any] = json.loads(raw) if raw else {}
        self.requests.append((request.method, request.path, request.headers.get("Content-Type"), body))
        if self.fail_with:
            status = {"kind": "Status", "code": self.fail_with, "reason": "X", "message": "nope"}
            return web.json_response(status, status=self.fail_with)
        if request.method == "POST":
            self.stored[body["metadata"]["name"]] = body
            return web.json_response(body, status=201)
        name = request.path.rsplit("/", 1)[-1]
        if name not in self.stored:
            status = {"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"}
            return web.json_response(status, status=404)
        self.stored[name].update(body)
        return web.json_response(self.stored[name])


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeEvents, kclient.ApiClient]]:
    events = FakeEvents()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", events.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    configuration = kclient.Configuration()
    configuration.host = f"http://127.0.0.1:{runner.addresses[0][1]}"
    api = kclient.ApiClient(configuration=configuration)
    try:
        yield events, api
    finally:
        await api.close()
        await runner.cleanup()


def test_involved_ref() -> None:
    assert involved_ref(APP) == {
        "apiVersion": "apps.cozystack.io/v1alpha1",
        "kind": "Postgres",
        "name": "db",
        "namespace": "tenant-a",
        "uid": "u-1",
        "resourceVersion": "42",
    }
    cluster_scoped = {"apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
                      "metadata": {"name": "postgres", "uid": "u-2"}}
    assert "namespace" not in involved_ref(cluster_scoped)


async def test_event_body_and_aggregation(fake: tuple[FakeEvents, kclient.ApiClient]) -> None:
    events, api = fake
    now = [1_700_000_000.0]
    recorder = EventRecorder(api, "helm-agl", "node-1", clock=lambda: now[0])
    await recorder.record(APP, "Warning", "TranslationFailed", "chart not found")
    method, path, _, body = events.requests[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/tenant-a/events")
    assert body["involvedObject"]["uid"] == "u-1" and body["involvedObject"]["kind"] == "Postgres"
    assert body["type"] == "Warning" and body["reason"] == "TranslationFailed" and body["count"] == 1
    assert body["source"] == {"component": "helm-agl", "host": "node-1"}
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2023-11-14T22:13:20Z"
    assert body["metadata"]["name"].startswith("db.")

    now[0] += 60
    await recorder.record(APP, "Warning", "TranslationFailed", "chart not found")
    method, path, ctype, patch = events.requests[-1]
    assert method == "PATCH" and ctype == "application/merge-patch+json"
    assert path == f"/api/v1/namespaces/tenant-a/events/{body['metadata']['name']}"
    assert patch == {"count": 2, "lastTimestamp": "2023-11-14T22:14:20Z"}

    # another message is another Event; so is the same one after the window
    await recorder.record(APP, "Warning", "TranslationFailed", "other")
    assert events.requests[-1][0] == "POST"
    now[0] += 601
    await recorder.record(APP, "Warning", "TranslationFailed", "chart not found")
    assert events.requests[-1][0] == "POST"
    assert len(events.stored) == 3


Fake = tuple[FakeEvents, kclient.ApiClient]


async def test_cluster_scoped_objects_get_events_in_default(fake: Fake) -> None:
    events, api = fake
    definition = {"apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
                  "metadata": {"name": "postgres", "uid": "u-2"}}
    await EventRecorder(api, "helm-agl", "h").record(definition, "Normal", "Accepted", "ok")
    assert events.requests[-1][1] == "/api/v1/namespaces/default/events"


async def test_expired_event_is_recreated(fake: tuple[FakeEvents, kclient.ApiClient]) -> None:
    events, api = fake
    recorder = EventRecorder(api, "helm-agl", "h")
    await recorder.record(APP, "Normal", "Applied", "ok")
    events.stored.clear()  # kube-apiserver's TTL removed it
    await recorder.record(APP, "Normal", "Applied", "ok")
    assert [r[0] for r in events.requests] == ["POST", "PATCH", "POST"]


async def test_failures_never_raise(fake: tuple[FakeEvents, kclient.ApiClient]) -> None:
    events, api = fake
    events.fail_with = 500
    await EventRecorder(api, "helm-agl", "h").record(APP, "Normal", "Applied", "ok")
    configuration = kclient.Configuration()
    configuration.host = "http://127.0.0.1:1"
    dead = kclient.ApiClient(configuration=configuration)
    try:
        await EventRecorder(dead, "helm-agl", "h").record(APP, "Normal", "Applied", "ok")
        await EventRecorder(dead, "helm-agl", "h").record({"bogus": True}, "Normal", "Applied", "ok")
    finally:
        await dead.close()
