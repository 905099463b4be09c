"""shared.kube / shared.informer / shared.events against the real local kube-apiserver.

Uses the real tofu-controller ``Terraform`` CRD (installed by the session fixture) in a namespace of
its own as the resource -- no service under test writes these objects -- so errors are
kube-apiserver's own: strict field validation, schema violations, optimistic concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import orjson
import pytest
from kubernetes_asyncio import client as kclient
from localcluster.cluster import free_port

from shared.api.errors import ApiError
from shared.client import latency, paging
from shared.client.events import EventRecorder
from shared.client.informer import Informer, Tuning, keeping_spec, without_managed_fields
from shared.client.kube import GVR, ObjectClient, api_client

pytestmark = pytest.mark.integration

TERRAFORMS = GVR("infra.contrib.fluxcd.io", "v1alpha2", "terraforms")
NS = "kube-shared"
SUITE_LABEL = "test.cozystack.io/suite"


def _terraform(name: str, run: str) -> dict[str, Any]:
    return {
        "apiVersion": TERRAFORMS.api_version,
        "kind": "Terraform",
        "metadata": {"name": name, "namespace": NS, "labels": {SUITE_LABEL: f"kube-shared-{run}"}},
        "spec": {"interval": "10m", "path": "./modules/a",
                 "sourceRef": {"kind": "GitRepository", "name": "infra", "namespace": "flux-system"}},
    }


@pytest.fixture
def api(kube_client: kclient.ApiClient, control_plane: Any) -> kclient.ApiClient:
    control_plane.kubectl("create", "namespace", NS, check=False)
    return kube_client


async def _cleanup(oc: ObjectClient, name: str) -> None:
    try:
        await oc.delete(NS, name)
    except ApiError as exc:
        if exc.code != 404:
            raise


async def test_object_client_crud_and_errors(api: kclient.ApiClient, run: str) -> None:
    oc = ObjectClient(api, TERRAFORMS, field_manager="kube-shared-test")
    name = f"kube-shared-{run}"
    body = _terraform(name, run)
    try:
        dry = await oc.create(NS, body, dry_run=True)
        assert dry["metadata"]["name"] == name
        with pytest.raises(ApiError) as info:
            await oc.get(NS, name)
        assert info.value.code == 404 and info.value.reason == "NotFound"

        created = await oc.create(NS, body)
        assert created["metadata"]["uid"]
        with pytest.raises(ApiError) as info:
            await oc.create(NS, body)
        assert info.value.code == 409 and info.value.reason == "AlreadyExists"

        unknown = _terraform(f"{name}-unknown", run)
        unknown["spec"]["bogus"] = True
        with pytest.raises(ApiError) as info:
            await oc.create(NS, unknown)  # fieldValidation=Strict
        assert info.value.code == 400 and "bogus" in info.value.message

        invalid = _terraform(f"{name}-invalid", run)
        invalid["spec"]["sourceRef"]["kind"] = "HelmRepository"
        with pytest.raises(ApiError) as info:
            await oc.create(NS, invalid)
        assert info.value.code == 422 and info.value.reason == "Invalid"
        fields = [c.get("field") for c in info.value.details.get("causes", [])]
        assert "spec.sourceRef.kind" in fields

        page = await oc.list(NS, label_selector=f"{SUITE_LABEL}=kube-shared-{run}")
        assert [i["metadata"]["name"] for i in page["items"]] == [name]
        assert page["metadata"]["resourceVersion"]

        patched = await oc.patch_merge(NS, name, {"metadata": {"labels": {"extra": "yes"}}})
        assert patched["metadata"]["labels"]["extra"] == "yes"
        assert patched["metadata"]["labels"][SUITE_LABEL] == f"kube-shared-{run}"

        stale = dict(created)
        with pytest.raises(ApiError) as info:
            await oc.replace(NS, name, stale)  # carries the pre-patch resourceVersion
        assert info.value.code == 409 and info.value.reason == "Conflict"
        current = await oc.get(NS, name)
        current["spec"]["path"] = "./modules/b"
        replaced = await oc.replace(NS, name, current)
        assert replaced["spec"]["path"] == "./modules/b"

        status = {"status": {"observedGeneration": replaced["metadata"]["generation"]}}
        with_status = await oc.patch_merge(NS, name, status, subresource="status")
        assert with_status["status"]["observedGeneration"] == replaced["metadata"]["generation"]

        events: list[dict[str, Any]] = []
        selector = f"{SUITE_LABEL}=kube-shared-{run}"
        stream = oc.watch(NS, selector, created["metadata"]["resourceVersion"], timeout_seconds=5)
        async for event in stream:
            events.append(event)
            if len(events) == 3:
                break
        await stream.aclose()
        assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "MODIFIED"]

        await oc.delete(NS, name, {"dryRun": ["All"]})
        assert (await oc.get(NS, name))["metadata"]["name"] == name
        await oc.delete(NS, name)
        with pytest.raises(ApiError) as info:
            await oc.get(NS, name)
        assert info.value.code == 404
    finally:
        await _cleanup(oc, name)


async def test_watch_from_too_old_rv_yields_410_error_event(api: kclient.ApiClient) -> None:
    oc = ObjectClient(api, TERRAFORMS)
    async with asyncio.timeout(10):
        events = [e async for e in oc.watch(NS, resource_version="1", timeout_seconds=2)]
    errors = [e for e in events if e["type"] == "ERROR"]
    if errors:  # a fresh cluster may still hold revision 1 in its watch cache
        assert errors[0]["object"]["code"] == 410


async def test_informer_sees_create_update_delete(api: kclient.ApiClient, run: str) -> None:
    oc = ObjectClient(api, TERRAFORMS)
    name = f"kube-shared-inf-{run}"
    informer = Informer(oc, label_selector=f"{SUITE_LABEL}=kube-shared-{run}", tuning=Tuning(watch_timeout=30))
    informer.start()
    try:
        async with asyncio.timeout(10):
            await informer.wait_synced()
        async with informer.subscribe(informer.resource_version) as sub:
            await oc.create(NS, _terraform(name, run))
            await oc.patch_merge(NS, name, {"metadata": {"annotations": {"touched": "1"}}})
            await oc.delete(NS, name)
            seen: list[tuple[str, str]] = []
            async with asyncio.timeout(10):
                async for event in sub:
                    seen.append((event["type"], event["object"]["metadata"]["name"]))
                    if event["type"] == "DELETED":
                        break
        assert seen[0] == ("ADDED", name)
        assert ("MODIFIED", name) in seen
        assert seen[-1] == ("DELETED", name)
        async with informer.subscribe() as current:  # the cache replays nothing: the object is gone
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.5):
                    await anext(current)
    finally:
        await informer.stop()
        await _cleanup(oc, name)


@contextlib.asynccontextmanager
async def _created(oc: ObjectClient, stem: str, count: int, run: str) -> AsyncIterator[tuple[list[str], str]]:
    """``count`` Terraforms of this run, deleted afterwards; yields their names and the run's label selector."""
    names = [f"{stem}-{i}" for i in range(count)]
    for name in names:
        await oc.create(NS, _terraform(name, run))
    try:
        yield names, f"{SUITE_LABEL}=kube-shared-{run}"
    finally:
        for name in names:
            await _cleanup(oc, name)


async def _cached(informer: Informer) -> dict[str, dict[str, Any]]:
    """What ``informer`` holds once synced, by name, decoded; the informer is stopped after."""
    informer.start()
    try:
        async with asyncio.timeout(10):
            await informer.wait_synced()
        answer = await informer.entries("0")
        assert answer is not None
        return {entry.key[1]: informer.unpack(entry.packed) for entry in answer[0]}
    finally:
        await informer.stop()


async def test_a_paged_list_is_kept_page_by_page_and_the_cache_holds_every_object(
        api: kclient.ApiClient, run: str) -> None:
    """``keep`` sees every item once, as its page arrives (7 objects, pages of 3: three pages), with the cyclic
    garbage collector paused while a page is decoded and kept (and running again after); an informer that caches
    through it holds all of them, transformed."""
    oc = ObjectClient(api, TERRAFORMS)
    async with _created(oc, f"kube-shared-page-{run}", 7, run) as (names, selector):
        pages: list[int] = []
        collecting: set[bool] = set()

        def keep(item: dict[str, Any], page: dict[str, Any]) -> str:
            if not pages or pages[-1] != id(page):
                pages.append(id(page))
            assert page["kind"] == "TerraformList"
            collecting.add(gc.isenabled())
            return str(item["metadata"]["name"])

        assert gc.isenabled()
        listing = await oc.list_all(NS, selector, page_size=3, keep=keep)
        assert sorted(listing["items"]) == sorted(names)
        assert len(pages) == 3
        assert collecting == {False} and gc.isenabled()
        informer = Informer(oc, label_selector=selector, transform=without_managed_fields,
                            tuning=Tuning(page_size=3, watch_timeout=30))
        cached = await _cached(informer)
        assert sorted(cached) == sorted(names)
        assert all("managedFields" not in obj["metadata"] and obj["kind"] == "Terraform" for obj in cached.values())


async def test_a_cache_keeps_each_listed_item_undecoded_as_it_would_keep_the_decoded_one(
        api: kclient.ApiClient, run: str) -> None:
    """The informer's list path hands its shape each item with its fields still encoded (``raw_items``); what it
    keeps of kube-apiserver's own pages (Go's escapes, managedFields, a spec of several fields) is what the same
    shape keeps of the decoded objects."""
    oc = ObjectClient(api, TERRAFORMS, field_manager="kube-shared-test")
    async with _created(oc, f"kube-shared-raw-{run}", 5, run) as (names, selector):
        for name in names:
            await oc.patch_merge(NS, name, {"metadata": {"annotations": {"note": f"<{name}> & é"}}})
        seen: list[Any] = []
        await oc.list_all(NS, selector, page_size=2, raw_items=True,
                          keep=lambda item, _page: seen.append(item) or item)
        assert len(seen) == 5 and all(isinstance(v, msgspec.Raw) for item in seen for v in item.values())
        assert all(b"\\u003c" in bytes(item["metadata"]) for item in seen)  # as kube-apiserver escapes it
        shape = keeping_spec(("interval", "path"))
        encoded = Informer(oc, label_selector=selector, transform=shape, tuning=Tuning(page_size=2, watch_timeout=30))
        decoded = Informer(oc, label_selector=selector, transform=lambda obj: shape(obj),
                           tuning=Tuning(page_size=2, watch_timeout=30))
        kept = [await _cached(encoded), await _cached(decoded)]
        assert sorted(kept[0]) == sorted(names)
        assert kept[0] == kept[1]
        whole = await oc.get(NS, names[0])
        assert whole["metadata"]["managedFields"] and len(whole["spec"]) > 2
        one = kept[0][names[0]]
        assert "managedFields" not in one["metadata"] and sorted(one["spec"]) == ["interval", "path"]
        assert one["metadata"]["annotations"]["note"] == f"<{names[0]}> & é"


async def test_the_next_page_is_asked_for_before_this_page_is_decoded(api: kclient.ApiClient, run: str) -> None:
    """kube-apiserver encodes page 2 while the service decodes page 1: the token read from a real page's tail
    is the one its decoded metadata holds, and page 2 was requested before ``keep`` saw page 1's items.  A
    built-in kind's list (ConfigMaps: ``metadata`` before ``items``) never yields a wrong token."""
    oc = ObjectClient(api, TERRAFORMS)
    async with _created(oc, f"kube-shared-ahead-{run}", 5, run) as (names, selector):
        raw = await oc._page(NS, selector, 2, None)
        decoded = orjson.loads(raw)["metadata"]["continue"]
        assert decoded and paging.continue_token(raw) == decoded
        last = await oc._page(NS, selector, 10, None)
        assert paging.continue_token(last) is None
        configmaps = await ObjectClient(api, GVR("", "v1", "configmaps"))._page(None, "", 1, None)
        assert paging.continue_token(configmaps) in (paging.UNKNOWN, orjson.loads(configmaps)["metadata"]["continue"])

        asked: list[str | None] = []
        real_page = oc._page

        async def counted(namespace: str | None, labels: str, limit: int, token: str | None) -> bytes:
            asked.append(token)
            return await real_page(namespace, labels, limit, token)

        oc._page = counted  # type: ignore[method-assign]
        asked_when_kept: list[int] = []
        listing = await oc.list_all(NS, selector, page_size=2,
                                    keep=lambda item, _page: asked_when_kept.append(len(asked)) or item)
        assert sorted(item["metadata"]["name"] for item in listing["items"]) == sorted(names)
        assert len(asked) == 3 and asked_when_kept[:2] == [2, 2] and asked_when_kept[-1] == 3


async def test_event_recorder_writes_and_aggregates(api: kclient.ApiClient, run: str) -> None:
    oc = ObjectClient(api, TERRAFORMS)
    events = ObjectClient(api, GVR("", "v1", "events"))
    name = f"kube-shared-ev-{run}"
    created = await oc.create(NS, _terraform(name, run))
    try:
        recorder = EventRecorder(api, "kube-shared-test", "localhost")
        for _ in range(2):
            await recorder.record(created, "Warning", "TestReason", f"message {run}")
        selector = f"involvedObject.name={name},involvedObject.kind=Terraform"
        found = await events.list(NS, field_selector=selector)
        assert len(found["items"]) == 1
        event = found["items"][0]
        assert event["count"] == 2
        assert event["involvedObject"]["uid"] == created["metadata"]["uid"]
        assert event["reason"] == "TestReason" and event["type"] == "Warning"
        # never raises, even for an object kube-apiserver will not accept an Event about
        await recorder.record({"kind": "X", "metadata": {"name": "Not A Valid Name!"}}, "Normal", "R", "m")
    finally:
        await _cleanup(oc, name)


async def test_every_kube_request_is_told_to_the_observer(api: kclient.ApiClient, control_plane: Any,
                                                          run: str) -> None:
    """Each request on an observed client reaches its observer with kube-apiserver's code and the resource its path
    names, and a request that gets no answer is one too; an unobserved client tells nobody."""
    told: list[tuple[str, str, str, float]] = []
    latency.observe_requests(api, lambda *seen: told.append(seen))
    oc = ObjectClient(api, TERRAFORMS, field_manager="kube-shared-test")
    name = f"kube-observed-{run}"
    try:
        await oc.create(NS, _terraform(name, run))
        with pytest.raises(ApiError):
            await oc.create(NS, _terraform(name, run))
        with pytest.raises(ApiError):
            await oc.get(NS, f"{name}-missing")
        await oc.patch_merge(NS, name, {"status": {"observedGeneration": 1}}, subresource="status")
        stream = oc.watch(NS, f"{SUITE_LABEL}=kube-shared-{run}", "", timeout_seconds=1)
        async for _ in stream:
            pass
        await stream.aclose()
    finally:
        await _cleanup(oc, name)
    assert [(verb, resource, code) for verb, resource, code, _ in told] == [
        ("POST", "terraforms", "201"), ("POST", "terraforms", "409"), ("GET", "terraforms", "404"),
        ("PATCH", "terraforms/status", "200"), ("GET", "terraforms", "200"), ("DELETE", "terraforms", "200")]
    assert all(0 < seconds < 30 for *_, seconds in told), told

    unanswered = await api_client(str(control_plane.kubeconfig))
    try:
        unanswered.configuration.host = f"https://127.0.0.1:{free_port()}"  # nothing listens there
        refused: list[tuple[str, str, str, float]] = []
        latency.observe_requests(unanswered, lambda *seen: refused.append(seen))
        with pytest.raises(ApiError) as info:
            await ObjectClient(unanswered, TERRAFORMS).get(NS, name)
        assert info.value.code == 503
        assert [(verb, resource, code) for verb, resource, code, _ in refused] == [("GET", "terraforms", "<error>")]
    finally:
        await unanswered.close()

    quiet = await api_client(str(control_plane.kubeconfig))
    try:
        with pytest.raises(ApiError):
            await ObjectClient(quiet, TERRAFORMS).get(NS, name)
        assert latency.observer_of(quiet) is None
    finally:
        await quiet.close()
    assert len(told) == 6, told
