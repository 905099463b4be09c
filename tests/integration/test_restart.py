"""Faults the real control plane can produce: kube-apiserver restarts under running services.

A client's watch through aggregation is cut when kube-apiserver goes away (its connection runs
through it); what must hold is that the client can resume from the last resourceVersion it saw
and get exactly the changes it missed -- none lost, none twice -- because the service's informer
re-listed and filled its history with the difference; or, where the cache had to be reset, that
the client is told 410 and a re-list shows the current state (the watch contract's other path).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from localcluster import services
from localcluster.cluster import Cluster

from tests.kube import Api, load_fixture, wait_for

NS = "restart"
GROUP_PATH = "/apis/apps.cozystack.io/v1alpha1"


def _manifest(name: str, replicas: int) -> str:
    return json.dumps({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis",
                       "metadata": {"name": name, "namespace": NS}, "spec": {"replicas": replicas}})


def _stream(api: Api, resource_version: str) -> list[dict[str, Any]]:
    """Read a whole (short) watch; the response is JSON lines."""
    req = urllib.request.Request(
        api.cluster.server + f"{GROUP_PATH}/namespaces/{NS}/redises?watch=true"
        f"&resourceVersion={resource_version}&timeoutSeconds=3", headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=30, context=api.ctx) as resp:
        return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


def test_watch_resumes_after_kube_apiserver_restart(control_plane: Cluster, helm_service: services.Running,
                                                   api: Api) -> None:
    control_plane.kubectl("create", "namespace", NS, check=False)
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(load_fixture("redis.yaml")))
    wait_for(lambda: api.request("GET", f"{GROUP_PATH}/namespaces/{NS}/redises")[0] == 200, "redis kind served",
             timeout=60)
    control_plane.kubectl("apply", "-f", "-", input=_manifest("before", 2))
    code, listing = api.request("GET", f"{GROUP_PATH}/namespaces/{NS}/redises")
    assert code == 200
    last_seen = listing["metadata"]["resourceVersion"]

    control_plane.restart_apiserver()
    # Changes made right after the restart, while the service's informer may still be reconnecting.
    control_plane.kubectl("apply", "-f", "-", input=_manifest("after", 3))
    control_plane.kubectl("patch", "redis", "before", "-n", NS, "--type=merge", "-p", '{"spec":{"replicas":4}}')
    control_plane.kubectl("delete", "redis", "before", "-n", NS)

    def resumed() -> list[tuple[str, str]] | str | None:
        events = _stream(api, last_seen)
        gone = [e["object"] for e in events if e["type"] == "ERROR" and e["object"].get("code") == 410]
        if gone:
            return "gone"  # the service's cache was reset: kube semantics say re-list
        errors = [e["object"] for e in events if e["type"] == "ERROR"]
        assert not errors, errors
        seen = [(e["type"], e["object"]["metadata"]["name"]) for e in events if e["type"] != "BOOKMARK"]
        return seen if ("DELETED", "before") in seen else None

    outcome = wait_for(resumed, "the resumed watch to deliver the missed changes", timeout=60, interval=1)
    print(f"watch after restart: {'410, re-listed' if outcome == 'gone' else 'resumed in place'}")
    if outcome == "gone":
        # Allowed by the watch contract: the client re-lists and must then see the current state.
        code, listing = api.request("GET", f"{GROUP_PATH}/namespaces/{NS}/redises")
        assert code == 200
        assert [i["metadata"]["name"] for i in listing["items"]] == ["after"]
    else:
        # Resumed in place: exactly the missed changes, none lost, none twice, in order.
        assert outcome == [("ADDED", "after"), ("MODIFIED", "before"), ("DELETED", "before")], outcome
