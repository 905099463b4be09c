"""EventRecorder against a fake core/v1 events endpoint: body shape, aggregation, best effort."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client as kclient

from shared.client import events as events_module
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
        #: When set, requests wait for it: a kube-apiserver that has not answered yet.
        self.gate: asyncio.Event | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.gate is not None:
            await self.gate.wait()
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


async def test_emit_returns_before_the_write_and_flush_waits_for_it(fake: Fake) -> None:
    events, api = fake
    gate = events.gate = asyncio.Event()
    now = [1_700_000_000.0]
    recorder = EventRecorder(api, "helm-agl", "h", clock=lambda: now[0])
    recorder.emit(APP, "Normal", "Created", "HelmRelease created")
    now[0] += 120  # the write happens later; the Event still tells when the create happened
    await asyncio.sleep(0.05)
    assert events.stored == {}  # the caller went on while kube-apiserver has not answered
    gate.set()
    await recorder.flush()
    (body,) = events.stored.values()
    assert body["reason"] == "Created" and body["firstTimestamp"] == "2023-11-14T22:13:20Z"
    await recorder.stop()


async def test_emit_copies_the_identity_of_the_object(fake: Fake) -> None:
    events, api = fake
    recorder = EventRecorder(api, "helm-agl", "h")
    app = json.loads(json.dumps(APP))
    recorder.emit(app, "Normal", "Created", "ok")
    app["metadata"]["name"] = "changed-after-the-answer"
    await recorder.stop()
    (body,) = events.stored.values()
    assert body["involvedObject"]["name"] == "db" and body["involvedObject"]["uid"] == "u-1"


async def test_stop_flushes_the_queue(fake: Fake) -> None:
    events, api = fake
    recorder = EventRecorder(api, "helm-agl", "h")
    for i in range(20):
        recorder.emit(APP, "Normal", "Created", f"message {i}")
    await recorder.stop()
    assert sorted(b["message"] for b in events.stored.values()) == sorted(f"message {i}" for i in range(20))


async def test_what_cannot_be_written_is_logged(fake: Fake, caplog: pytest.LogCaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    events, api = fake
    events.gate = asyncio.Event()  # never set: kube-apiserver never answers
    monkeypatch.setattr(events_module, "QUEUE_SIZE", 2)
    recorder = EventRecorder(api, "helm-agl", "h")
    for i in range(8):  # 4 writers take one each, 2 wait in the queue, 2 do not fit
        recorder.emit(APP, "Normal", "Created", f"message {i}")
        await asyncio.sleep(0)
    full = [r.getMessage() for r in caplog.records if "event dropped" in r.getMessage()]
    assert len(full) == 2 and all("already waiting" in m for m in full), full
    caplog.clear()
    await recorder.stop(flush_within=0.2)
    at_stop = [r.getMessage() for r in caplog.records if "event dropped" in r.getMessage()]
    # the 2 still queued, and the 4 the writers were sending when they were stopped
    assert len(at_stop) == 6 and all("shutdown" in m for m in at_stop), at_stop
    assert sorted(m.rsplit(": ", 1)[1] for m in at_stop) == [f"message {i}" for i in range(6)]
    recorder.emit(APP, "Normal", "Created", "after stop")
    assert "the recorder is stopped" in caplog.records[-1].getMessage()
    events.gate.set()  # let the fake's handlers end, so its shutdown does not wait for them
