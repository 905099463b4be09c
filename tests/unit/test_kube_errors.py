"""ApiException -> ApiError translation, and the 503 for an unreachable or silent kube-apiserver.

The HTTP-level tests run a tiny aiohttp server on 127.0.0.1 that answers like kube-apiserver does,
so the real request path of :class:`shared.client.kube.ObjectClient` is exercised without a cluster.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client as kclient
from kubernetes_asyncio.client.exceptions import ApiException
from multidict import CIMultiDict, CIMultiDictProxy

from shared.api.errors import ApiError, names_other_resource
from shared.client.kube import (
    GVR,
    ObjectClient,
    from_api_exception,
    settle_environment,
    status_error,
    to_api_error,
)

GVR_APPDEF = GVR("cozystack.io", "v1alpha1", "applicationdefinitions")
GVR_HR = GVR("helm.toolkit.fluxcd.io", "v2", "helmreleases")


def _exc(code: int, body: bytes | str, headers: dict[str, str] | None = None) -> ApiException:
    """An ApiException as the client raises it for an HTTP error answer."""
    exc = ApiException(status=code, reason="reason phrase")
    exc.body = body  # type: ignore[assignment]  # call_api leaves a str here, rest.py bytes
    exc.headers = CIMultiDictProxy(CIMultiDict(headers or {}))
    return exc


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return json.dumps(body).encode()


def test_422_keeps_kube_status_and_causes() -> None:
    causes = [{"reason": "FieldValueInvalid", "message": "Invalid value", "field": "spec.interval"}]
    details = {"name": "x", "group": "helm.toolkit.fluxcd.io", "kind": "HelmRelease", "causes": causes}
    message = 'HelmRelease.helm.toolkit.fluxcd.io "x" is invalid: spec.interval'
    body = _status(422, "Invalid", message, details)
    err = from_api_exception(_exc(422, body))
    assert err.code == 422
    assert err.reason == "Invalid"
    assert err.message.startswith('HelmRelease.helm.toolkit.fluxcd.io "x" is invalid')
    assert err.details["causes"] == causes
    assert err.details["kind"] == "HelmRelease"
    status = err.status()
    assert status["code"] == 422 and status["details"]["causes"] == causes


@pytest.mark.parametrize(
    ("code", "reason"),
    [(409, "AlreadyExists"), (409, "Conflict"), (404, "NotFound"), (403, "Forbidden"), (400, "BadRequest")],
)
def test_codes_pass_through(code: int, reason: str) -> None:
    err = from_api_exception(_exc(code, _status(code, reason, "msg")))
    assert (err.code, err.reason, err.message) == (code, reason, "msg")


def test_a_404_about_the_namespace_is_not_about_the_object() -> None:
    missing_namespace = from_api_exception(_exc(404, _status(404, "NotFound", 'namespaces "x" not found',
                                                             {"name": "x", "kind": "namespaces"})))
    missing_object = from_api_exception(_exc(404, _status(404, "NotFound", "not found",
                                                          {"name": "y", "kind": "helmreleases"})))
    bare = from_api_exception(_exc(404, _status(404, "NotFound", "not found")))
    assert names_other_resource(missing_namespace, "helmreleases")
    assert not names_other_resource(missing_object, "helmreleases")
    assert not names_other_resource(bare, "helmreleases")


def test_body_as_str_like_call_api_leaves_it() -> None:
    exc = _exc(409, _status(409, "Conflict", "stale").decode())
    assert from_api_exception(exc).reason == "Conflict"


def test_non_status_body_falls_back_to_http_code() -> None:
    err = from_api_exception(_exc(502, b"<html>bad gateway</html>"))
    assert err.code == 502
    assert "bad gateway" in err.message
    assert (err.reason, status_error(404, b"404 page not found").reason) == ("Unknown", "NotFound")


def test_a_status_without_a_reason_is_relayed_without_one() -> None:
    """kube-apiserver's storage answers some 500s with no reason; a made-up one would not be kube's answer."""
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                       "message": 'resourceVersion: Invalid value: "x"', "metadata": {}}).encode()
    err = status_error(500, body)
    assert (err.code, err.reason, err.message) == (500, "", 'resourceVersion: Invalid value: "x"')


def test_retry_after_from_header_and_details() -> None:
    err = from_api_exception(_exc(429, _status(429, "TooManyRequests", "slow down"), {"Retry-After": "7"}))
    assert err.retry_after == 7 and err.details["retryAfterSeconds"] == 7
    body = _status(503, "ServiceUnavailable", "etcd", {"retryAfterSeconds": 3})
    assert status_error(503, body).retry_after == 3
    assert status_error(504, _status(504, "Timeout", "t")).retry_after == 1


def test_401_of_service_credentials_is_not_the_users_401() -> None:
    err = from_api_exception(_exc(401, _status(401, "Unauthorized", "Unauthorized")))
    assert err.code == 503 and err.retry_after


def test_client_side_exception_is_internal() -> None:
    assert from_api_exception(ApiException(status=0, reason="cannot build request")).code == 500


@pytest.mark.parametrize(
    "exc",
    [
        aiohttp.ClientConnectionError("refused"),
        aiohttp.ServerDisconnectedError(),
        TimeoutError(),
        ConnectionResetError("reset"),
        OSError("no route"),
    ],
)
def test_network_failures_become_503_with_retry_after(exc: BaseException) -> None:
    err = to_api_error(exc)
    assert err.code == 503
    assert err.reason == "ServiceUnavailable"
    assert err.retry_after is not None and err.status()["details"]["retryAfterSeconds"] >= 1


def test_api_error_passes_unchanged() -> None:
    err = ApiError(409, "Conflict", "x")
    assert to_api_error(err) is err


def test_gvr_paths() -> None:
    assert GVR_APPDEF.path(None, "pg") == "/apis/cozystack.io/v1alpha1/applicationdefinitions/pg"
    expected = "/apis/helm.toolkit.fluxcd.io/v2/namespaces/t-a/helmreleases/x/status"
    assert GVR_HR.path("t-a", "x", "status") == expected
    assert GVR("", "v1", "configmaps").path("ns") == "/api/v1/namespaces/ns/configmaps"
    assert GVR("", "v1", "events").api_version == "v1"


# ---------------------------------------------------------------------------- over HTTP

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Fake = tuple[list[dict[str, Any]], str, kclient.ApiClient]


async def _serve(handler: Handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def _api(host: str) -> kclient.ApiClient:
    configuration = kclient.Configuration()
    configuration.host = host
    return kclient.ApiClient(configuration=configuration)


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[list[dict[str, Any]], str, kclient.ApiClient]]:
    """A fake kube-apiserver that records requests; answers depend on the path."""
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "content_type": request.headers.get("Content-Type"),
                "body": json.loads(body) if body else None,
            }
        )
        if request.path.endswith("/conflict"):
            conflict = _status(409, "Conflict", "the object has been modified")
            return web.Response(status=409, body=conflict, content_type="application/json")
        if request.query.get("watch") == "true":
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            added = {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}}
            err = {"type": "ERROR", "object": json.loads(_status(410, "Expired", "too old resource version"))}
            await resp.write((json.dumps(added) + "\n").encode())
            await resp.write(b"\n")
            await resp.write((json.dumps(err) + "\n").encode())
            await resp.write_eof()
            return resp
        obj = {"apiVersion": "v1alpha1", "kind": "ApplicationDefinition", "metadata": {"name": "x"}}
        return web.json_response(obj, status=201 if request.method == "POST" else 200)

    runner, host = await _serve(handler)
    api = _api(host)
    try:
        yield seen, host, api
    finally:
        await api.close()
        await runner.cleanup()


async def test_patch_merge_sends_merge_patch_content_type(recorder: Fake) -> None:
    seen, _, api = recorder
    oc = ObjectClient(api, GVR_APPDEF, field_manager="helm-agl")
    await oc.patch_merge(None, "x", {"metadata": {"labels": {"a": "b"}}}, dry_run=True)
    req = seen[-1]
    assert req["method"] == "PATCH"
    assert req["content_type"] == "application/merge-patch+json"
    assert req["path"] == "/apis/cozystack.io/v1alpha1/applicationdefinitions/x"
    assert req["query"] == {"dryRun": "All", "fieldManager": "helm-agl"}
    assert req["body"] == {"metadata": {"labels": {"a": "b"}}}


async def test_create_and_delete_requests(recorder: Fake) -> None:
    seen, _, api = recorder
    oc = ObjectClient(api, GVR_HR)
    created = await oc.create("t-a", {"metadata": {"name": "x"}})
    assert created["metadata"]["name"] == "x"
    assert seen[-1]["query"] == {"fieldValidation": "Strict"}
    assert seen[-1]["path"] == "/apis/helm.toolkit.fluxcd.io/v2/namespaces/t-a/helmreleases"
    # a dry-run create answers 200, which the generated client would have turned into None
    assert (await oc.create("t-a", {"metadata": {"name": "x"}}, dry_run=True))["metadata"]["name"] == "x"
    await oc.delete("t-a", "x", {"propagationPolicy": "Foreground", "dryRun": ["All"]})
    assert seen[-1]["method"] == "DELETE"
    assert seen[-1]["body"]["propagationPolicy"] == "Foreground"
    assert seen[-1]["body"]["dryRun"] == ["All"]


async def test_http_409_reaches_caller_as_409(recorder: Fake) -> None:
    _, _, api = recorder
    with pytest.raises(ApiError) as info:
        await ObjectClient(api, GVR_APPDEF).replace(None, "conflict", {"metadata": {"name": "conflict"}})
    assert info.value.code == 409 and info.value.reason == "Conflict"
    assert info.value.message == "the object has been modified"


async def test_watch_yields_error_events(recorder: Fake) -> None:
    seen, _, api = recorder
    events = [e async for e in ObjectClient(api, GVR_APPDEF).watch(None, "app=x", "4", timeout_seconds=5)]
    assert [e["type"] for e in events] == ["ADDED", "ERROR"]
    assert events[1]["object"]["code"] == 410
    assert seen[-1]["query"] == {
        "watch": "true",
        "timeoutSeconds": "5",
        "allowWatchBookmarks": "true",
        "labelSelector": "app=x",
        "resourceVersion": "4",
    }


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_unreachable_apiserver_is_503() -> None:
    api = _api(f"http://127.0.0.1:{_closed_port()}")
    try:
        oc = ObjectClient(api, GVR_APPDEF, timeout=2)
        with pytest.raises(ApiError) as info:
            await oc.get(None, "x")
        assert info.value.code == 503 and info.value.retry_after
        with pytest.raises(ApiError) as info:
            async for _ in oc.watch(None):
                pass
        assert info.value.code == 503
    finally:
        await api.close()


async def test_silent_apiserver_times_out_as_503() -> None:
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.Response()

    runner, host = await _serve(handler)
    api = _api(host)
    try:
        oc = ObjectClient(api, GVR_APPDEF, timeout=0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(ApiError) as info:
            await oc.list(None)
        assert info.value.code == 503
        assert loop.time() - started < 5
    finally:
        release.set()
        await api.close()
        await runner.cleanup()


async def test_proxy_comes_from_the_environment_once(recorder: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    """settle_environment resolves kube-apiserver's proxy from the environment when the client is built, so
    aiohttp no longer looks it (and ~/.netrc) up in a thread on every request."""
    seen, proxy, _ = recorder  # the fake kube-apiserver doubles as the proxy
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    api = settle_environment(_api("http://kube.invalid:6443"))
    bypassed = None
    try:
        monkeypatch.delenv("HTTP_PROXY")  # read once: later changes do not matter
        assert (await ObjectClient(api, GVR_APPDEF).get(None, "x"))["metadata"]["name"] == "x"
        assert seen[-1]["path"] == "/apis/cozystack.io/v1alpha1/applicationdefinitions/x"
        assert api.rest_client.pool_manager.trust_env is False
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("NO_PROXY", "kube.invalid")
        bypassed = settle_environment(_api("http://kube.invalid:6443"))
        assert bypassed.rest_client.proxy is None
    finally:
        await api.close()
        if bypassed is not None:
            await bypassed.close()

