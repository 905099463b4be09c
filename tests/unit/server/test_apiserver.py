"""The HTTP layer end to end over plain HTTP, with an in-memory Storage and header authentication."""

from __future__ import annotations

import asyncio
import builtins
import copy
import datetime
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from shared.api import errors, selectors
from shared.api.attributes import Attributes, NonResourceAttributes, ResourceAttributes
from shared.api.rest import Column, ListOptions, RequestContext, ResourceInfo, User, WriteOptions
from shared.bodies import JSON
from shared.server import middleware
from shared.server.apiserver import ApiServer

GROUP, VERSION = "apps.example.io", "v1alpha1"
BASE = f"/apis/{GROUP}/{VERSION}"
INFO = ResourceInfo(
    group=GROUP,
    version=VERSION,
    kind="Thing",
    plural="things",
    singular="thing",
    schema={"type": "object", "properties": {"spec": {"type": "object"}}},
    columns=(Column("NAME"), Column("SIZE", "integer"), Column("AGE", "date")),
    short_names=("th",),
)
TABLE_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def thing(name: str, size: int = 1, namespace: str | None = None, **meta: Any) -> JSON:
    metadata: JSON = {"name": name, **meta}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Thing", "metadata": metadata, "spec": {"size": size}}


class MemoryStorage:
    """A Storage keeping objects in a dict, with kube-like resourceVersions and watch fan-out."""

    def __init__(self, info: ResourceInfo) -> None:
        self.info = info
        self.objects: dict[tuple[str, str], JSON] = {}
        self.rv = 0
        self.watchers: list[asyncio.Queue[JSON]] = []
        self.write_options: list[WriteOptions] = []
        self.list_options: list[ListOptions] = []
        self.list_namespaces: list[str | None] = []
        self.updates: list[JSON] = []
        self.watch_closed = 0
        self.before_update: Callable[[], None] | None = None
        self.before_create: Callable[[], object] | None = None
        self.fail_with: BaseException | None = None
        self.watch_error: errors.ApiError | None = None
        self.delay = 0.0

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _notify(self, kind: str, obj: JSON) -> None:
        for q in self.watchers:
            q.put_nowait({"type": kind, "object": copy.deepcopy(obj)})

    async def _maybe_fail(self) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_with is not None:
            raise self.fail_with

    async def get(self, ctx: RequestContext, namespace: str, name: str, resource_version: str | None = None) -> JSON:
        await self._maybe_fail()
        obj = self.objects.get((namespace, name))
        if obj is None:
            raise errors.not_found(GROUP, "things", name)
        return copy.deepcopy(obj)

    async def stored(self, ctx: RequestContext, namespace: str, name: str) -> JSON:
        return await self.get(ctx, namespace, name)

    async def list(self, ctx: RequestContext, namespace: str | None, options: ListOptions) -> JSON:
        await self._maybe_fail()
        self.list_options.append(options)
        self.list_namespaces.append(namespace)
        reqs = selectors.parse_label_selector(options.label_selector)
        items = [
            copy.deepcopy(o)
            for (ns, _), o in sorted(self.objects.items())
            if (namespace is None or ns == namespace)
            and selectors.matches(reqs, o["metadata"].get("labels"))
            and selectors.field_matches(options.field_selector, o)
        ]
        start = int(options.continue_token or 0)
        cont = ""
        if options.limit:
            if len(items) > start + options.limit:
                cont = str(start + options.limit)
            items = items[start : start + options.limit]
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ThingList",
            "metadata": {"resourceVersion": str(self.rv), "continue": cont},
            "items": items,
        }

    async def watch(self, ctx: RequestContext, namespace: str | None, options: ListOptions) -> AsyncIterator[JSON]:
        if self.watch_error is not None:
            raise self.watch_error
        queue: asyncio.Queue[JSON] = asyncio.Queue()
        self.watchers.append(queue)
        self.list_options.append(options)
        try:
            if options.resource_version == "0":
                for (ns, _), obj in sorted(self.objects.items()):
                    if (namespace is None or ns == namespace) and selectors.field_matches(options.field_selector, obj):
                        yield {"type": "ADDED", "object": copy.deepcopy(obj)}
            while True:
                event = await queue.get()
                meta = event["object"].get("metadata", {})
                if namespace is not None and meta.get("namespace") != namespace:
                    continue
                if not selectors.field_matches(options.field_selector, event["object"]):
                    continue
                yield event
                if event["type"] == "ERROR":
                    return
        finally:
            self.watchers.remove(queue)
            self.watch_closed += 1

    async def create(self, ctx: RequestContext, namespace: str, obj: JSON, options: WriteOptions) -> JSON:
        await self._maybe_fail()
        self.write_options.append(options)
        if self.before_create is not None:
            hook, self.before_create = self.before_create, None
            hook()
        name = obj["metadata"].get("name")
        if not name:
            raise errors.invalid(GROUP, "Thing", "", [errors.field_cause("metadata.name", "Required value")])
        if (namespace, name) in self.objects:
            raise errors.already_exists(GROUP, "things", name)
        out = copy.deepcopy(obj)
        out["metadata"].update(
            uid=str(uuid.uuid4()),
            creationTimestamp=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        if options.dry_run:
            return out
        out["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[(namespace, name)] = out
        self._notify("ADDED", out)
        return copy.deepcopy(out)

    async def update(self, ctx: RequestContext, namespace: str, name: str, obj: JSON, options: WriteOptions) -> JSON:
        await self._maybe_fail()
        if self.before_update is not None:
            hook, self.before_update = self.before_update, None
            hook()
        self.write_options.append(options)
        self.updates.append(copy.deepcopy(obj))
        current = self.objects.get((namespace, name))
        if current is None:
            raise errors.not_found(GROUP, "things", name)
        rv = obj["metadata"].get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise errors.conflict(GROUP, "things", name, "the object has been modified")
        out = copy.deepcopy(obj)
        out["metadata"]["uid"] = current["metadata"]["uid"]
        out["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"]
        if options.dry_run:
            return out
        out["metadata"]["resourceVersion"] = self._next_rv()
        self.objects[(namespace, name)] = out
        self._notify("MODIFIED", out)
        return copy.deepcopy(out)

    async def delete(self, ctx: RequestContext, namespace: str, name: str, options: WriteOptions, *,
                     collection: bool = False) -> JSON:
        await self._maybe_fail()
        self.write_options.append(options)
        current = self.objects.get((namespace, name))
        if current is None:
            raise errors.not_found(GROUP, "things", name)
        if not options.dry_run:
            del self.objects[(namespace, name)]
            self._notify("DELETED", current)
        return copy.deepcopy(current)

    def table_cells(self, obj: JSON) -> builtins.list[Any]:
        return [None, obj.get("spec", {}).get("size"), None]

    # test helpers
    def seed(self, namespace: str, obj: JSON) -> JSON:
        stored = copy.deepcopy(obj)
        stored["metadata"].update(
            namespace=namespace,
            resourceVersion=self._next_rv(),
            uid=str(uuid.uuid4()),
            creationTimestamp="2025-01-01T00:00:00Z",
        )
        self.objects[(namespace, stored["metadata"]["name"])] = stored
        return stored

    def touch(self, namespace: str, name: str) -> None:
        """A concurrent writer: bump the object's resourceVersion."""
        self.objects[(namespace, name)]["metadata"]["resourceVersion"] = self._next_rv()


class RecordingAuthorizer:
    def __init__(self) -> None:
        self.asked: list[Attributes] = []
        self.denied_users = {"mallory"}

    async def authorize(self, user: User, attrs: Attributes) -> bool:
        self.asked.append(attrs)
        return user.name not in self.denied_users


def header_authenticator(request: web.Request) -> User:
    name = request.headers.get("X-User")
    if not name:
        raise errors.unauthorized()
    return User(name, tuple(request.headers.getall("X-Group", [])))


@dataclass
class Env:
    server: ApiServer
    storage: MemoryStorage
    authz: RecordingAuthorizer
    client: TestClient[web.Request, web.Application]
    ready: dict[str, bool] = field(default_factory=lambda: {"ok": True})

    async def call(self, method: str, path: str, *, user: str | None = "alice", **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}) or {})
        if user is not None:
            headers["X-User"] = user
        return await self.client.request(method, path, headers=headers, **kw)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    storage = MemoryStorage(INFO)
    authz = RecordingAuthorizer()
    ready = {"ok": True}
    server = ApiServer(authenticator=header_authenticator, authorizer=authz, readiness=lambda: ready["ok"])
    server.register(storage)
    client: TestClient[web.Request, web.Application] = TestClient(TestServer(server.app()))
    await client.start_server()
    try:
        yield Env(server, storage, authz, client, ready)
    finally:
        await client.close()


async def status_of(resp: Any, code: int, reason: str | None = None) -> JSON:
    """Assert the response is a Status with ``code`` (and ``reason``), and return it."""
    assert resp.status == code, await resp.text()
    assert resp.headers["Content-Type"] == "application/json"
    body: JSON = await resp.json()
    assert body["kind"] == "Status"
    assert body["code"] == code
    assert body["status"] == "Failure"
    if reason is not None:
        assert body["reason"] == reason
    return body


# --- unauthenticated endpoints ------------------------------------------------------------------


async def test_health_endpoints_need_no_auth(env: Env) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        resp = await env.call("GET", path, user=None)
        assert resp.status == 200
        assert await resp.text() == "ok"
    env.ready["ok"] = False
    resp = await env.call("GET", "/readyz", user=None)
    assert resp.status == 503


async def test_metrics_count_requests(env: Env) -> None:
    await env.call("GET", f"{BASE}/namespaces/ns/things")
    resp = await env.call("GET", "/metrics")
    assert resp.status == 200
    text = await resp.text()
    assert 'apiserver_request_total{code="200",group="apps.example.io",resource="things",verb="list"} 1.0' in text
    assert "apiserver_request_duration_seconds_bucket" in text


@pytest.mark.parametrize("path", ["/metrics", "/openapi/v2", "/openapi/v3", f"/openapi/v3/apis/{GROUP}/{VERSION}"])
async def test_non_resource_paths_are_authorized_by_path(env: Env, path: str) -> None:
    await status_of(await env.call("GET", path, user=None), 401, "Unauthorized")
    body = await status_of(await env.call("GET", path, user="mallory"), 403, "Forbidden")
    assert body["message"] == f'forbidden: User "mallory" cannot get path "{path}"'
    assert body["details"] == {}  # as kube-apiserver writes it for a path
    assert env.authz.asked[-1] == NonResourceAttributes(path=path, verb="get")
    assert (await env.call("GET", path)).status == 200


# --- discovery and OpenAPI ----------------------------------------------------------------------


async def test_discovery_requires_authentication(env: Env) -> None:
    for path in ("/apis", f"/apis/{GROUP}", BASE, "/openapi/v2", "/openapi/v3"):
        await status_of(await env.call("GET", path, user=None), 401, "Unauthorized")


async def test_discovery_documents(env: Env) -> None:
    groups = await (await env.call("GET", "/apis")).json()
    assert groups["kind"] == "APIGroupList"
    assert [g["name"] for g in groups["groups"]] == [GROUP]
    group = await (await env.call("GET", f"/apis/{GROUP}")).json()
    assert group["kind"] == "APIGroup"
    assert group["preferredVersion"] == {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}
    resources = await (await env.call("GET", BASE)).json()
    assert resources["kind"] == "APIResourceList"
    assert resources["resources"][0]["name"] == "things"
    assert resources["resources"][0]["shortNames"] == ["th"]
    await status_of(await env.call("GET", "/apis/other.io"), 404, "NotFound")
    await status_of(await env.call("GET", f"/apis/{GROUP}/v9"), 404, "NotFound")
    await status_of(await env.call("POST", "/apis", json={}), 405, "MethodNotAllowed")


async def test_unregister_and_register_are_live(env: Env) -> None:
    assert env.server.unregister(GROUP, VERSION, "things")
    assert not env.server.unregister(GROUP, VERSION, "things")
    assert (await (await env.call("GET", "/apis")).json())["groups"] == []
    await status_of(await env.call("GET", BASE), 404)
    await status_of(await env.call("GET", f"{BASE}/namespaces/ns/things"), 404, "NotFound")
    env.server.serve_group_version(GROUP, VERSION)
    resources = await (await env.call("GET", BASE)).json()
    assert resources["resources"] == []
    env.server.register(env.storage)
    assert (await env.call("GET", f"{BASE}/namespaces/ns/things")).status == 200
    index = await (await env.call("GET", "/openapi/v3")).json()
    url = index["paths"][f"apis/{GROUP}/{VERSION}"]["serverRelativeURL"]
    doc = await (await env.call("GET", url)).json()
    assert "io.example.apps.v1alpha1.Thing" in doc["components"]["schemas"]


async def test_openapi_endpoints(env: Env) -> None:
    resp = await env.call("GET", "/openapi/v2")
    assert resp.status == 200
    v2 = await resp.json()
    assert "io.example.apps.v1alpha1.Thing" in v2["definitions"]
    etag = resp.headers["ETag"]
    again = await env.call("GET", "/openapi/v2", headers={"If-None-Match": etag})
    assert again.status == 304
    index = await (await env.call("GET", "/openapi/v3")).json()
    url = index["paths"][f"apis/{GROUP}/{VERSION}"]["serverRelativeURL"]
    doc = await (await env.call("GET", url)).json()
    assert f"{BASE}/namespaces/{{namespace}}/things/{{name}}" in doc["paths"]
    await status_of(await env.call("GET", "/openapi/v3/apis/other.io/v1"), 404)


# --- routing, authentication, authorization ------------------------------------------------------


async def test_resource_requests_authenticate_then_authorize(env: Env) -> None:
    await status_of(await env.call("GET", f"{BASE}/namespaces/ns/things", user=None), 401)
    body = await status_of(await env.call("GET", f"{BASE}/namespaces/ns/things/a", user="mallory"), 403, "Forbidden")
    assert body["message"] == (
        f'things.{GROUP} "a" is forbidden: User "mallory" cannot get resource "things" in API group '
        f'"{GROUP}" in the namespace "ns"'
    )
    # authorization comes before the 404 for an unknown resource, as in kube-apiserver
    await status_of(await env.call("GET", f"{BASE}/namespaces/ns/nothings", user="mallory"), 403)
    await status_of(await env.call("GET", f"{BASE}/namespaces/ns/nothings"), 404, "NotFound")


async def test_query_and_content_type_are_checked_only_once_authorized(env: Env) -> None:
    """kube's order: a denied user learns nothing from validation; an allowed one gets the 400/415/422."""
    env.storage.seed("ns", thing("a"))
    merge = {"Content-Type": "application/merge-patch+json"}
    bad: builtins.list[tuple[str, str, dict[str, Any], int]] = [
        ("GET", "things?labelSelector=a%20in", {}, 400),
        ("GET", "things/a", {"headers": {"Accept": "application/xml"}}, 406),
        ("GET", "things?watch=1&limit=abc", {}, 400),
        ("POST", "things?dryRun=Some", {"json": thing("b")}, 422),
        ("POST", "things", {"data": "x", "headers": {"Content-Type": "text/plain"}}, 415),
        ("PATCH", "things/a?force=true", {"data": "{}", "headers": merge}, 422),
    ]
    for method, path, kw, code in bad:
        url = f"{BASE}/namespaces/ns/{path}"
        await status_of(await env.call(method, url, user="mallory", **kw), 403)
        await status_of(await env.call(method, url.replace("things", "nothings"), **kw), 404)
        await status_of(await env.call(method, url, **kw), code)
    assert env.storage.objects.keys() == {("ns", "a")}


async def test_verb_mapping(env: Env) -> None:
    env.storage.seed("ns", thing("a"))
    requests: builtins.list[tuple[str, str, dict[str, Any], str]] = [
        ("GET", f"{BASE}/namespaces/ns/things", {}, "list"),
        ("GET", f"{BASE}/things", {}, "list"),
        ("GET", f"{BASE}/namespaces/ns/things/a", {}, "get"),
        ("POST", f"{BASE}/namespaces/ns/things", {"json": thing("b")}, "create"),
        ("PUT", f"{BASE}/namespaces/ns/things/b", {"json": thing("b", 2)}, "update"),
        (
            "PATCH",
            f"{BASE}/namespaces/ns/things/b",
            {"data": "{}", "headers": {"Content-Type": "application/merge-patch+json"}},
            "patch",
        ),
        ("DELETE", f"{BASE}/namespaces/ns/things/b", {}, "delete"),
        ("DELETE", f"{BASE}/namespaces/ns/things", {}, "deletecollection"),
    ]
    for method, path, kw, verb in requests:
        env.authz.asked.clear()
        await env.call(method, path, **kw)
        assert [a.verb for a in env.authz.asked] == [verb], (method, path)
    env.authz.asked.clear()
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things?watch=true&timeoutSeconds=1")
    await resp.read()
    assert env.authz.asked == [ResourceAttributes("watch", GROUP, VERSION, "things", "ns", None)]
    env.authz.asked.clear()
    await env.call("GET", f"{BASE}/namespaces/ns/things/a")
    assert env.authz.asked == [ResourceAttributes("get", GROUP, VERSION, "things", "ns", "a")]


async def test_unsupported_routes(env: Env) -> None:
    await status_of(await env.call("DELETE", f"{BASE}/things"), 405, "MethodNotAllowed")
    await status_of(await env.call("POST", f"{BASE}/things", json=thing("x")), 405, "MethodNotAllowed")
    await status_of(await env.call("POST", f"{BASE}/namespaces/ns/things/a", json={}), 405)
    await status_of(await env.call("PUT", f"{BASE}/namespaces/ns/things", json={}), 405)
    await status_of(await env.call("GET", f"{BASE}/namespaces/ns/things/a/status"), 404)
    await status_of(await env.call("GET", f"{BASE}/things/a"), 404)
    await status_of(await env.call("GET", "/api/v1/pods"), 404, "NotFound")
    await status_of(await env.call("GET", f"{BASE}/namespaces//things"), 404)


# --- reads ---------------------------------------------------------------------------------------


async def test_get_and_not_found(env: Env) -> None:
    env.storage.seed("ns", thing("a", 3))
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things/a")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/json"
    assert (await resp.json())["spec"] == {"size": 3}
    body = await status_of(await env.call("GET", f"{BASE}/namespaces/ns/things/zz"), 404, "NotFound")
    assert body["details"] == {"group": GROUP, "kind": "things", "name": "zz"}


async def test_list_options_are_parsed_and_passed(env: Env) -> None:
    resp = await env.call(
        "GET",
        f"{BASE}/namespaces/ns/things",
        params={
            "labelSelector": "b in (y, x),a==1",
            "fieldSelector": "metadata.name!=c",
            "limit": "5",
            "continue": "3",
            "resourceVersion": "7",
            "timeoutSeconds": "30",
            "allowWatchBookmarks": "true",
        },
    )
    assert resp.status == 200
    assert env.storage.list_options[-1] == ListOptions(
        label_selector="a=1,b in (x,y)",
        field_selector=(("metadata.name", "!=", "c"),),
        limit=5,
        continue_token="3",
        resource_version="7",
        timeout_seconds=30,
        allow_bookmarks=True,
    )
    await env.call("GET", f"{BASE}/things")
    assert env.storage.list_namespaces[-1] is None


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("labelSelector=a%3D%3D%3Db", "unable to parse requirement"),
        ("fieldSelector=spec.size%3D1", "field label not supported: spec.size"),
        ("limit=ten", 'parsing "ten": invalid syntax'),
        ("timeoutSeconds=x", 'parsing "x": invalid syntax'),
        ("includeObject=All", "includeObject"),
    ],
)
async def test_bad_list_queries_are_400(env: Env, query: str, message: str) -> None:
    body = await status_of(await env.call("GET", f"{BASE}/namespaces/ns/things?{query}"), 400, "BadRequest")
    assert message in body["message"]
    assert env.storage.list_options == []


async def test_list_filters_and_pages(env: Env) -> None:
    env.storage.seed("ns", thing("a", labels={"tier": "web"}))
    env.storage.seed("ns", thing("b", labels={"tier": "db"}))
    env.storage.seed("other", thing("c", labels={"tier": "web"}))
    lst = await (await env.call("GET", f"{BASE}/namespaces/ns/things?labelSelector=tier%3Dweb")).json()
    assert [i["metadata"]["name"] for i in lst["items"]] == ["a"]
    everywhere = await (await env.call("GET", f"{BASE}/things?labelSelector=tier%3Dweb")).json()
    assert [i["metadata"]["name"] for i in everywhere["items"]] == ["a", "c"]
    page = await (await env.call("GET", f"{BASE}/things?limit=2")).json()
    assert page["metadata"]["continue"] == "2"
    rest = await (await env.call("GET", f"{BASE}/things?limit=2&continue=2")).json()
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c"]


async def test_table_negotiation(env: Env) -> None:
    env.storage.seed("ns", thing("a", 3))
    env.storage.seed("ns", thing("b", 4))
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things?limit=1", headers={"Accept": TABLE_ACCEPT})
    assert resp.headers["Content-Type"] == "application/json"
    t = await resp.json()
    assert t["kind"] == "Table"
    assert t["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in t["columnDefinitions"]] == ["NAME", "SIZE", "AGE"]
    assert t["rows"][0]["cells"][:2] == ["a", 3]
    assert t["rows"][0]["cells"][2].endswith("d")  # created 2025-01-01: days or years old
    assert t["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert t["metadata"]["continue"] == "1"
    assert t["metadata"]["resourceVersion"] == str(env.storage.rv)
    one = await (
        await env.call("GET", f"{BASE}/namespaces/ns/things/b?includeObject=Object", headers={"Accept": TABLE_ACCEPT})
    ).json()
    assert one["kind"] == "Table"
    assert one["rows"][0]["object"]["spec"] == {"size": 4}
    plain = await (await env.call("GET", f"{BASE}/namespaces/ns/things/b", headers={"Accept": "*/*"})).json()
    assert plain["kind"] == "Thing"
    partial = await (
        await env.call(
            "GET",
            f"{BASE}/namespaces/ns/things",
            headers={"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"},
        )
    ).json()
    assert partial["kind"] == "PartialObjectMetadataList"
    await status_of(
        await env.call(
            "GET", f"{BASE}/namespaces/ns/things", headers={"Accept": "application/vnd.kubernetes.protobuf"}
        ),
        406,
        "NotAcceptable",
    )


# --- writes --------------------------------------------------------------------------------------


async def test_create(env: Env) -> None:
    resp = await env.call("POST", f"{BASE}/namespaces/ns/things?fieldManager=kubectl-create", json=thing("a", 2))
    assert resp.status == 201
    created = await resp.json()
    assert created["metadata"]["namespace"] == "ns"  # filled from the URL
    assert env.storage.objects[("ns", "a")]["spec"] == {"size": 2}
    assert env.storage.write_options[-1] == WriteOptions(dry_run=False, field_manager="kubectl-create",
                                                                manager="kubectl-create")


async def test_create_from_yaml(env: Env) -> None:
    body = f"apiVersion: {GROUP}/{VERSION}\nkind: Thing\nmetadata:\n  name: y\n  namespace: ns\n"
    body += "spec:\n  size: 5\n"
    resp = await env.call(
        "POST", f"{BASE}/namespaces/ns/things", data=body, headers={"Content-Type": "application/yaml"}
    )
    assert resp.status == 201
    assert env.storage.objects[("ns", "y")]["spec"] == {"size": 5}


async def test_dry_run_passes_through(env: Env) -> None:
    resp = await env.call("POST", f"{BASE}/namespaces/ns/things?dryRun=All", json=thing("a"))
    assert resp.status == 201
    assert env.storage.write_options[-1].dry_run is True
    assert env.storage.objects == {}
    body = await status_of(
        await env.call("POST", f"{BASE}/namespaces/ns/things?dryRun=Some", json=thing("a")), 422, "Invalid"
    )
    assert "dryRun" in body["message"]
    assert env.storage.objects == {}


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"{not json", "application/json", "the object provided is unrecognized (must be of type Thing): couldn't "
         "get version/kind; json parse error: invalid character 'n' looking for beginning of object key string "
         "({not json)"),
        (b"a: [x", "application/yaml", "not valid YAML"),
        (b"[1, 2]", "application/json", "json: cannot unmarshal array into Go value of type struct { APIVersion "
         "string"),
        (b"null", "application/json", "must be a JSON or YAML object"),
        (json.dumps({**thing("a"), "apiVersion": "other.io/v1"}).encode(), "application/json", "API version"),
        (json.dumps({k: v for k, v in thing("a").items() if k != "kind"}).encode(), "application/json",
         "Object 'Kind' is missing"),
        (
            json.dumps(thing("a", namespace="elsewhere")).encode(),
            "application/json",
            "namespace of the provided",
        ),
        (
            json.dumps({**thing("a"), "metadata": "x"}).encode(),
            "application/json",
            "metadata must be an object",
        ),
    ],
)
async def test_create_rejects_bad_bodies(env: Env, body: bytes, content_type: str, message: str) -> None:
    resp = await env.call("POST", f"{BASE}/namespaces/ns/things", data=body, headers={"Content-Type": content_type})
    got = await status_of(resp, 400, "BadRequest")
    assert message in got["message"]
    assert env.storage.objects == {}
    assert env.storage.write_options == []


async def test_create_of_another_kind_is_invalid(env: Env) -> None:
    """As for a custom resource: the body decodes, and validation refuses the kind (422 naming it)."""
    resp = await env.call("POST", f"{BASE}/namespaces/ns/things", json={**thing("a"), "kind": "Other"})
    got = await status_of(resp, 422, "Invalid")
    assert got["details"]["kind"] == "Other"
    assert [(c["reason"], c["field"]) for c in got["details"]["causes"]] == [("FieldValueInvalid", "kind")]
    assert env.storage.objects == {}


async def test_unsupported_content_type_is_415(env: Env) -> None:
    for content_type in (
        "application/vnd.kubernetes.protobuf",
        "text/plain",
        "application/x-www-form-urlencoded",
    ):
        resp = await env.call(
            "POST", f"{BASE}/namespaces/ns/things", data=b"{}", headers={"Content-Type": content_type}
        )
        await status_of(resp, 415, "UnsupportedMediaType")
    assert env.storage.objects == {}


async def test_body_over_3_mib_is_413(env: Env) -> None:
    big = thing("a")
    big["spec"]["blob"] = "x" * (3 * 1024 * 1024)
    resp = await env.call("POST", f"{BASE}/namespaces/ns/things", json=big)
    await status_of(resp, 413, "RequestEntityTooLarge")
    assert env.storage.objects == {}
    # just under the limit is fine
    ok = thing("b")
    ok["spec"]["blob"] = "x" * (3 * 1024 * 1024 - 200)
    assert (await env.call("POST", f"{BASE}/namespaces/ns/things", json=ok)).status == 201


async def test_update(env: Env) -> None:
    stored = env.storage.seed("ns", thing("a"))
    new = copy.deepcopy(stored)
    new["spec"]["size"] = 9
    resp = await env.call("PUT", f"{BASE}/namespaces/ns/things/a", json=new)
    assert resp.status == 200
    assert (await resp.json())["spec"]["size"] == 9
    # stale resourceVersion: the storage's 409 reaches the client
    await status_of(await env.call("PUT", f"{BASE}/namespaces/ns/things/a", json=new), 409, "Conflict")
    body = await status_of(await env.call("PUT", f"{BASE}/namespaces/ns/things/b", json=new), 400, "BadRequest")
    assert body["message"] == "the name of the object (a) does not match the name on the URL (b)"


async def test_delete(env: Env) -> None:
    env.storage.seed("ns", thing("a"))
    resp = await env.call("DELETE", f"{BASE}/namespaces/ns/things/a", json={"dryRun": ["All"]})
    assert resp.status == 200
    assert env.storage.write_options[-1].dry_run is True
    assert ("ns", "a") in env.storage.objects
    precondition = {"preconditions": {"resourceVersion": "999"}}
    await status_of(await env.call("DELETE", f"{BASE}/namespaces/ns/things/a", json=precondition), 409, "Conflict")
    assert ("ns", "a") in env.storage.objects
    resp = await env.call("DELETE", f"{BASE}/namespaces/ns/things/a")
    assert resp.status == 200
    assert ("ns", "a") not in env.storage.objects
    await status_of(await env.call("DELETE", f"{BASE}/namespaces/ns/things/a"), 404)


# --- patch ---------------------------------------------------------------------------------------


def patch_call(env: Env, name: str, body: Any, content_type: str, query: str = "") -> Any:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return env.call(
        "PATCH",
        f"{BASE}/namespaces/ns/things/{name}{query}",
        data=data,
        headers={"Content-Type": content_type},
    )


async def test_merge_patch_updates_with_the_version_read(env: Env) -> None:
    stored = env.storage.seed("ns", thing("a", 1, labels={"x": "1"}))
    resp = await patch_call(
        env,
        "a",
        {"metadata": {"labels": {"y": "2"}}, "spec": {"extra": True}},
        "application/merge-patch+json",
    )
    assert resp.status == 200
    result = await resp.json()
    assert result["metadata"]["labels"] == {"x": "1", "y": "2"}
    assert result["spec"] == {"size": 1, "extra": True}
    assert env.storage.updates[-1]["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


async def test_merge_patch_retries_after_a_concurrent_write(env: Env) -> None:
    env.storage.seed("ns", thing("a"))
    env.storage.before_update = lambda: env.storage.touch("ns", "a")
    resp = await patch_call(env, "a", {"spec": {"size": 7}}, "application/merge-patch+json")
    assert resp.status == 200
    assert len(env.storage.updates) == 2  # one conflict, then success on a fresh read
    assert env.storage.objects[("ns", "a")]["spec"]["size"] == 7


async def test_patch_with_stale_pinned_version_conflicts(env: Env) -> None:
    env.storage.seed("ns", thing("a"))
    env.storage.touch("ns", "a")
    resp = await patch_call(
        env, "a", {"metadata": {"resourceVersion": "1"}, "spec": {"size": 7}}, "application/merge-patch+json"
    )
    await status_of(resp, 409, "Conflict")
    assert len(env.storage.updates) == 1
    assert env.storage.objects[("ns", "a")]["spec"]["size"] == 1


async def test_json_patch(env: Env) -> None:
    env.storage.seed("ns", thing("a", 1))
    ops = [{"op": "replace", "path": "/spec/size", "value": 4}]
    resp = await patch_call(env, "a", ops, "application/json-patch+json")
    assert resp.status == 200
    assert env.storage.objects[("ns", "a")]["spec"]["size"] == 4
    failing = [{"op": "test", "path": "/spec/size", "value": 99}]
    await status_of(await patch_call(env, "a", failing, "application/json-patch+json"), 422, "Invalid")
    await status_of(await patch_call(env, "a", {"op": "x"}, "application/json-patch+json"), 400)
    assert env.storage.objects[("ns", "a")]["spec"]["size"] == 4


async def test_patch_errors(env: Env) -> None:
    env.storage.seed("ns", thing("a", 1))
    await status_of(await patch_call(env, "a", {}, "application/strategic-merge-patch+json"), 415)
    await status_of(await patch_call(env, "zz", {}, "application/merge-patch+json"), 404, "NotFound")
    await status_of(await patch_call(env, "a", b"{oops", "application/merge-patch+json"), 400)
    renamed = await patch_call(env, "a", {"metadata": {"name": "b"}}, "application/merge-patch+json")
    await status_of(renamed, 400, "BadRequest")
    rekinded = await patch_call(env, "a", {"kind": "Other"}, "application/merge-patch+json")
    await status_of(rekinded, 422, "Invalid")  # as kube-apiserver answers for a custom resource
    force = await patch_call(env, "a", {}, "application/merge-patch+json", "?force=true")
    await status_of(force, 422, "Invalid")
    assert env.storage.updates == []


async def test_apply_patch_creates_then_replaces(env: Env) -> None:
    applied = f"apiVersion: {GROUP}/{VERSION}\nkind: Thing\nmetadata:\n  name: a\nspec:\n  size: 2\n"
    resp = await patch_call(env, "a", applied, "application/apply-patch+yaml", "?fieldManager=flux")
    assert resp.status == 201
    assert env.storage.objects[("ns", "a")]["spec"] == {"size": 2}
    assert env.storage.write_options[-1].field_manager == "flux"
    applied2 = json.dumps({**thing("a", 3), "metadata": {"name": "a", "labels": {"l": "v"}}})
    resp = await patch_call(env, "a", applied2, "application/apply-patch+yaml", "?fieldManager=flux&dryRun=All")
    assert resp.status == 200
    assert env.storage.write_options[-1] == WriteOptions(dry_run=True, field_manager="flux", manager="flux")
    assert env.storage.objects[("ns", "a")]["spec"] == {"size": 2}
    resp = await patch_call(env, "a", applied2, "application/apply-patch+yaml", "?fieldManager=flux")
    assert resp.status == 200
    stored = env.storage.objects[("ns", "a")]
    assert stored["spec"] == {"size": 3}
    assert stored["metadata"]["labels"] == {"l": "v"}


async def test_apply_patch_lands_on_an_object_created_meanwhile(env: Env) -> None:
    env.storage.before_create = lambda: env.storage.seed("ns", thing("a", 1, labels={"theirs": "1"}))
    applied = {**thing("a", 5), "metadata": {"name": "a", "labels": {"mine": "1"}}}
    resp = await patch_call(env, "a", json.dumps(applied), "application/apply-patch+yaml", "?fieldManager=m")
    # AlreadyExists, so applied onto theirs; what they hold belongs to before-first-apply, as on kube.
    body = await status_of(resp, 409, "Conflict")
    assert body["message"] == ('Apply failed with 1 conflict: conflict with "before-first-apply" using '
                               f'{GROUP}/{VERSION}: .spec.size')
    resp = await patch_call(env, "a", json.dumps(applied), "application/apply-patch+yaml", "?fieldManager=m&force=1")
    assert resp.status == 200, await resp.text()
    stored = env.storage.objects[("ns", "a")]
    assert stored["spec"] == {"size": 5}
    assert stored["metadata"]["labels"] == {"theirs": "1", "mine": "1"}
    owners = {e["manager"]: e["fieldsV1"] for e in stored["metadata"]["managedFields"]}
    # The spec node itself stays before-first-apply's: only the field that changed was taken.
    assert owners == {"before-first-apply": {"f:metadata": {"f:labels": {".": {}, "f:theirs": {}}}, "f:spec": {}},
                      "m": {"f:metadata": {"f:labels": {"f:mine": {}}}, "f:spec": {"f:size": {}}}}


async def test_apply_patch_requires_field_manager_and_matching_identity(env: Env) -> None:
    applied = json.dumps(thing("a", 2))
    body = await status_of(await patch_call(env, "a", applied, "application/apply-patch+yaml"), 422, "Invalid")
    assert body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )
    wrong_kind = json.dumps({**thing("a"), "kind": "Other"})
    await status_of(
        await patch_call(env, "a", wrong_kind, "application/apply-patch+yaml", "?fieldManager=m"),
        400,
        "BadRequest",
    )
    wrong_name = json.dumps(thing("b"))
    await status_of(
        await patch_call(env, "a", wrong_name, "application/apply-patch+yaml", "?fieldManager=m"),
        400,
        "BadRequest",
    )
    assert env.storage.objects == {}


# --- errors from storages --------------------------------------------------------------------------


async def test_unexpected_exception_is_500_and_logged(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.storage.fail_with = RuntimeError("boom")
    with caplog.at_level(logging.ERROR, logger="shared.server.middleware"):
        body = await status_of(await env.call("GET", f"{BASE}/namespaces/ns/things/a"), 500, "InternalError")
    assert "boom" not in body["message"]
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)


async def test_unavailable_carries_retry_after(env: Env) -> None:
    env.storage.fail_with = errors.unavailable("kube-apiserver is unavailable", retry_after=3)
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things")
    body = await status_of(resp, 503, "ServiceUnavailable")
    assert resp.headers["Retry-After"] == "3"
    assert body["details"]["retryAfterSeconds"] == 3


async def test_request_timeout_is_503_not_a_hang(env: Env) -> None:
    server = ApiServer(authenticator=header_authenticator, authorizer=env.authz, request_timeout=0.2)
    slow = MemoryStorage(INFO)
    slow.delay = 5
    server.register(slow)
    async with TestClient(TestServer(server.app())) as client:
        resp = await client.get(f"{BASE}/namespaces/ns/things", headers={"X-User": "alice"})
        await status_of(resp, 503, "ServiceUnavailable")
        assert "Retry-After" in resp.headers


async def test_no_authorizer_fails_closed(env: Env) -> None:
    env.server.set_authorizer(None)
    await status_of(await env.call("GET", f"{BASE}/namespaces/ns/things"), 403, "Forbidden")


# --- watch ---------------------------------------------------------------------------------------


async def read_events(resp: Any, count: int) -> list[JSON]:
    events: list[JSON] = []
    async with asyncio.timeout(5):
        while len(events) < count:
            line = await resp.content.readline()
            if not line:
                break
            events.append(json.loads(line))
    return events


async def test_watch_streams_events_and_honours_timeout(env: Env) -> None:
    env.storage.seed("ns", thing("a"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things?watch=1&resourceVersion=0&timeoutSeconds=1")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "application/json"
    first = await read_events(resp, 1)
    assert first[0]["type"] == "ADDED"
    assert first[0]["object"]["metadata"]["name"] == "a"
    await env.call("POST", f"{BASE}/namespaces/ns/things", json=thing("b"))
    await env.call("POST", f"{BASE}/namespaces/other/things", json=thing("c"))  # other namespace: filtered
    more = await read_events(resp, 1)
    assert more[0]["type"] == "ADDED"
    assert more[0]["object"]["metadata"]["name"] == "b"
    rest = await resp.content.read()  # the server ends the stream at timeoutSeconds
    assert rest == b""
    elapsed = loop.time() - started
    assert 0.9 <= elapsed < 3.0
    await asyncio.sleep(0.05)
    assert env.storage.watchers == []
    assert env.storage.watch_closed == 1


async def test_watch_in_table_mode(env: Env) -> None:
    env.storage.seed("ns", thing("a", 5))
    resp = await env.call(
        "GET",
        f"{BASE}/namespaces/ns/things?watch=true&resourceVersion=0&timeoutSeconds=2",
        headers={"Accept": TABLE_ACCEPT},
    )
    first = (await read_events(resp, 1))[0]
    assert first["type"] == "ADDED"
    assert first["object"]["kind"] == "Table"
    assert first["object"]["rows"][0]["cells"][:2] == ["a", 5]
    assert first["object"]["columnDefinitions"]
    await env.call("POST", f"{BASE}/namespaces/ns/things", json=thing("b", 6))
    second = (await read_events(resp, 1))[0]
    assert second["object"]["kind"] == "Table"
    assert second["object"]["rows"][0]["cells"][:2] == ["b", 6]
    assert second["object"]["columnDefinitions"] == []  # kubectl reuses the first event's columns
    resp.close()


async def test_watch_single_object_uses_field_selector(env: Env) -> None:
    env.storage.seed("ns", thing("a"))
    env.storage.seed("ns", thing("b"))
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things/b?watch=true&resourceVersion=0&timeoutSeconds=1")
    events = await read_events(resp, 10)
    assert [e["object"]["metadata"]["name"] for e in events] == ["b"]
    assert env.storage.list_options[-1].field_selector == (("metadata.name", "=", "b"),)


async def test_watch_error_event_passes_through_and_ends_stream(env: Env) -> None:
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things?watch=true")
    await asyncio.sleep(0.2)  # let the storage register its watcher
    gone = errors.gone("too old resource version: 1 (5)")
    env.storage._notify("ERROR", gone.status() | {"metadata": {"namespace": "ns"}})
    events = await read_events(resp, 2)
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410
    assert await resp.content.read() == b""


async def test_watch_that_fails_immediately_gets_a_status_code(env: Env) -> None:
    env.storage.watch_error = errors.gone("too old resource version")
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things?watch=true")
    await status_of(resp, 410, "Expired")


async def test_watch_stops_when_the_client_goes_away(env: Env) -> None:
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things?watch=true")
    assert resp.status == 200
    await asyncio.sleep(0.2)
    assert len(env.storage.watchers) == 1
    resp.close()
    for _ in range(100):  # the server notices within its 1 s check interval
        if not env.storage.watchers:
            break
        await asyncio.sleep(0.05)
    assert env.storage.watchers == []
    assert env.storage.watch_closed == 1


# --- the real wiring: TLS + front-proxy authentication through serve() ----------------------------


async def test_serve_over_tls_with_front_proxy_authentication(tmp_path: Any) -> None:
    import aiohttp

    from shared.security import tls
    from shared.security.authn import FrontProxyAuthenticator, RequestHeaderConfig

    proxy_ca = tls.new_ca("front-proxy-ca")
    config = RequestHeaderConfig(client_ca=proxy_ca.cert_pem.decode(), allowed_names=("front-proxy-client",))
    files = tls.write_serving_cert(tmp_path, ["localhost"], ["127.0.0.1"])
    server = ApiServer(authenticator=FrontProxyAuthenticator(config), authorizer=RecordingAuthorizer())
    server.register(MemoryStorage(INFO))
    runner = await server.serve("127.0.0.1", 0, tls.server_context(files.cert_file, files.key_file, config.client_ca))
    port = runner.addresses[0][1]
    base = f"https://127.0.0.1:{port}"

    def client_ssl(cn: str | None) -> Any:
        if cn is None:
            return tls.client_context(files.ca_pem)
        leaf = tls.new_cert(proxy_ca, cn, server=False, client=True)
        (tmp_path / f"{cn}.crt").write_bytes(leaf.cert_pem)
        (tmp_path / f"{cn}.key").write_bytes(leaf.key_pem)
        return tls.client_context(files.ca_pem, tmp_path / f"{cn}.crt", tmp_path / f"{cn}.key")

    try:
        async with aiohttp.ClientSession() as session:
            proxy = client_ssl("front-proxy-client")
            headers = {"X-Remote-User": "alice", "X-Remote-Group": "devs"}
            async with session.get(
                f"{base}/apis/{GROUP}/{VERSION}/namespaces/ns/things", ssl=proxy, headers=headers
            ) as r:
                assert r.status == 200
                assert (await r.json())["kind"] == "ThingList"
            async with session.get(f"{base}/apis", ssl=client_ssl(None), headers=headers) as r:
                assert r.status == 401  # headers without the proxy's certificate are not trusted
            async with session.get(f"{base}/apis", ssl=client_ssl("intruder"), headers=headers) as r:
                assert r.status == 401  # a certificate from the right CA but not an allowed name
            async with session.get(f"{base}/healthz", ssl=client_ssl(None)) as r:
                assert r.status == 200
    finally:
        await runner.cleanup()


async def test_replicas_share_a_port_only_with_reuse_port() -> None:
    """``--reuse-port``: two servers bind one port and the kernel spreads new connections over both (what the
    bench's replica figures rely on); without it the second bind fails as a port in use does."""
    import aiohttp

    def replica(label: str) -> ApiServer:
        storage = MemoryStorage(INFO)
        storage.seed("ns", thing(label))
        server = ApiServer(authenticator=header_authenticator, authorizer=RecordingAuthorizer())
        server.register(storage)
        return server

    first = await replica("first").serve("127.0.0.1", 0, None, reuse_port=True)
    port = first.addresses[0][1]
    runners = [first]
    try:
        with pytest.raises(OSError):
            runners.append(await replica("refused").serve("127.0.0.1", port, None))
        runners.append(await replica("second").serve("127.0.0.1", port, None, reuse_port=True))
        answered: set[str] = set()
        for _ in range(64):  # each request on a new connection; the kernel picks a listener per connection
            async with (aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
                        session.get(f"http://127.0.0.1:{port}/apis/{GROUP}/{VERSION}/namespaces/ns/things",
                                    headers={"X-User": "alice"}) as r):
                assert r.status == 200
                answered |= {item["metadata"]["name"] for item in (await r.json())["items"]}
            if answered == {"first", "second"}:
                break
        assert answered == {"first", "second"}
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_watch_list_protocol_sends_initial_events_then_bookmark(env: Env) -> None:
    env.storage.seed("ns", thing("a"))
    env.storage.seed("ns", thing("b"))
    resp = await env.call(
        "GET",
        f"{BASE}/namespaces/ns/things?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan&timeoutSeconds=2",
    )
    events = await read_events(resp, 3)
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK"]
    bookmark = events[2]["object"]
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert bookmark["metadata"]["resourceVersion"] == str(env.storage.rv)
    await env.call("POST", f"{BASE}/namespaces/ns/things", json=thing("c"))
    later = await read_events(resp, 1)
    assert later[0]["type"] == "ADDED"
    assert later[0]["object"]["metadata"]["name"] == "c"
    resp.close()


async def test_name_field_selector_is_authorized_as_that_name(env: Env) -> None:
    resp = await env.call("GET", f"{BASE}/namespaces/ns/things?fieldSelector=metadata.name%3Da")
    assert resp.status == 200
    assert env.authz.asked[-1] == ResourceAttributes("list", GROUP, VERSION, "things", "ns", "a")
    await env.call("GET", f"{BASE}/namespaces/ns/things?fieldSelector=metadata.name!%3Da")
    assert env.authz.asked[-1].name is None


def test_cluster_scoped_resources_are_refused() -> None:
    info = ResourceInfo(GROUP, VERSION, "Cluster", "clusters", "cluster", {}, namespaced=False)
    with pytest.raises(ValueError, match="only namespaced"):
        ApiServer().register(MemoryStorage(info))


# --- the request log ---------------------------------------------------------------------------------


@pytest.fixture
def request_lines(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Captured logs; the request logger's level is left as each test sets it, and restored after."""
    caplog.set_level(logging.DEBUG)  # the handler takes all; the request logger's own level decides
    logger = logging.getLogger(middleware.REQUEST_LOGGER)
    before = logger.level
    try:
        yield caplog
    finally:
        logger.setLevel(before)


def lines_of(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.levelname, vars(r)["code"], vars(r)["verb"])
            for r in caplog.records if r.name == middleware.REQUEST_LOGGER]


async def test_by_default_only_failed_requests_are_logged(env: Env, request_lines: pytest.LogCaptureFixture) -> None:
    middleware.log_every_request(False)
    assert (await env.call("GET", f"{BASE}/namespaces/ns/things")).status == 200
    assert (await env.call("GET", f"{BASE}/namespaces/ns/things/missing")).status == 404
    assert (await env.call("GET", "/healthz")).status == 200
    env.storage.fail_with = RuntimeError("boom")
    assert (await env.call("GET", f"{BASE}/namespaces/ns/things/a")).status == 500
    assert lines_of(request_lines) == [("WARNING", 500, "get")]


async def test_log_requests_logs_every_request_but_probes(env: Env, request_lines: pytest.LogCaptureFixture) -> None:
    middleware.log_every_request(True)
    assert (await env.call("GET", f"{BASE}/namespaces/ns/things")).status == 200
    assert (await env.call("GET", f"{BASE}/namespaces/ns/things/missing")).status == 404
    assert (await env.call("GET", "/healthz")).status == 200
    assert lines_of(request_lines) == [("INFO", 200, "list"), ("INFO", 404, "get")]
    line = next(r for r in request_lines.records if r.name == middleware.REQUEST_LOGGER)
    assert (vars(line)["user"], vars(line)["path"]) == ("alice", f"{BASE}/namespaces/ns/things")


@pytest.mark.parametrize(("verb", "code", "seconds", "level"), [
    ("get", 200, 0.01, logging.INFO),
    ("get", 422, 0.01, logging.INFO),
    ("create", 503, 0.01, logging.WARNING),
    ("list", 200, 1.5, logging.WARNING),
    ("watch", 200, 300.0, logging.INFO),  # a watch lasts as long as the client keeps it
])
def test_request_level(verb: str, code: int, seconds: float, level: int) -> None:
    assert middleware.request_level(middleware.RequestLog(verb=verb), code, seconds) == level
    assert middleware.request_level(middleware.RequestLog(verb=verb, quiet=True), code, seconds) == logging.DEBUG
