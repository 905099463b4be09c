"""Two helm_agl replicas behind one APIService, one of them killed in the middle of a stream of creates, updates
and watches sent through kube-apiserver.

The replicas are two processes with the same flags and the same leader-election Lease. kube-apiserver reaches
them through :mod:`localcluster.spreader`, the local stand-in for kube-proxy (round robin over the replicas'
loopback ports, skipping one that refuses), because kube-apiserver refuses loopback Endpoints.

What a client may see while a replica dies, and what it should retry, is :data:`RETRYABLE` (client-go's rules:
429 and 5xx answers that come with ``Retry-After``, plus the aggregator's own 502/503/504 and a connection that
broke or timed out). Everything else is a failure of the test.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from localcluster import aggregation, services
from localcluster.cluster import Cluster, ClusterError, free_port
from localcluster.spreader import BackgroundSpreader

from tests.kube import Api, call_service, get_json, kubectl, load_fixture, metric_samples, service_metrics, wait_for

NS = "tenant-replicas"
LEASE_NS = services.NAMESPACE
LEASE = "helm-agl-reconciler"
GROUP, VERSION = "apps.cozystack.io", "v1alpha1"
APISERVICE = f"{VERSION}.{GROUP}"
KIND, PLURAL, DEFINITION, PREFIX = "HaCache", "hacaches", "ha-cache", "ha-cache-"
HR = "helmreleases.helm.toolkit.fluxcd.io"
#: The replicas drain as the chart's do (it sets 5 s): /readyz fails while they still serve, then they stop.
ELECTION = ("--leader-elect", "--leader-elect-namespace", LEASE_NS, "--shutdown-delay=2")
#: How long kopf waits for the tasks started after it before cancelling them (kopf's running.run_tasks).
KOPF_HUNG_TASKS_WAIT = 5.0
COLLECTION = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"

#: The stream: each writer creates its objects one by one and updates each a few times; a few watchers follow.
WRITERS, OBJECTS_PER_WRITER, UPDATES_PER_OBJECT, WATCHERS = 3, 8, 2, 3
#: Pause between one writer's operations, so that the stream outlasts the kill and the recovery (a replica
#: told to stop serves on for about 5 s while its reconciler stops).
PACE = 0.35
#: One operation is retried for at most this long (a kube client's retries are bounded too).
OP_DEADLINE = 40.0
#: Answers a kube client retries: 429 (Too Many Requests), the aggregator's 502/503/504 when it cannot reach a
#: replica or the reply broke off; 0 stands for no HTTP answer at all (refused, reset, timed out). A 500 is
#: retried only when it carries ``Retry-After``, as client-go does.
RETRYABLE = frozenset({0, 429, 502, 503, 504})


@dataclass(frozen=True)
class Answer:
    code: int  # 0: no HTTP answer
    body: Any
    retry_after: str | None
    at: float


def call(api: Api, method: str, path: str, body: dict[str, Any] | None = None,
         content_type: str = "application/json") -> Answer:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(api.cluster.server + path, data=data, method=method,
                                 headers={"Content-Type": content_type, "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20, context=api.ctx) as resp:
            return Answer(resp.status, json.loads(resp.read() or b"null"), None, time.monotonic())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            answer: Any = json.loads(raw)
        except ValueError:
            answer = raw.decode(errors="replace")
        return Answer(exc.code, answer, exc.headers.get("Retry-After"), time.monotonic())
    except (OSError, http.client.HTTPException) as exc:
        return Answer(0, repr(exc), None, time.monotonic())


def retryable(answer: Answer) -> bool:
    return answer.code in RETRYABLE or (answer.code == 500 and answer.retry_after is not None)


def already_exists(answer: Answer) -> bool:
    return answer.code == 409 and isinstance(answer.body, dict) and answer.body.get("reason") == "AlreadyExists"


@dataclass
class Operation:
    verb: str
    name: str
    attempts: list[Answer] = field(default_factory=list)
    #: The object the server answered with (None: failed, or a retried create that found its object).
    result: dict[str, Any] | None = None
    succeeded: bool = False


def perform(api: Api, op: Operation, method: str, path: str, body: dict[str, Any],
            content_type: str = "application/json") -> Operation:
    """Send until success, a non-retryable answer, or :data:`OP_DEADLINE`; a create retried after a retryable
    failure that finds its object (AlreadyExists) succeeded: the first attempt did write it."""
    deadline = time.monotonic() + OP_DEADLINE
    while time.monotonic() < deadline:
        answer = call(api, method, path, body, content_type)
        op.attempts.append(answer)
        if answer.code in (200, 201):
            op.result, op.succeeded = answer.body, True
            return op
        if op.verb == "create" and already_exists(answer) and len(op.attempts) > 1:
            op.succeeded = True
            return op
        if not retryable(answer):
            return op
        time.sleep(min(1.0, float(answer.retry_after or 0.2)))
    return op


def application(name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas}}


class Writer(threading.Thread):
    """Creates its objects and updates each (merge patch of ``spec.replicas``), recording every attempt."""

    def __init__(self, api: Api, tag: str, index: int) -> None:
        super().__init__(name=f"writer-{tag}{index}", daemon=True)
        self.api, self.tag, self.index = api, tag, index
        self.operations: list[Operation] = []
        #: What this client believes it wrote: name -> spec.replicas.
        self.believed: dict[str, int] = {}

    def run(self) -> None:
        for number in range(OBJECTS_PER_WRITER):
            name = f"{self.tag}{self.index}-{number}"
            op = perform(self.api, Operation("create", name), "POST", COLLECTION, application(name, 1))
            self.operations.append(op)
            if not op.succeeded:
                continue
            self.believed[name] = 1
            for replicas in range(2, 2 + UPDATES_PER_OBJECT):
                time.sleep(PACE)
                op = perform(self.api, Operation("update", name), "PATCH", f"{COLLECTION}/{name}",
                             {"spec": {"replicas": replicas}}, "application/merge-patch+json")
                self.operations.append(op)
                if op.succeeded:
                    self.believed[name] = replicas
            time.sleep(PACE)


@dataclass(frozen=True)
class Seen:
    type: str
    name: str
    resource_version: int
    replicas: Any


class Watcher(threading.Thread):
    """Watches the namespace's kind from ``since``; when its connection ends it watches again from the last
    resourceVersion it saw, until it sees the object named ``until`` added."""

    def __init__(self, api: Api, since: str, until: str, index: int) -> None:
        super().__init__(name=f"watcher-{index}", daemon=True)
        self.api, self.rv, self.until = api, since, until
        self.events: list[Seen] = []
        self.errors: list[Any] = []  # ERROR events (410 Gone would be one): a gap, never expected
        self.connected = threading.Event()
        #: (monotonic time, resourceVersion, how the previous watch ended) of each watch after the first.
        self.resumed: list[tuple[float, str, str]] = []
        self.done = False

    def run(self) -> None:
        deadline = time.monotonic() + 150
        first, ended = True, ""
        while not self.done and not self.errors and time.monotonic() < deadline:
            if not first:
                self.resumed.append((time.monotonic(), self.rv, ended))
                time.sleep(0.2)
            first = False
            req = urllib.request.Request(
                f"{self.api.cluster.server}{COLLECTION}?watch=1&allowWatchBookmarks=true&resourceVersion={self.rv}",
                headers={"Accept": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60, context=self.api.ctx) as resp:
                    self.connected.set()
                    for line in resp:
                        if self._take(json.loads(line)):
                            break
                ended = "the stream ended"
            except (OSError, http.client.HTTPException, ValueError) as exc:
                ended = repr(exc)[:60]  # a broken watch (or a refused re-watch): watch again from self.rv

    def _take(self, event: dict[str, Any]) -> bool:
        """Record one event; True when the watch should end."""
        if event["type"] == "ERROR":
            self.errors.append(event["object"])
            return True
        meta = event["object"]["metadata"]
        self.rv = meta["resourceVersion"]
        if event["type"] == "BOOKMARK":
            return False
        self.events.append(Seen(event["type"], meta["name"], int(meta["resourceVersion"]),
                                (event["object"].get("spec") or {}).get("replicas")))
        if event["type"] == "ADDED" and meta["name"] == self.until:
            self.done = True
        return self.done


class AvailabilityProbe(threading.Thread):
    """Reads the APIService's Available condition every 0.25 s and keeps when it was not True."""

    def __init__(self, api: Api) -> None:
        super().__init__(name="apiservice-probe", daemon=True)
        self.api = api
        self.stop = threading.Event()
        self.not_available: list[tuple[float, str]] = []

    def run(self) -> None:
        deadline = time.monotonic() + 180
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                answer = call(self.api, "GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
            except ClusterError:  # the session ended under a failed test
                return
            if answer.code == 200:
                for cond in answer.body.get("status", {}).get("conditions", []):
                    if cond["type"] == "Available" and cond["status"] != "True":
                        self.not_available.append((answer.at, f"{cond.get('reason')}: {cond.get('message')}"))
            self.stop.wait(0.25)


@dataclass
class Replica:
    port: int
    process: Any  # subprocess.Popen[bytes]

    @property
    def identity(self) -> str:
        return f"{socket.gethostname()}_{self.process.pid}"


@dataclass
class Pair:
    """The two replicas and the spreader the APIService points at."""

    cluster: Cluster
    spreader: BackgroundSpreader
    replicas: list[Replica]

    def relaunch_dead(self) -> None:
        """Start a killed replica again on its port (the spreader's backend list stays the same)."""
        for index, replica in enumerate(self.replicas):
            if replica.process.poll() is not None:
                process = services.launch(self.cluster, services.HELM_AGL, port=replica.port, extra_args=ELECTION,
                                          log_file=self.cluster.logs_dir / f"helm-agl-replica-{index}.log")
                self.replicas[index] = Replica(replica.port, process)
        wait_for(lambda: all(ready(r.port) for r in self.replicas), "both replicas ready", timeout=60)

    def by_identity(self, identity: str) -> Replica:
        return next(r for r in self.replicas if r.identity == identity)


def wait_exited(replica: Replica, cluster: Cluster, index: int, timeout: float) -> str:
    """Wait for a signalled replica to exit and return its log; if it does not exit, fail with the log's end
    (its shutdown steps, and the tasks a slow stop waits for)."""
    log_file = cluster.logs_dir / f"helm-agl-replica-{index}.log"
    try:
        replica.process.wait(timeout)
    except subprocess.TimeoutExpired:
        tail = log_file.read_text().splitlines()[-40:]
        pytest.fail(f"replica {replica.identity} still running {timeout}s after the signal; its log ends:\n"
                    + "\n".join(tail))
    return log_file.read_text()


def readiness(port: int) -> int | None:
    """A replica's ``/readyz`` code, None once it no longer listens."""
    try:
        return call_service(port, "/readyz")[0]
    except OSError:
        return None


def ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def ask_directly(cluster: Cluster, port: int, query: str = "") -> tuple[int, str]:
    """GET the collection from one replica (not through kube-apiserver), as kube-apiserver's front proxy."""
    front_proxy = (cluster.pki_dir / "front-proxy-client.crt", cluster.pki_dir / "front-proxy-client.key")
    code, text = call_service(port, COLLECTION + query, cert=front_proxy,
                              headers={"X-Remote-User": "root", "X-Remote-Group": "system:masters"})
    return code, text if isinstance(text, str) else json.dumps(text)


def common_start(cluster: Cluster, replicas: list[Replica]) -> int | None:
    """A list resourceVersion every replica accepts a watch from (its cache of the kind is synced by then), or
    None: a replica that just started lists from kube-apiserver until its cache syncs, and its cache keeps
    events only from there on."""
    listed = [ask_directly(cluster, r.port) for r in replicas]
    if any(code != 200 for code, _text in listed):
        return None
    rv = max(int(json.loads(text)["metadata"]["resourceVersion"]) for _code, text in listed)
    for replica in replicas:
        code, text = ask_directly(cluster, replica.port, f"?watch=1&timeoutSeconds=1&resourceVersion={rv}")
        if code != 200 or '"ERROR"' in text:
            return None
    return rv


def holder(cluster: Cluster) -> str | None:
    result = kubectl(cluster, "get", "lease", LEASE, "-n", LEASE_NS, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    value = json.loads(result.stdout)["spec"].get("holderIdentity")
    return str(value) if value else None


def definition(chart: str) -> dict[str, Any]:
    defn = load_fixture("redis.yaml")
    defn["metadata"]["name"] = DEFINITION
    defn["spec"]["application"].update(kind=KIND, plural=PLURAL, singular="hacache")
    defn["spec"]["release"]["prefix"] = PREFIX
    defn["spec"]["release"]["chartRef"] = {"kind": "HelmChart", "name": chart, "namespace": "cozy-public"}
    return defn


@pytest.fixture(scope="module")
def pair(control_plane: Cluster, helm_service: services.Running) -> Iterator[Pair]:
    """Two helm_agl processes electing a leader, behind a spreader the APIService points at.

    Asks for the session's ``helm_service`` so that the one given back at the end is stopped with the session.
    """
    cluster = control_plane
    for ns in (NS, LEASE_NS):
        kubectl(cluster, "create", "namespace", ns, check=False)
    services.stop(cluster, services.HELM_AGL)  # the session's helm_agl runs without election
    ports = [free_port(), free_port()]
    replicas = [Replica(port, services.launch(cluster, services.HELM_AGL, port=port, extra_args=ELECTION,
                                              log_file=cluster.logs_dir / f"helm-agl-replica-{index}.log"))
                for index, port in enumerate(ports)]
    ca, _cert = aggregation.serving_cert(cluster, services.HELM_AGL.name, services.NAMESPACE)
    try:
        with BackgroundSpreader(ports) as spreader:
            wait_for(lambda: all(ready(r.port) for r in replicas), "both replicas listening", timeout=60)
            aggregation.register(cluster, group=GROUP, version=VERSION, service=services.HELM_AGL.name,
                                 namespace=services.NAMESPACE, port=spreader.port, ca_bundle=ca.cert)
            aggregation.wait_available(cluster, GROUP, VERSION)
            kubectl(cluster, "apply", "-f", "-", input=json.dumps(definition("redis-v1")))
            wait_for(lambda: call(Api(cluster), "GET", COLLECTION).code == 200, f"{PLURAL} served", timeout=60)
            yield Pair(cluster, spreader, replicas)
    finally:
        for replica in replicas:
            if replica.process.poll() is None:
                os.killpg(replica.process.pid, signal.SIGTERM)
                replica.process.wait(15)
        kubectl(cluster, "delete", "applicationdefinition", DEFINITION, "--ignore-not-found", "--wait=false",
                check=False)
        services.start(cluster, services.HELM_AGL)  # registers the APIService at the one service again


def writes_served(port: int, cluster: Cluster) -> float:
    """Creates and patches of our kind a replica has answered, by its own /metrics."""
    samples = metric_samples(service_metrics(cluster, port), "apiserver_request_total")
    return sum(value for labels, value in samples
               if labels.get("resource") == PLURAL and labels.get("verb", "").lower() in {"create", "patch"})


def first(items: list[float]) -> float | None:
    return min(items) if items else None


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_replica_dies_in_the_middle_of_a_stream(pair: Pair, sig: signal.Signals) -> None:
    cluster, api = pair.cluster, Api(pair.cluster)
    pair.relaunch_dead()
    tag = "k" if sig == signal.SIGKILL else "t"
    leader = wait_for(lambda: (h := holder(cluster)) and h in [r.identity for r in pair.replicas] and h,
                      "a Lease holder among the replicas", timeout=40)
    victim = pair.by_identity(leader)
    survivor = next(r for r in pair.replicas if r is not victim)
    # Each replica's cache of the kind keeps events from the moment it listed; a watch from an older
    # resourceVersion is answered 410 Gone (docs/operating.md, Availability). Start from an RV both replicas
    # have reached, so that a 410 below means a resume the survivor could not serve.
    since = str(wait_for(lambda: common_start(cluster, pair.replicas), "an RV both replicas can watch from"))
    sentinel = f"end-{tag}"

    # Every watch and write through the victim until the kill, so that the kill breaks each watch and the
    # writes in flight, and the survivor must take them all (kube-apiserver keeps its connections open).
    pair.spreader.route_only(victim.port)
    served = {r.port: writes_served(r.port, cluster) for r in pair.replicas}
    watchers = [Watcher(api, since, sentinel, i) for i in range(WATCHERS)]
    for watcher in watchers:
        watcher.start()
        assert watcher.connected.wait(20), "a watch did not start"

    probe = AvailabilityProbe(api)
    probe.start()
    writers = [Writer(api, tag, i) for i in range(WRITERS)]
    for writer in writers:
        writer.start()
    total = WRITERS * OBJECTS_PER_WRITER * (1 + UPDATES_PER_OBJECT)

    def done() -> int:
        return sum(len(w.operations) for w in writers)

    wait_for(lambda: done() >= total // 3, "a third of the stream done", timeout=30, interval=0.05)
    assert done() < total * 2 // 3, "the stream ended too early for the kill to fall in its middle"
    assert writes_served(victim.port, cluster) > served[victim.port]
    pair.spreader.route_all()
    os.killpg(victim.process.pid, sig)
    killed_at = time.monotonic()
    if sig == signal.SIGTERM:  # from the signal on, a stopping replica says it is not ready while it drains
        wait_for(lambda: readiness(victim.port) == 503, "the stopping replica not ready", timeout=4, interval=0.1)
    for writer in writers:
        writer.join(OP_DEADLINE * 3)
    victim_log = wait_exited(victim, cluster, pair.replicas.index(victim), timeout=20)
    if sig == signal.SIGTERM:
        assert '"msg": "stop requested", "signal": "SIGTERM"' in victim_log
        assert '"msg": "shut down"' in victim_log
        lines = victim_log.splitlines()  # the log file keeps earlier runs of this replica: read from its last stop
        last_stop = max(i for i, line in enumerate(lines) if '"msg": "stop requested"' in line)
        stop_lines = [json.loads(line) for line in lines[last_stop:] if line.startswith("{")]
        steps = [line["step"] for line in stop_lines if line.get("msg") == "shutdown step done"]
        assert steps == ["reconciler told to stop", "serving", "background tasks", "front-proxy watch", "kinds",
                         "lease release", "events"], steps
        # The service ended its own tasks itself: kopf found none of them left to wait its 5 s for.
        stopped = [line["seconds"] for line in stop_lines if line.get("msg") == "reconciler stopped"]
        assert len(stopped) == 1 and stopped[0] < KOPF_HUNG_TASKS_WAIT, stop_lines

    # Every request succeeded once, or failed with what a client retries and then succeeded.
    operations = [op for w in writers for op in w.operations]
    assert len(operations) == total
    codes = Counter(a.code for op in operations for a in op.attempts)
    failures = [a for op in operations for a in op.attempts if a.code not in (200, 201)]
    for op in operations:
        *retried, last = op.attempts
        assert op.succeeded, (op.verb, op.name, [(a.code, a.body) for a in op.attempts])
        assert all(retryable(a) for a in retried), (op.verb, op.name, [(a.code, a.body) for a in op.attempts])
        assert last.code in (200, 201) or already_exists(last)


    # The survivor takes over: it holds the Lease and rolls out a definition change made after the kill.
    chart = f"redis-{tag}"
    kubectl(cluster, "apply", "-f", "-", input=json.dumps(definition(chart)))
    wait_for(lambda: holder(cluster) == survivor.identity, "the survivor holds the Lease", timeout=40)
    took_over = time.monotonic() - killed_at

    def rolled_out() -> bool:
        items = get_json(cluster, HR, "-n", NS)["items"]
        return bool(items) and all(i["spec"]["chartRef"]["name"] == chart for i in items)

    wait_for(rolled_out, f"the survivor rolls out {chart}", timeout=40)
    rolled = time.monotonic() - killed_at

    # Nothing lost or duplicated: the clients' beliefs, the aggregated list and the backing HelmReleases agree.
    believed = {name: replicas for w in writers for name, replicas in w.believed.items()}
    assert len(believed) == WRITERS * OBJECTS_PER_WRITER
    listed = wait_for(lambda: (a := call(api, "GET", COLLECTION)).code == 200 and a.body, "the list", timeout=20)
    ours = {i["metadata"]["name"]: i for i in listed["items"] if i["metadata"]["name"].startswith(tag)}
    assert {n: i["spec"]["replicas"] for n, i in ours.items()} == believed
    releases = {i["metadata"]["name"]: i for i in get_json(cluster, HR, "-n", NS)["items"]}
    assert {n: i["spec"]["values"]["replicas"] for n, i in releases.items() if n.startswith(PREFIX + tag)} == {
        PREFIX + n: r for n, r in believed.items()}

    # Watches resumed from their resourceVersion: each saw every write and the final state, each change once.
    assert call(api, "POST", COLLECTION, application(sentinel, 1)).code == 201
    # Every replica serves writes: the victim before the kill, the survivor at least since the victim is gone.
    assert writes_served(survivor.port, cluster) > served[survivor.port]
    for watcher in watchers:
        watcher.join(30)
    written = {(op.name, int(op.result["metadata"]["resourceVersion"])) for op in operations if op.result}
    final = {(n, int(i["metadata"]["resourceVersion"])) for n, i in ours.items()}
    for watcher in watchers:
        assert watcher.done and not watcher.errors, (watcher.done, [(e.get("code"), e.get("message"))
                                                                    for e in watcher.errors])
        assert any(at > killed_at for at, _rv, _why in watcher.resumed), "the kill did not break this watch"
        pairs = [(e.name, e.resource_version) for e in watcher.events]
        assert len(pairs) == len(set(pairs)), Counter(p for p in pairs if pairs.count(p) > 1)
        for name in believed:
            versions = [rv for n, rv in pairs if n == name]
            assert versions == sorted(versions), (name, versions)
        assert written <= set(pairs), sorted(written - set(pairs))
        assert final <= set(pairs), sorted(final - set(pairs))
        latest = {e.name: e.replicas for e in watcher.events if e.name in believed}
        assert latest == believed

    probe.stop.set()
    probe.join(5)
    failed_at = [a.at for a in failures if a.at >= killed_at]
    first_failure = first(failed_at)
    recovered = first([a.at for op in operations for a in op.attempts
                       if a.code in (200, 201) and first_failure is not None and a.at > first_failure])
    unavailable = (recovered - first_failure) if first_failure is not None and recovered is not None else 0.0
    not_available = [at for at, _ in probe.not_available if at >= killed_at]
    resumed = [at - killed_at for w in watchers for at, _rv, _why in w.resumed if at > killed_at]
    print(f"\n[{sig.name}] {len(operations)} writes by {WRITERS} clients, {WATCHERS} watchers; answers {dict(codes)}; "
          f"retried attempts {len(failures)}; unavailable for {unavailable:.2f} s (first failed request to "
          f"first success), last failure {max(failed_at, default=killed_at) - killed_at:.2f} s after the kill; "
          f"watches re-established {min(resumed, default=0):.2f}-{max(resumed, default=0):.2f} s after; "
          f"APIService not Available for "
          f"{(max(not_available) - min(not_available)) if not_available else 0.0:.2f} s "
          f"({len(not_available)} probes); Lease taken over {took_over:.1f} s after, change rolled out "
          f"{rolled:.1f} s after; relayed connections {pair.spreader.spreader.relayed}")
    for watcher in watchers:
        print(f"  {watcher.name}: {len(watcher.events)} events, re-watched "
              + "; ".join(f"{at - killed_at:+.2f} s from RV {rv} ({why})" for at, rv, why in watcher.resumed))
