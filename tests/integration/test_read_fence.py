"""Consistent lists answered from the watch cache behind a read fence, against kube-apiserver, both services.

After a write anywhere else in the cluster, the cache cannot see the current revision in its own stream; the
service then writes its kind's fence object and answers once the fence's event arrived, instead of listing the
backing objects from kube-apiserver; the service's ``agl_watch_cache_consistent_lists_total`` tells which happened.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from localcluster import services
from localcluster.cluster import Cluster

from tests.integration.test_read_consistency import NS, Served, annotated, listed, probe_of, served
from tests.kube import Api, service_metrics, wait_for

__all__ = ["served"]  # the fixture, shared with test_read_consistency

#: The services run out of a pod here: their fences live in ``default`` (``--read-fence-namespace``'s default).
FENCE_NS = "default"
ELSEWHERE = f"/api/v1/namespaces/{NS}/configmaps"
SERVICES = {"helm_service": services.HELM_AGL, "tofu_service": services.TOFU_AGL}


def fence_path(served: Served) -> str:
    return f"{served.backing.format(ns=FENCE_NS)}/read-fence.{served.kind.lower()}"


def consistent_lists(served: Served, cluster: Cluster) -> Counter[str]:
    """The service's own count of how its cache of ``served``'s kind answered consistent lists."""
    # The one serving now: an earlier module may have replaced the session's with a process on another port.
    running = services.start(cluster, SERVICES[served.fixture])
    text = service_metrics(cluster, running.port)
    cache = f'{served.backing.rsplit("/", 1)[1]}/{served.kind}'
    counts: Counter[str] = Counter()
    for labels, value in re.findall(r"^agl_watch_cache_consistent_lists_total{(.*)} (\S+)$", text, re.M):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if found["cache"] == cache:
            counts[found["answer"]] = int(float(value))
    return counts


def watch_lines(served: Served, api: Api, seconds: int, resource_version: str = "") -> list[dict[str, Any]]:
    """A whole watch of the kind in every namespace, ``seconds`` long."""
    req = urllib.request.Request(api.cluster.server + f"/apis/{served.group}/v1alpha1/{served.plural}"
                                 f"?watch=true&timeoutSeconds={seconds}&resourceVersion={resource_version}",
                                 headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=30, context=api.ctx) as resp:
        return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


def cache_synced(served: Served, api: Api) -> bool:
    """A watch is served only from a synced cache (503 before): the same cache that answers lists."""
    try:
        watch_lines(served, api, 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 503:
            return False
        raise
    return True


@pytest.fixture
def app_in_cache(served: Served, api: Api) -> Iterator[str]:
    """An Application, with the service's cache synced."""
    name = "fenced"
    code, body = api.request("POST", served.collection, served.app(name))
    assert code == 201, body
    wait_for(lambda: cache_synced(served, api), "the watch cache is synced")
    yield name
    api.request("DELETE", f"{served.collection}/{name}")


def write_elsewhere(api: Api) -> None:
    """A write to another resource: the cluster's revision moves on, the kind's watch sees nothing of it."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "elsewhere", "namespace": NS},
            "data": {"at": str(time.time_ns())}}
    code, answer = api.request("PUT", f"{ELSEWHERE}/elsewhere", body)
    if code == 404:
        code, answer = api.request("POST", ELSEWHERE, body)
    assert code in (200, 201), answer


def test_a_list_after_a_write_elsewhere_is_answered_behind_the_fence(served: Served, api: Api,
                                                                     control_plane: Cluster, app_in_cache: str) -> None:
    """Not kube-apiserver: the service's own count of how the list was answered (``/metrics``)."""
    name = app_in_cache
    fenced = 0
    for i in range(5):
        written = annotated(served, api, name, f"f{i}")
        write_elsewhere(api)
        before = consistent_lists(served, control_plane)
        lst = listed(served, api)
        answered = consistent_lists(served, control_plane) - before
        [item] = [a for a in lst["items"] if a["metadata"]["name"] == name]
        assert probe_of(item) == f"f{i}", f"round {i}: the list answered a state older than the write"
        assert int(lst["metadata"]["resourceVersion"]) > written
        # kube-apiserver sometimes sends the cache a bookmark at the current revision first (the probe has
        # its watch cache ask etcd for progress); then the cache is current without a fence.
        assert answered in ({"fence": 1}, {"cache": 1}), f"round {i}: {dict(answered)}"
        if answered == {"fence": 1}:
            fenced += 1
            code, fence = api.request("GET", fence_path(served))
            assert code == 200 and int(fence["metadata"]["resourceVersion"]) > written, fence
    assert fenced >= 3, f"only {fenced} of 5 lists needed the fence: the test proves little"


def test_the_fence_is_no_application(served: Served, api: Api, app_in_cache: str) -> None:
    write_elsewhere(api)
    listed(served, api)
    code, fence = api.request("GET", fence_path(served))
    assert code == 200, fence
    assert fence["spec"]["suspend"] is True, "its controller must leave it alone"
    everywhere = f"/apis/{served.group}/v1alpha1/{served.plural}"
    code, apps = api.request("GET", everywhere)
    assert code == 200, apps
    assert fence["metadata"]["name"] not in {a["metadata"]["name"] for a in apps["items"]}
    code, gone = api.request("GET", f"/apis/{served.group}/v1alpha1/namespaces/{FENCE_NS}/{served.plural}"
                                    f"/{fence['metadata']['name']}")
    assert code == 404, gone


def test_a_watch_never_shows_the_fence(served: Served, api: Api, control_plane: Cluster, app_in_cache: str) -> None:
    seen: list[dict[str, Any]] = []

    # From the current revision: every event the watch shows is one this test caused.
    start = listed(served, api)["metadata"]["resourceVersion"]

    def watch() -> None:
        seen.extend(watch_lines(served, api, 4, start))

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.5)
    before = consistent_lists(served, control_plane)
    for _ in range(3):
        write_elsewhere(api)
        listed(served, api)
    assert (consistent_lists(served, control_plane) - before)["fence"] >= 1, "the fence was written meanwhile"
    code, body = api.request("POST", served.collection, served.app("watched"))
    assert code == 201, body
    watcher.join()
    api.request("DELETE", f"{served.collection}/watched")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in seen] == [("ADDED", "watched")], seen


def test_a_relabelled_fence_is_put_back_in_the_stream(served: Served, api: Api, control_plane: Cluster,
                                                      app_in_cache: str) -> None:
    """Someone takes the fence out of the kind's selection: the next fence write labels it back, so the list
    still comes from the cache instead of waiting for an event that would never come."""
    write_elsewhere(api)
    listed(served, api)
    kind_label = "apps.cozystack.io/application.kind"
    code, body = api.request("PATCH", fence_path(served), {"metadata": {"labels": {kind_label: None}}},
                             content_type="application/merge-patch+json")
    assert code == 200, body
    write_elsewhere(api)
    before = consistent_lists(served, control_plane)
    listed(served, api)
    assert consistent_lists(served, control_plane) - before == {"fence": 1}
    code, fence = api.request("GET", fence_path(served))
    assert code == 200 and fence["metadata"]["labels"][kind_label] == served.kind, fence
