"""helm_agl under concurrent load through kube-apiserver (127.0.0.1 only, bounded in count and time).

What must hold when many clients write at once: every distinct create lands exactly once (one
Application and one HelmRelease each), concurrent creates of one name have exactly one winner and
409 AlreadyExists for the rest, concurrent updates carrying the same resourceVersion have exactly
one winner and 409 Conflict for the rest, and nothing answers 5xx.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from localcluster import services
from localcluster.cluster import Cluster

from tests.kube import Api, get_json, kubectl, load_fixture, wait_for

GROUP = "apps.cozystack.io"
NS = "load"
REDISES = f"/apis/{GROUP}/v1alpha1/namespaces/{NS}/redises"
HR = "helmreleases.helm.toolkit.fluxcd.io"
#: Requests in flight at once: enough to interleave writes in the service and in kube-apiserver,
#: few enough for a 2-core machine shared with other work.
CONCURRENCY = 32
DISTINCT = 1000
CONTENDERS = 100
#: Wall-clock bound of each burst.
BURST_SECONDS = 150

Outcome = tuple[int, dict[str, Any]]


def redis(name: str, replicas: int = 1, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Redis",
            "metadata": {"name": name, "namespace": NS, **meta}, "spec": {"replicas": replicas}}


async def _burst(cluster: Cluster, requests: list[tuple[str, str, dict[str, Any]]]) -> list[Outcome]:
    """Send ``(method, path, body)`` requests as admin, at most CONCURRENCY at once; (code, body) each."""
    context = ssl.create_default_context(cafile=str(cluster.pki_dir / "ca.crt"))
    context.load_cert_chain(str(cluster.pki_dir / "admin.crt"), str(cluster.pki_dir / "admin.key"))
    gate = asyncio.Semaphore(CONCURRENCY)
    connector = aiohttp.TCPConnector(ssl=context, limit=CONCURRENCY)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(cluster.server, connector=connector, timeout=timeout) as session:

        async def one(method: str, path: str, body: dict[str, Any]) -> Outcome:
            async with gate, session.request(method, path, json=body) as resp:
                return resp.status, await resp.json(content_type=None)

        return await asyncio.wait_for(asyncio.gather(*(one(*r) for r in requests)), BURST_SECONDS)


def burst(cluster: Cluster, requests: list[tuple[str, str, dict[str, Any]]]) -> list[Outcome]:
    started = time.monotonic()
    outcomes = asyncio.run(_burst(cluster, requests))
    print(f"{len(requests)} requests in {time.monotonic() - started:.1f}s: "
          f"{dict(Counter(code for code, _ in outcomes))}")
    server_errors = [(code, body) for code, body in outcomes if code >= 500]
    assert not server_errors, server_errors[:3]
    return outcomes


@pytest.fixture(scope="module")
def helm(control_plane: Cluster, helm_service: services.Running) -> Iterator[Cluster]:
    kubectl(control_plane, "create", "namespace", NS, check=False)
    kubectl(control_plane, "apply", "-f", "-", input=json.dumps(load_fixture("redis.yaml")))
    wait_for(lambda: "redises" in kubectl(control_plane, "api-resources", f"--api-group={GROUP}",
                                          "--cached=false", check=False).stdout, "redis kind served")
    yield control_plane


def test_distinct_creates_each_land_exactly_once(helm: Cluster, api: Api) -> None:
    names = [f"many-{i:04d}" for i in range(DISTINCT)]
    outcomes = burst(helm, [("POST", REDISES, redis(n, labels={"batch": "many"})) for n in names])
    assert Counter(code for code, _ in outcomes) == {201: DISTINCT}
    assert sorted(body["metadata"]["name"] for _, body in outcomes) == names

    def listed() -> list[str]:
        code, listing = api.request("GET", f"{REDISES}?labelSelector=batch%3Dmany")
        assert code == 200, listing
        return sorted(i["metadata"]["name"] for i in listing["items"])

    started = time.monotonic()
    wait_for(lambda: len(listed()) >= DISTINCT, "the list to show every created Application", timeout=60)
    print(f"list complete {time.monotonic() - started:.1f}s after the last create")
    assert listed() == names
    releases = get_json(helm, HR, "-n", NS)["items"]
    assert sorted(r["metadata"]["name"] for r in releases if r["metadata"]["name"].startswith("redis-many-")) == [
        f"redis-{n}" for n in names]


def test_concurrent_creates_of_one_name_have_one_winner(helm: Cluster, api: Api) -> None:
    outcomes = burst(helm, [("POST", REDISES, redis("contested", replicas=i + 1)) for i in range(CONTENDERS)])
    assert Counter(code for code, _ in outcomes) == {201: 1, 409: CONTENDERS - 1}
    assert {body["reason"] for code, body in outcomes if code == 409} == {"AlreadyExists"}
    (winner,) = [body for code, body in outcomes if code == 201]
    code, stored = api.request("GET", f"{REDISES}/contested")
    assert code == 200 and stored["spec"]["replicas"] == winner["spec"]["replicas"]
    hr = get_json(helm, HR, "redis-contested", "-n", NS)
    assert hr["spec"]["values"]["replicas"] == winner["spec"]["replicas"]


def test_concurrent_updates_with_one_resource_version_have_one_winner(helm: Cluster, api: Api) -> None:
    code, created = api.request("POST", REDISES, redis("updated"))
    assert code == 201
    updates = []
    for i in range(CONTENDERS):
        body = redis("updated", replicas=i + 2)
        body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
        updates.append(("PUT", f"{REDISES}/updated", body))
    outcomes = burst(helm, updates)
    assert Counter(code for code, _ in outcomes) == {200: 1, 409: CONTENDERS - 1}
    assert {body["reason"] for code, body in outcomes if code == 409} == {"Conflict"}
    (winner,) = [body for code, body in outcomes if code == 200]
    code, stored = api.request("GET", f"{REDISES}/updated")
    assert code == 200 and stored["spec"]["replicas"] == winner["spec"]["replicas"]
    assert stored["metadata"]["resourceVersion"] == winner["metadata"]["resourceVersion"]
