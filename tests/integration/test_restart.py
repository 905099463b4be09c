"""Faults the real control plane can produce: kube-apiserver restarts under running services.

A client's watch through aggregation is cut when kube-apiserver goes away (its connection runs
through it).  The watch contract then leaves a client two paths, and each test here drives one of
them on purpose and checks that nothing is lost and nothing arrives twice:

* resume: the service's cache still holds the client's resourceVersion, so a watch from it
  delivers exactly the changes made since -- across the restart, none lost, none twice, in order;
* 410 + re-list: the client's resourceVersion is older than anything the service still holds
  (here because the service restarted with kube-apiserver and its cache started over), so the
  watch ends with 410 Expired; a re-list then shows exactly the current state, and a watch from
  the re-list's resourceVersion delivers the next change once, replaying nothing older.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from localcluster import services
from localcluster.cluster import Cluster

from tests.kube import Api, load_fixture, wait_for

GROUP_PATH = "/apis/apps.cozystack.io/v1alpha1"

Seen = list[tuple[str, str]]


def _redises(ns: str) -> str:
    return f"{GROUP_PATH}/namespaces/{ns}/redises"


def _manifest(ns: str, name: str, replicas: int) -> str:
    return json.dumps({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis",
                       "metadata": {"name": name, "namespace": ns}, "spec": {"replicas": replicas}})


def _stream(api: Api, ns: str, resource_version: str) -> list[dict[str, Any]]:
    """Read a whole (short) watch; the response is JSON lines.  A watch refused outright is
    returned as the ERROR event a client would act on the same way.  A 503 (the restarted service's
    cache not synced yet, or the aggregator not reaching it yet) is retried after its Retry-After, as
    client-go's reflector does, for at most a minute."""
    req = urllib.request.Request(
        api.cluster.server + f"{_redises(ns)}?watch=true&resourceVersion={resource_version}&timeoutSeconds=3",
        headers={"Accept": "application/json"})
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(req, timeout=30, context=api.ctx) as resp:
                return [json.loads(line) for line in resp.read().splitlines() if line.strip()]
        except urllib.error.HTTPError as exc:
            if exc.code == 410:
                return [{"type": "ERROR", "object": json.loads(exc.read())}]
            if exc.code == 503 and time.monotonic() < deadline:
                time.sleep(float(exc.headers.get("Retry-After") or 1))
                continue
            raise


def _changes(events: list[dict[str, Any]]) -> Seen:
    errors = [(e["object"].get("code"), e["object"].get("message")) for e in events if e["type"] == "ERROR"]
    assert not errors, errors
    return [(e["type"], e["object"]["metadata"]["name"]) for e in events if e["type"] != "BOOKMARK"]


def _names(api: Api, ns: str) -> list[str]:
    code, listing = api.request("GET", _redises(ns))
    assert code == 200, listing
    return [i["metadata"]["name"] for i in listing["items"]]


def _new_namespace(cluster: Cluster, api: Api, ns: str) -> str:
    """A namespace of the test's own holding one Redis, "before"; returns the list's resourceVersion."""
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(load_fixture("redis.yaml")))
    wait_for(lambda: api.request("GET", _redises(ns))[0] == 200, "redis kind served", timeout=60)
    cluster.kubectl("apply", "-f", "-", input=_manifest(ns, "before", 2))
    wait_for(lambda: _names(api, ns) == ["before"], "the service's cache to hold 'before'")
    code, listing = api.request("GET", _redises(ns))
    assert code == 200 and [i["metadata"]["name"] for i in listing["items"]] == ["before"]
    return str(listing["metadata"]["resourceVersion"])


def _write_missed_changes(cluster: Cluster, ns: str) -> None:
    """Create one object, change and delete another: what a client that was cut off missed."""
    cluster.kubectl("apply", "-f", "-", input=_manifest(ns, "after", 3))
    cluster.kubectl("patch", "redis", "before", "-n", ns, "--type=merge", "-p", '{"spec":{"replicas":4}}')
    cluster.kubectl("delete", "redis", "before", "-n", ns)


def test_watch_resumes_exactly_after_kube_apiserver_restart(control_plane: Cluster, helm_service: services.Running,
                                                          api: Api) -> None:
    ns = "restart-resume"
    last_seen = _new_namespace(control_plane, api, ns)
    # Changes the client misses before the restart: the service's cache has them in its history.
    control_plane.kubectl("apply", "-f", "-", input=_manifest(ns, "after", 3))
    control_plane.kubectl("patch", "redis", "before", "-n", ns, "--type=merge", "-p", '{"spec":{"replicas":4}}')
    wait_for(lambda: {i["metadata"]["name"]: i["spec"]["replicas"] for i in api.request("GET", _redises(ns))[1]
                      ["items"]} == {"after": 3, "before": 4}, "the service's cache to hold the changes")

    control_plane.restart_apiserver()
    # No write until the service's cache is live again (the probe shows up in its list), so each
    # later change reaches it as an event of its own rather than folded into a re-list.
    wait_for(lambda: control_plane.kubectl("apply", "-f", "-", input=_manifest(ns, "probe", 1),
                                           check=False).returncode == 0,
             "the aggregated API back after the restart", timeout=60, interval=1)
    wait_for(lambda: "probe" in _names(api, ns), "the service's cache to see the probe", timeout=60)
    control_plane.kubectl("delete", "redis", "before", "-n", ns)

    expected = [("ADDED", "after"), ("MODIFIED", "before"), ("ADDED", "probe"), ("DELETED", "before")]

    def resumed() -> Seen | None:
        seen = _changes(_stream(api, ns, last_seen))
        return seen if ("DELETED", "before") in seen else None

    seen = wait_for(resumed, "the resumed watch to deliver the missed changes", timeout=60, interval=1)
    assert seen == expected
    # Resuming from any point in between gives exactly the rest: nothing twice.
    code, listing = api.request("GET", _redises(ns))
    assert code == 200
    assert sorted(i["metadata"]["name"] for i in listing["items"]) == ["after", "probe"]
    assert _changes(_stream(api, ns, str(listing["metadata"]["resourceVersion"]))) == []


def test_watch_from_a_lost_resource_version_is_410_and_relist_is_exact(
        control_plane: Cluster, helm_service: services.Running, api: Api) -> None:
    ns = "restart-relist"
    last_seen = _new_namespace(control_plane, api, ns)

    # kube-apiserver and the service restart together (a node reboot, a rollout of both): the
    # service's cache starts over at a newer resourceVersion, so last_seen is no longer served.
    control_plane.kubectl("create", "configmap", "advance-the-revision", "-n", ns)
    services.stop(control_plane, services.HELM_AGL)
    control_plane.restart_apiserver()
    services.start(control_plane, services.HELM_AGL)
    # The APIService is Available once the new process answers; its kinds are served once it has read the
    # definitions (a full CI run once wrote the changes in between and got a 404).
    wait_for(lambda: api.request("GET", _redises(ns))[0] == 200, "redis kind served after the restart", timeout=60)
    _write_missed_changes(control_plane, ns)

    events = _stream(api, ns, last_seen)
    assert [e["type"] for e in events] == ["ERROR"], events
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"

    code, listing = api.request("GET", _redises(ns))
    assert code == 200
    assert [(i["metadata"]["name"], i["spec"]["replicas"]) for i in listing["items"]] == [("after", 3)]
    relisted = str(listing["metadata"]["resourceVersion"])
    control_plane.kubectl("patch", "redis", "after", "-n", ns, "--type=merge", "-p", '{"spec":{"replicas":5}}')
    seen = wait_for(lambda: _changes(_stream(api, ns, relisted)), "the change after the re-list", timeout=30)
    assert seen == [("MODIFIED", "after")]
