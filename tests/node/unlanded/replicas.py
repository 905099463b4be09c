"""The two replicas of each service on the real node: a rolling update under load, leader failover, eviction.

What decides each assertion is a real program: kube-apiserver's aggregation layer proxies every request to one of
the Service's ready endpoints (kube-proxy's iptables rules, kept from the EndpointSlices the endpoint controller
writes from the pods' readiness probes); the Deployment controller rolls the pods; the services' Lease leader
election picks who rolls out a definition; kube-apiserver's Eviction API decides on the PodDisruptionBudget that
the disruption controller keeps current.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from localcluster import chartinstall
from localcluster.chartinstall import BOTH, NAMESPACE, RELEASE
from localcluster.demo import applied_definitions

from tests.kube import FIXTURES, Api, get_json, kubectl, wait_for
from tests.node.conftest import Node
from tests.node.test_install import SERVICES, pods

WAIT = "120s"
#: plural -> (group, kind, spec) of the kinds the load creates: one Helm-backed, one Tofu-backed.
KINDS = {"redises": ("apps.cozystack.io", "Redis", {"replicas": 1}),
         "vpcs": ("tofu.apps.cozystack.io", "VPC", {"region": "eu-west-1"})}
#: Bounds of the load: creates per kind, seconds between them, seconds in all.
CREATES, INTERVAL, LOAD_SECONDS = 400, 0.25, 100
#: Longest refused-request window accepted during the roll (the chart drains each pod for 5 s first).
REFUSED_LIMIT = 10.0


def collection(plural: str, namespace: str) -> str:
    return f"/apis/{KINDS[plural][0]}/v1alpha1/namespaces/{namespace}/{plural}"


def prepare(node: Node, namespace: str) -> Api:
    """BOTH installed, the sample definitions Accepted, ``namespace`` there and its kinds listable and watchable."""
    cluster = node.cluster
    chartinstall.install(cluster, node.image, BOTH, wait=WAIT)
    definitions = sorted((FIXTURES / "definitions").glob("*.yaml"))
    kubectl(cluster, "apply", *[arg for path in definitions for arg in ("-f", str(path))])
    for plural, name in applied_definitions(definitions):
        kubectl(cluster, "wait", f"{plural}/{name}", "--for=condition=Accepted", "--timeout=60s")
    kubectl(cluster, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": namespace}}))
    api = Api(cluster)
    for plural in KINDS:
        path = collection(plural, namespace)
        wait_for(lambda p=path: api.request("GET", p)[0] == 200, f"{plural} listable", timeout=60)
        wait_for(lambda p=path: api.request("GET", f"{p}?watch=1&timeoutSeconds=1")[0] == 200,
                 f"{plural} watchable", timeout=60)
    return api


@dataclass
class Answer:
    at: float
    name: str
    code: int
    why: str


def create_loop(api: Api, plural: str, prefix: str, stop: threading.Event, answers: list[Answer]) -> None:
    """POST one uniquely named Application every INTERVAL s until ``stop`` (bounded by CREATES and LOAD_SECONDS),
    recording each answer; 0 is an answer lost (connection reset, timeout)."""
    group, kind, spec = KINDS[plural]
    path, deadline = collection(plural, "agl-rolling"), time.monotonic() + LOAD_SECONDS
    for i in range(CREATES):
        if stop.is_set() or time.monotonic() > deadline:
            return
        name, started = f"{prefix}-{i}", time.monotonic()
        body = {"apiVersion": f"{group}/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
        try:
            code, answer = api.request("POST", path, body, timeout=15)
            why = "" if code == 201 else str(answer.get("message") if isinstance(answer, dict) else answer)[:200]
        except (OSError, http.client.HTTPException) as exc:
            code, why = 0, repr(exc)[:200]
        answers.append(Answer(started, name, code, why))
        time.sleep(max(0.0, INTERVAL - (time.monotonic() - started)))


@dataclass
class Reflector:
    """List, then watch from the list's resourceVersion, resuming from the last one seen when a stream ends and
    listing again on 410 Gone, as client-go's reflector does. ``added``: per name, how often it was seen added (an
    ADDED event, or a relist that shows it for the first time, as a reflector's Replace does)."""

    api: Api
    path: str
    stop: threading.Event
    added: Counter[str] = field(default_factory=Counter)
    known: set[str] = field(default_factory=set)
    rv: str = ""
    relists: int = 0
    gone: int = 0
    ends: Counter[str] = field(default_factory=Counter)

    def run(self) -> None:
        deadline = time.monotonic() + LOAD_SECONDS + 60
        while not self.stop.is_set() and time.monotonic() < deadline:
            if not self.rv and not self.relist():
                time.sleep(0.5)
                continue
            self.watch()

    def relist(self) -> bool:
        code, body = self.api.request("GET", self.path, timeout=15)
        if code != 200:
            self.ends[f"list {code}"] += 1
            return False
        names = {item["metadata"]["name"] for item in body["items"]}
        self.added.update(names - self.known)
        self.known, self.rv = names, body["metadata"]["resourceVersion"]
        self.relists += 1
        return True

    def watch(self) -> None:
        url = (f"{self.api.cluster.server}{self.path}?watch=1&allowWatchBookmarks=true"
               f"&resourceVersion={self.rv}&timeoutSeconds=30")
        request, started = urllib.request.Request(url, headers={"Accept": "application/json"}), time.monotonic()
        try:
            response = urllib.request.urlopen(request, timeout=35, context=self.api.ctx)
        except urllib.error.HTTPError as exc:
            self.ends[f"watch {exc.code}"] += 1
            self.rv = "" if exc.code == 410 else self.rv
            self.gone += exc.code == 410
            time.sleep(0.2)
            return
        except (OSError, http.client.HTTPException) as exc:
            self.ends[f"watch {type(exc).__name__}"] += 1
            time.sleep(0.2)
            return
        with response:
            try:
                for line in response:
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        self.ends[f"ERROR event {obj.get('code')}"] += 1
                        self.rv, self.gone = ("", self.gone + 1) if obj.get("code") == 410 else (self.rv, self.gone)
                        return
                    name, self.rv = obj["metadata"].get("name", ""), obj["metadata"]["resourceVersion"]
                    if event["type"] == "ADDED":
                        self.added[name] += 1
                        self.known.add(name)
                    elif event["type"] == "DELETED":
                        self.known.discard(name)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self.ends[f"stream {type(exc).__name__}"] += 1
                return
        # Before its timeoutSeconds: the pod serving it went away (a resume follows).
        self.ends["stream cut" if time.monotonic() - started < 29 else "stream timed out"] += 1


def pod_names(node: Node, component: str) -> set[str]:
    """The component's pods that are not terminating."""
    return {p["metadata"]["name"] for p in pods(node, component) if "deletionTimestamp" not in p["metadata"]}


def rolled_out(node: Node) -> None:
    for component in SERVICES:
        kubectl(node.cluster, "rollout", "status", f"deployment/{RELEASE}-{component}", "-n", NAMESPACE,
                "--timeout=120s")


def test_rolling_update_under_load(node_cluster: Node) -> None:
    """``helm upgrade --wait`` rolls both Deployments while clients create and watch Applications through
    kube-apiserver: what the Deployment controller, the readiness probes and the services' shutdown delay decide
    is whether a request is refused, and the services' watch (resourceVersion resumption) whether a watcher
    misses or repeats an object."""
    api = prepare(node_cluster, "agl-rolling")
    before = {c: pod_names(node_cluster, c) for c in SERVICES}
    stop, watched, mark = threading.Event(), threading.Event(), uuid.uuid4().hex[:6]
    answers: dict[str, list[Answer]] = {plural: [] for plural in KINDS}
    reflectors = {plural: Reflector(api, collection(plural, "agl-rolling"), watched) for plural in KINDS}
    threads = [threading.Thread(target=r.run, daemon=True) for r in reflectors.values()]
    threads += [threading.Thread(target=create_loop, args=(api, plural, f"roll-{mark}", stop, answers[plural]),
                                 daemon=True) for plural in KINDS]
    for thread in threads:
        thread.start()
    extra = [arg for c in ("helmAgl", "tofuAgl") for arg in ("--set-string", f"{c}.podAnnotations.roll={mark}")]
    try:
        time.sleep(5)
        started = time.monotonic()
        chartinstall.helm(node_cluster.cluster, *chartinstall.install_args(node_cluster.image, BOTH, upgrade=True,
                                                                           wait="180s", extra=extra))
        upgrade_took = time.monotonic() - started
        time.sleep(5)
    finally:
        stop.set()
        for thread in threads[len(reflectors):]:
            thread.join(timeout=30)
    after = {c: pod_names(node_cluster, c) for c in SERVICES}
    assert all(not before[c] & after[c] and len(after[c]) == 2 for c in SERVICES), (before, after)

    report = [f"helm upgrade --wait took {upgrade_took:.1f}s"]
    created: dict[str, set[str]] = {}
    for plural, got in answers.items():
        refused = [a for a in got if a.code != 201]
        created[plural] = {a.name for a in got if a.code == 201}
        window = refused[-1].at - refused[0].at if refused else 0.0
        report.append(f"{plural}: {len(got)} creates, {len(refused)} refused "
                      f"{dict(Counter(a.code for a in refused))} in a window of {window:.1f}s "
                      f"{[(a.name, a.code, a.why) for a in refused[:5]]}")
    # The watchers catch up with what was created (30 s at most), then stop (a watch request ends within 30 s).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(not created[p] <= set(r.added) for p, r in reflectors.items()):
        time.sleep(0.5)
    watched.set()
    for thread in threads:
        thread.join(timeout=45)
    assert not any(t.is_alive() for t in threads)
    for plural, reflector in reflectors.items():
        listed = Counter(i["metadata"]["name"] for i in get_json(node_cluster.cluster, plural, "-n", "agl-rolling")
                         ["items"] if i["metadata"]["name"].startswith(f"roll-{mark}-"))
        failed = {a.name for a in answers[plural] if a.code != 201}
        report.append(f"{plural} watch: {reflector.relists} lists, {reflector.gone} x 410, ends "
                      f"{dict(reflector.ends)}; failed creates that exist anyway: {sorted(failed & set(listed))}")
        assert {name: listed[name] for name in created[plural]} == dict.fromkeys(created[plural], 1), report
        # A 4xx is a refusal before anything was written; a 5xx or a lost answer may have been written.
        assert not {a.name for a in answers[plural] if 400 <= a.code < 500} & set(listed), report
        seen = {name: reflector.added[name] for name in created[plural]}
        assert seen == dict.fromkeys(created[plural], 1), (report, {n: c for n, c in seen.items() if c != 1})
    print("\n".join(report))
    for plural, got in answers.items():
        times = [a.at for a in got if a.code != 201]
        assert len(created[plural]) >= 40 and (not times or times[-1] - times[0] < REFUSED_LIMIT), report


def lease_holder(node: Node, component: str) -> str:
    lease = get_json(node.cluster, "lease", f"{RELEASE}-{component}-reconciler", "-n", NAMESPACE)
    return str(lease["spec"].get("holderIdentity") or "")


def test_leader_failover_still_rolls_out(node_cluster: Node) -> None:
    """Deleting the leader's pod: the other replica's leader election takes the Lease, and its reconciler rolls a
    definition change out onto an existing HelmRelease (helm_agl.rollout: the definition's release labels)."""
    prepare(node_cluster, "agl-failover")
    cluster = node_cluster.cluster
    kubectl(cluster, "apply", "-n", "agl-failover", "-f", "-", input=json.dumps(
        {"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis", "metadata": {"name": "failover"},
         "spec": {"replicas": 1}}))
    wait_for(lambda: get_json(cluster, "helmreleases", "-n", "agl-failover", "redis-failover"),
             "the Redis Application's HelmRelease", timeout=60)
    old = wait_for(lambda: (h := lease_holder(node_cluster, "helm-agl")) in pod_names(node_cluster, "helm-agl")
                   and h, "helm-agl's Lease to be held by one of its pods", timeout=60)
    kubectl(cluster, "delete", "pod", old, "-n", NAMESPACE, "--wait=false")
    started = time.monotonic()
    new = wait_for(lambda: (h := lease_holder(node_cluster, "helm-agl")) != old
                   and h in pod_names(node_cluster, "helm-agl") and h, "the Lease to move to another pod", timeout=45)
    moved = time.monotonic() - started
    print(f"Lease moved from {old} to {new} in {moved:.1f}s")
    assert moved < 20, (old, new, moved)
    mark = uuid.uuid4().hex[:8]
    patch = {"spec": {"release": {"labels": {"agl-test/failover": mark}}}}
    kubectl(cluster, "patch", "applicationdefinitions.cozystack.io", "redis", "--type=merge", "-p", json.dumps(patch))
    try:
        release = wait_for(lambda: (r := get_json(cluster, "helmreleases", "-n", "agl-failover", "redis-failover"))
                           ["metadata"]["labels"].get("agl-test/failover") == mark and r,
                           "the new leader to roll the definition's label out", timeout=60)
        assert release["metadata"]["labels"]["apps.cozystack.io/application.name"] == "failover"
        assert lease_holder(node_cluster, "helm-agl") == new
    finally:
        kubectl(cluster, "patch", "applicationdefinitions.cozystack.io", "redis", "--type=merge",
                "-p", json.dumps({"spec": {"release": {"labels": {"agl-test/failover": None}}}}))
        rolled_out(node_cluster)


def evict(api: Api, pod: str) -> tuple[int, Any]:
    return api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}/eviction",
                       {"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": pod, "namespace": NAMESPACE}})


def test_eviction_respects_the_disruption_budget(node_cluster: Node) -> None:
    """kube-apiserver's Eviction API, on the chart's PodDisruptionBudget (maxUnavailable 1): one of two Ready pods
    may go, the second not while the first's replacement is not Ready."""
    chartinstall.install(node_cluster.cluster, node_cluster.image, BOTH, wait=WAIT)
    rolled_out(node_cluster)
    name = f"{RELEASE}-helm-agl"

    def budget_current() -> bool:
        pdb = get_json(node_cluster.cluster, "pdb", name, "-n", NAMESPACE)
        return bool(pdb["status"].get("observedGeneration") == pdb["metadata"]["generation"]
                    and pdb["status"].get("disruptionsAllowed") == 1 and pdb["status"].get("currentHealthy") == 2)

    wait_for(budget_current, "the disruption controller to allow one disruption", timeout=60)
    first, second = sorted(pod_names(node_cluster, "helm-agl"))
    api = Api(node_cluster.cluster)
    code, answer = evict(api, first)
    assert code == 201, answer
    code, answer = evict(api, second)
    print(f"second eviction: {code} {json.dumps(answer)}")
    assert code == 429, answer
    assert answer["reason"] == "TooManyRequests", answer
    assert answer["message"] == "Cannot evict pod as it would violate the pod's disruption budget.", answer
    causes = answer["details"]["causes"]
    assert {"reason": "DisruptionBudget",
            "message": f"The disruption budget {name} needs 1 healthy pods and has 1 currently"} in causes, causes
    assert second in pod_names(node_cluster, "helm-agl")
    rolled_out(node_cluster)
    wait_for(budget_current, "both pods Ready again under the budget", timeout=120)
    assert first not in pod_names(node_cluster, "helm-agl")
