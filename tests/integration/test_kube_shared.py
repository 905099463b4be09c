"""shared.kube / shared.informer / shared.events against the real local kube-apiserver.

Uses the cluster-scoped ``ApplicationDefinition`` CRD (installed by the session fixture) as the
resource, so errors are kube-apiserver's own: strict field validation, schema violations,
optimistic concurrency.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as kclient

from shared.errors import ApiError
from shared.events import EventRecorder
from shared.informer import Informer
from shared.kube import GVR, ObjectClient, api_client

pytestmark = pytest.mark.integration

APPDEFS = GVR("cozystack.io", "v1alpha1", "applicationdefinitions")
SUITE_LABEL = "test.cozystack.io/suite"


def _definition(name: str, run: str) -> dict[str, Any]:
    kind = "KubeShared" + run.capitalize()
    return {
        "apiVersion": APPDEFS.api_version,
        "kind": "ApplicationDefinition",
        "metadata": {"name": name, "labels": {SUITE_LABEL: f"kube-shared-{run}"}},
        "spec": {
            "application": {
                "kind": kind,
                "plural": kind.lower() + "s",
                "singular": kind.lower(),
                "openAPISchema": '{"type": "object", "properties": {}}',
            },
            "release": {
                "prefix": "ks-",
                "chartRef": {"kind": "OCIRepository", "name": "kube-shared", "namespace": "cozy-system"},
            },
        },
    }


@pytest.fixture
async def api(control_plane: Any) -> AsyncIterator[kclient.ApiClient]:
    client = await api_client(str(control_plane.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def run() -> str:
    return uuid.uuid4().hex[:8]


async def _cleanup(oc: ObjectClient, name: str) -> None:
    try:
        await oc.delete(None, name)
    except ApiError as exc:
        if exc.code != 404:
            raise


async def test_object_client_crud_and_errors(api: kclient.ApiClient, run: str) -> None:
    oc = ObjectClient(api, APPDEFS, field_manager="kube-shared-test")
    name = f"kube-shared-{run}"
    body = _definition(name, run)
    try:
        dry = await oc.create(None, body, dry_run=True)
        assert dry["metadata"]["name"] == name
        with pytest.raises(ApiError) as info:
            await oc.get(None, name)
        assert info.value.code == 404 and info.value.reason == "NotFound"

        created = await oc.create(None, body)
        assert created["metadata"]["uid"]
        with pytest.raises(ApiError) as info:
            await oc.create(None, body)
        assert info.value.code == 409 and info.value.reason == "AlreadyExists"

        unknown = _definition(f"{name}-unknown", run)
        unknown["spec"]["release"]["bogus"] = True
        with pytest.raises(ApiError) as info:
            await oc.create(None, unknown)  # fieldValidation=Strict
        assert info.value.code == 400 and "bogus" in info.value.message

        invalid = _definition(f"{name}-invalid", run)
        invalid["spec"]["release"]["chartRef"]["kind"] = "GitRepository"
        with pytest.raises(ApiError) as info:
            await oc.create(None, invalid)
        assert info.value.code == 422 and info.value.reason == "Invalid"
        fields = [c.get("field") for c in info.value.details.get("causes", [])]
        assert "spec.release.chartRef.kind" in fields

        page = await oc.list(None, label_selector=f"{SUITE_LABEL}=kube-shared-{run}")
        assert [i["metadata"]["name"] for i in page["items"]] == [name]
        assert page["metadata"]["resourceVersion"]

        patched = await oc.patch_merge(None, name, {"metadata": {"labels": {"extra": "yes"}}})
        assert patched["metadata"]["labels"]["extra"] == "yes"
        assert patched["metadata"]["labels"][SUITE_LABEL] == f"kube-shared-{run}"

        stale = dict(created)
        with pytest.raises(ApiError) as info:
            await oc.replace(None, name, stale)  # carries the pre-patch resourceVersion
        assert info.value.code == 409 and info.value.reason == "Conflict"
        current = await oc.get(None, name)
        current["spec"]["release"]["prefix"] = "ks2-"
        replaced = await oc.replace(None, name, current)
        assert replaced["spec"]["release"]["prefix"] == "ks2-"

        status = {"status": {"observedGeneration": replaced["metadata"]["generation"]}}
        with_status = await oc.patch_merge(None, name, status, subresource="status")
        assert with_status["status"]["observedGeneration"] == replaced["metadata"]["generation"]

        events: list[dict[str, Any]] = []
        selector = f"{SUITE_LABEL}=kube-shared-{run}"
        stream = oc.watch(None, selector, created["metadata"]["resourceVersion"], timeout_seconds=5)
        async for event in stream:
            events.append(event)
            if len(events) == 3:
                break
        await stream.aclose()
        assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "MODIFIED"]

        await oc.delete(None, name, dry_run=True)
        assert (await oc.get(None, name))["metadata"]["name"] == name
        await oc.delete(None, name)
        with pytest.raises(ApiError) as info:
            await oc.get(None, name)
        assert info.value.code == 404
    finally:
        await _cleanup(oc, name)


async def test_watch_from_too_old_rv_yields_410_error_event(api: kclient.ApiClient) -> None:
    oc = ObjectClient(api, APPDEFS)
    async with asyncio.timeout(10):
        events = [e async for e in oc.watch(None, resource_version="1", timeout_seconds=2)]
    errors = [e for e in events if e["type"] == "ERROR"]
    if errors:  # a fresh cluster may still hold revision 1 in its watch cache
        assert errors[0]["object"]["code"] == 410


async def test_informer_sees_create_update_delete(api: kclient.ApiClient, run: str) -> None:
    oc = ObjectClient(api, APPDEFS)
    name = f"kube-shared-inf-{run}"
    informer = Informer(oc, label_selector=f"{SUITE_LABEL}=kube-shared-{run}", watch_timeout=30)
    informer.start()
    try:
        async with asyncio.timeout(10):
            await informer.wait_synced()
        assert informer.list() == []
        async with informer.subscribe(informer.resource_version) as sub:
            await oc.create(None, _definition(name, run))
            await oc.patch_merge(None, name, {"metadata": {"annotations": {"touched": "1"}}})
            await oc.delete(None, name)
            seen: list[tuple[str, str]] = []
            async with asyncio.timeout(10):
                async for event in sub:
                    seen.append((event["type"], event["object"]["metadata"]["name"]))
                    if event["type"] == "DELETED":
                        break
        assert seen[0] == ("ADDED", name)
        assert ("MODIFIED", name) in seen
        assert seen[-1] == ("DELETED", name)
        assert informer.get(None, name) is None
    finally:
        await informer.stop()
        await _cleanup(oc, name)


async def test_event_recorder_writes_and_aggregates(api: kclient.ApiClient, run: str) -> None:
    oc = ObjectClient(api, APPDEFS)
    events = ObjectClient(api, GVR("", "v1", "events"))
    name = f"kube-shared-ev-{run}"
    created = await oc.create(None, _definition(name, run))
    try:
        recorder = EventRecorder(api, "kube-shared-test", "localhost")
        for _ in range(2):
            await recorder.record(created, "Warning", "TestReason", f"message {run}")
        selector = f"involvedObject.name={name},involvedObject.kind=ApplicationDefinition"
        found = await events.list("default", field_selector=selector)
        assert len(found["items"]) == 1
        event = found["items"][0]
        assert event["count"] == 2
        assert event["involvedObject"]["uid"] == created["metadata"]["uid"]
        assert event["reason"] == "TestReason" and event["type"] == "Warning"
        # never raises, even for an object kube-apiserver will not accept an Event about
        await recorder.record({"kind": "X", "metadata": {"name": "Not A Valid Name!"}}, "Normal", "R", "m")
    finally:
        await _cleanup(oc, name)
