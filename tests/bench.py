"""Benchmarks of SPEC §8 for both services, reported as ratios against the direct operation in the same run.

``nox -s bench [-- --stacks helm_agl --rounds 3]`` starts, for each service in turn, a new cluster named
``bench``, the service and one sample kind, and measures:

- B1 create / get / list of 1000 Applications through aggregation vs the same on the backing objects directly;
- B2 rolling a definition change out to 1000 instances vs a raw patch loop with the same concurrency (8);
- B3 the service's resident memory at 1000, 5000 and 10000 Applications;
- B4 watch latency, backing change -> event, through aggregation vs a direct watch open at the same time (p50/p99);
- the scale curve: get and list cost and RSS at 100 / 1000 / 5000 / 10000 Applications;
- the floor under B1's get and create: the direct operation through :mod:`tests.relay`, a server that only relays
  it (the two extra hops alone), so that what a service adds above it is its own work; and, from the service's
  own ``/metrics`` around each round, how its get and create split: outside its handler, its own steps, and its
  kube requests (:meth:`Bench.split`).

Every ratio is computed per round; in B1 the sides of a comparison (through the service, through the relay,
directly) take turns request by request (:func:`interleaved`), elsewhere they alternate within the round, so that
a change of machine load hits every side; a figure is the median of the rounds' ratios, reported with their
range.  These are measurements, never assertions.  ``--out DIR`` writes ``benchmarks.json``, ``benchmarks.md`` and
``benchmarks-scale.png`` there; ``--profile DIR`` records a py-spy flame graph of each service during B1.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import platform
import re
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from localcluster import aggregation, crds, services
from localcluster.cluster import Cluster

from shared.bodies import collector_paused
from shared.service.memory import freeze_startup_objects
from tests import relay as relay_server
from tests.kube import metric_samples, service_metrics

SAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "samples" / "definitions"
DOCS = Path(__file__).resolve().parents[1] / "docs"
B1_COUNT = 1000
SCALE_POINTS = (100, 1000, 5000, 10000)
#: Lists of this many Applications and more are also timed from a server that holds the answer in memory.
LIST_FLOOR_FROM = 10000
CONCURRENCY = 8
#: B4's rounds (at most). A round pairs the two watches change by change, so its ratio moves little with the
#: machine's load: in the complete runs of rounds 12-20 of the performance notes every round's p99 ratio was within
#: 0.87-1.18 and the figure (the median of five) within 1.01-1.08. Five rounds of 400 changes, spaced 20 ms apart,
#: were a fifth of the spec part (65-75 s per service), which must stay within 10 minutes.
B4_ROUNDS = 3
#: Annotation key a backing object carries for the Application annotation ``bench-marker``.
MARKER = "apps.cozystack.io-bench-marker"
#: The seed Application's name where its backing object's spec says it (a whole word, as the translations write it).
SEED_NAME = re.compile(r"(?<![A-Za-z0-9])seed(?![A-Za-z0-9])")
KIND_LABEL = "apps.cozystack.io/application.kind"
RELAY = "tests.relay (a server that only relays it: the two extra hops alone)"


@dataclass(frozen=True)
class Stack:
    """What the benchmark needs to know about one service and the sample kind it serves."""

    service: services.Service
    definition: str
    apps: str
    plural: str
    kind: str
    backing: str
    backing_plural: str
    prefix: str
    spec: dict[str, Any]
    #: Definition change rolled out in B2: (path in the definition, path in the backing object, new value).
    rollout: tuple[tuple[str, ...], tuple[str, ...], str]


STACKS = {
    "helm_agl": Stack(services.HELM_AGL, "redis.yaml", "/apis/apps.cozystack.io/v1alpha1", "redises", "Redis",
                      "/apis/helm.toolkit.fluxcd.io/v2", "helmreleases", "redis-", {"replicas": 2},
                      (("spec", "release", "chartRef", "name"), ("spec", "chartRef", "name"), "redis-bench-v2")),
    "tofu_agl": Stack(services.TOFU_AGL, "vpc.yaml", "/apis/tofu.apps.cozystack.io/v1alpha1", "vpcs", "VPC",
                      "/apis/infra.contrib.fluxcd.io/v1alpha2", "terraforms", "vpc-", {"region": "eu-west-1"},
                      (("spec", "terraform", "path"), ("spec", "path"), "./modules/vpc-bench-v2")),
}


class Client:
    """One keep-alive HTTPS connection to kube-apiserver as admin (same cost for both sides)."""

    def __init__(self, cluster: Cluster) -> None:
        self.ctx = ssl.create_default_context(cafile=str(cluster.pki_dir / "ca.crt"))
        self.ctx.load_cert_chain(str(cluster.pki_dir / "admin.crt"), str(cluster.pki_dir / "admin.key"))
        self.port = int(cluster.server.rsplit(":", 1)[1])
        self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=120)

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        raw = self.fetch(method, path, body, content_type)
        return json.loads(raw) if raw else None

    def fetch(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> bytes:
        """The answer's body as received, not decoded."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        try:
            self.conn.request(method, path, body=data, headers=headers)
            resp = self.conn.getresponse()
        except (http.client.RemoteDisconnected, ssl.SSLEOFError, BrokenPipeError, ConnectionResetError):
            # kube-apiserver closed the kept-alive connection while it was idle (a long bulk step on other
            # connections): the request never reached it, so it is sent again on a new connection.
            self.conn.close()
            self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=120)
            self.conn.request(method, path, body=data, headers=headers)
            resp = self.conn.getresponse()
        raw = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {raw[:300]!r}")
        return raw

    def stream(self, path: str) -> http.client.HTTPResponse:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=120)
        conn.request("GET", path, headers={"Accept": "application/json"})
        return conn.getresponse()


class Pool:
    """``CONCURRENCY`` threads, each with its own keep-alive connection, for bulk work and raw patch loops."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.local = threading.local()

    def client(self) -> Client:
        if not hasattr(self.local, "client"):
            self.local.client = Client(self.cluster)
        client: Client = self.local.client
        return client

    def run(self, fn: Callable[[Client, Any], Any], items: list[Any]) -> None:
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            list(pool.map(lambda item: fn(self.client(), item), items))


@dataclass
class Figure:
    """One benchmark: per-round (aggregated, direct) seconds; the figure is the median ratio."""

    name: str
    what: str
    rounds: list[tuple[float, float]] = field(default_factory=list)
    #: Per round, the median single request of each side, when the round timed each request (:func:`interleaved`).
    medians: list[tuple[float, float]] = field(default_factory=list)

    def add(self, aggregated: list[float], direct: list[float]) -> None:
        """One round from the seconds of each request of both sides: their means and their medians."""
        self.rounds.append((statistics.fmean(aggregated), statistics.fmean(direct)))
        self.medians.append((statistics.median(aggregated), statistics.median(direct)))

    def ratios(self) -> list[float]:
        return [a / d for a, d in self.rounds]

    def summary(self) -> dict[str, Any]:
        ratios = self.ratios()
        out = {"ratio": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
               "max": round(max(ratios), 3), "rounds": len(ratios),
               "aggregated_ms": round(statistics.median(a for a, _ in self.rounds) * 1000, 2),
               "direct_ms": round(statistics.median(d for _, d in self.rounds) * 1000, 2), "what": self.what}
        if self.medians:
            out |= {"aggregated_p50_ms": round(statistics.median(a for a, _ in self.medians) * 1000, 2),
                    "direct_p50_ms": round(statistics.median(d for _, d in self.medians) * 1000, 2)}
        return out


@dataclass(frozen=True)
class Clock:
    """Totals from the service's ``/metrics``: ``answering`` by (verb, "seconds" | "count"), and ``kube``, the
    seconds of its requests for the backing resource."""

    answering: dict[tuple[str, str], float]
    kube: float


@dataclass(frozen=True)
class Inside:
    """One round of an operation through the service, mean seconds per operation: at the caller (``wall``), in
    the service's handler (``answering``: from its middleware in to the answer out) and, within that, waiting for
    kube-apiserver on the backing resource (``kube``)."""

    wall: float
    answering: float
    kube: float


def timed(fn: Callable[[], Any], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def interleaved(sides: list[Callable[[int], Any]], repeat: int) -> list[list[float]]:
    """The seconds of each of ``repeat`` requests of each side (``side(i)`` sends the i-th), the sides taking
    turns request by request and the order of a turn rotating, so that whatever else the machine does meanwhile
    (another process, kube-apiserver's garbage collection, a slower minute) falls on every side alike.  Timed in
    blocks, one side after the other, the same code measured 0.0-1.1 ms above the relay from round to round;
    interleaved, 0.5-0.8 ms (docs/design/perf/README.md, round 16)."""
    times: list[list[float]] = [[] for _ in sides]
    for i in range(repeat):
        for turn in range(len(sides)):
            side = (i + turn) % len(sides)
            start = time.perf_counter()
            sides[side](i)
            times[side].append(time.perf_counter() - start)
    return times


@contextmanager
def phase(name: str, spent: dict[str, float]) -> Iterator[None]:
    """Time one step of a part into ``spent`` and print it: where the part's minutes go (SPEC §8 asks ≤ 10 for it)."""
    start = time.monotonic()
    try:
        yield
    finally:
        seconds = round(time.monotonic() - start, 1)
        spent[name] = round(spent.get(name, 0.0) + seconds, 1)
        print(f"  [{name}: {seconds:.1f} s]", flush=True)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> dict[str, float]:
    """CPU seconds of the whole machine so far by state (``/proc/stat``): ``steal`` is what the hypervisor gave
    other guests while this one wanted to run."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    tick = os.sysconf("SC_CLK_TCK")
    return {name: int(value) / tick for name, value in zip(("user", "nice", "system", "idle", "iowait", "irq",
                                                             "softirq", "steal"), fields, strict=False)}


def dig(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


class Bench:
    """The benchmarks of one service, on a cluster where the service runs."""

    def __init__(self, cluster: Cluster, stack: Stack, pid: int, rounds: int, count: int = B1_COUNT,
                 port: int | None = None) -> None:
        self.cluster, self.stack, self.pid, self.rounds, self.count = cluster, stack, pid, rounds, count
        #: Where the service's own ``/metrics`` are read (:meth:`inside`); None: not read.
        self.port = port
        #: Per B1 operation and round, how the service's answer splits (:meth:`inside`).
        self.inside: dict[str, list[Inside]] = {"b1_get": [], "b1_create": []}
        self.client = Client(cluster)
        self.pool = Pool(cluster)
        self.figures: dict[str, Figure] = {}
        self.scale: list[dict[str, Any]] = []
        self.rss: dict[str, float] = {}
        self.template: dict[str, Any] = {}
        #: CPU seconds the service used during each B2 rollout.
        self.b2_service_cpu_s: list[float] = []

    def app_path(self, namespace: str | None, name: str = "") -> str:
        base = f"{self.stack.apps}/namespaces/{namespace}/{self.stack.plural}" if namespace else \
            f"{self.stack.apps}/{self.stack.plural}"
        return f"{base}/{name}" if name else base

    def backing_path(self, namespace: str | None, name: str = "") -> str:
        s = self.stack
        base = f"{s.backing}/namespaces/{namespace}/{s.backing_plural}" if namespace else \
            f"{s.backing}/{s.backing_plural}"
        return f"{base}/{name}" if name else base

    def relay_path(self, namespace: str, name: str = "") -> str:
        """The backing object's path through :mod:`tests.relay` (the two extra hops and nothing else)."""
        base = f"/apis/{relay_server.GROUP}/{relay_server.VERSION}/namespaces/{namespace}/{self.stack.backing_plural}"
        return f"{base}/{name}" if name else base

    def definition_path(self, defn: dict[str, Any]) -> str:
        plural = defn["kind"].lower() + "s"  # ApplicationDefinition, TofuApplicationDefinition
        return f"/apis/{defn['apiVersion']}/{plural}/{defn['metadata']['name']}"

    def app(self, namespace: str, name: str) -> dict[str, Any]:
        s = self.stack
        return {"apiVersion": s.apps.removeprefix("/apis/"), "kind": s.kind,
                "metadata": {"name": name, "namespace": namespace}, "spec": s.spec}

    def service_clock(self) -> Clock:
        """The service's own totals so far: seconds spent answering each verb on the kind, and on its kube requests
        for the backing resource (``apiserver_request_duration_seconds``, ``agl_kube_request_duration_seconds``)."""
        assert self.port is not None
        text = service_metrics(self.cluster, self.port)
        answering = {(labels["verb"], field): value for suffix, field in (("_sum", "seconds"), ("_count", "count"))
                     for labels, value in metric_samples(text, "apiserver_request_duration_seconds" + suffix)
                     if labels["resource"] == self.stack.plural}
        kube = sum(value for labels, value in metric_samples(text, "agl_kube_request_duration_seconds_sum")
                   if labels["resource"] == self.stack.backing_plural)
        return Clock(answering, kube)

    def interleaved_inside(self, key: str, verb: str, sides: list[Callable[[int], Any]],
                           repeat: int) -> list[list[float]]:
        """:func:`interleaved`, the first side going through the service (the others must not: they go to
        kube-apiserver or the relay), and when the service's metrics are read, how its answers split (into
        ``inside``)."""
        if self.port is None:
            return interleaved(sides, repeat)
        before = self.service_clock()
        times = interleaved(sides, repeat)
        after = self.service_clock()
        count = after.answering.get((verb, "count"), 0) - before.answering.get((verb, "count"), 0)
        answering = after.answering.get((verb, "seconds"), 0) - before.answering.get((verb, "seconds"), 0)
        if count == repeat:  # else something else was answered meanwhile: the split would be wrong
            self.inside[key].append(Inside(statistics.fmean(times[0]), answering / count,
                                           (after.kube - before.kube) / count))
        return times

    def figure(self, key: str, what: str) -> Figure:
        return self.figures.setdefault(key, Figure(key, what))

    # ------------------------------------------------------------------ B1
    def b1(self) -> None:
        s, per_round = self.stack, self.count // self.rounds
        self.b1_count = per_round * self.rounds
        create = self.figure("b1_create", f"one create, mean of {per_round} per round, interleaved with the "
                                          "relayed and the direct ones")
        relay_create = self.figure("relay_create", f"the direct create through {RELAY}, vs directly; mean of "
                                                   f"{per_round} per round")
        strict = "?fieldValidation=Strict"
        client = self.client
        for r in range(self.rounds):
            names = [f"b1-{r}-{i}" for i in range(per_round)]
            through, relay, kube = self.interleaved_inside("b1_create", "create", [
                post_each(client, self.app_path("bench"), [self.app("bench", n) for n in names]),
                post_each(client, self.relay_path("bench") + strict,
                          [self.direct_body(f"relay-{n}", {"bench": "relay"}) for n in names]),
                post_each(client, self.backing_path("bench") + strict,
                          [self.direct_body(f"direct-{n}", {"bench": "direct"}) for n in names])], per_round)
            create.add(through, kube)
            relay_create.add(relay, kube)
        first = f"b1-0-{0}"
        get = self.figure("b1_get", "one get of the same object, mean of 200 per round, interleaved with the "
                                    "relayed and the direct ones")
        list_ = self.figure("b1_list_1000", "one list of the namespace's 1000 objects, mean of 3 per round")
        cached = self.figure("b1_list_1000_rv0", "the same list with resourceVersion=0 (both sides may answer "
                                                 "from their watch cache), mean of 3 per round")
        hop = self.figure("aggregation_hop", "what the two extra hops alone cost: a request the service answers "
                                             "from memory (its discovery document) through kube-apiserver, vs one "
                                             "kube-apiserver answers itself; mean of 200 per round")
        relay_get = self.figure("relay_get", f"the direct get through {RELAY}, vs directly; mean of 200 per round")
        cached_get = self.figure("b1_get_rv0", "one get with resourceVersion=0 (the service answers from its cache, as "
                                               "kube-apiserver from its watch cache) vs a direct consistent get; "
                                               "mean of 200 per round")
        selector = f"?labelSelector={KIND_LABEL.replace('/', '%2F')}%3D{s.kind}"

        def get_of(path: str) -> Callable[[int], Any]:
            return lambda _i: client.call("GET", path)

        app, backing = self.app_path("bench", first), self.backing_path("bench", s.prefix + first)
        for _ in range(self.rounds):
            hop.add(*interleaved([get_of(s.apps), get_of(s.backing)], 200))
            through, relay, kube = self.interleaved_inside(
                "b1_get", "get", [get_of(app), get_of(self.relay_path("bench", s.prefix + first)), get_of(backing)],
                200)
            get.add(through, kube)
            relay_get.add(relay, kube)
            cached_get.add(*interleaved([get_of(app + "?resourceVersion=0"), get_of(backing)], 200))
            list_.add(*interleaved([get_of(self.app_path("bench")), get_of(self.backing_path("bench") + selector)], 3))
            cached.add(*interleaved([get_of(self.app_path("bench") + "?resourceVersion=0"),
                                     get_of(self.backing_path("bench") + selector + "&resourceVersion=0")], 3))

    def direct_body(self, name: str, labels: dict[str, str], namespace: str = "bench",
                    app_name: str | None = None) -> dict[str, Any]:
        """The seed's backing object under another name; with ``app_name``, as the service would have written it for
        that Application: where the seed's spec names the seed (tofu_agl's state Secret suffix and outputs Secret),
        it names ``app_name``. Otherwise the definition's start-up rollout round would find every such object out
        of date and patch them all, inside the start-up being timed."""
        t = self.template
        spec = t["spec"] if app_name is None else json.loads(SEED_NAME.sub(app_name, json.dumps(t["spec"])))
        return {"apiVersion": t["apiVersion"], "kind": t["kind"],
                "metadata": {"name": name, "namespace": namespace, "labels": labels,
                             "annotations": t["metadata"].get("annotations") or {}},
                "spec": spec}

    def floors(self) -> dict[str, dict[str, float]]:
        """Per B1 operation, what the two extra hops alone make of it, round by round.

        ``floor_ratio``: the direct operation through :mod:`tests.relay`, a server that does nothing but its
        one backing call, vs directly; ``own_ms``: what the service adds above the relay at the median request of
        each round, the three sides interleaved (its own work: the
        caller's authentication and authorization, admission, validation, translation, projection, the
        Event).  ``proxied_floor_ratio``: the direct operation plus one request the service answers from
        memory (``aggregation_hop``), i.e. the first hop only, without the relay's second TLS connection."""
        hops = [proxied for proxied, _ in self.figures["aggregation_hop"].rounds]
        out: dict[str, dict[str, float]] = {}
        # Not for lists: their answers are 1000 objects through two proxies, not one request's hops.
        for key in ("b1_get", "b1_create"):
            through, relay = self.figures[key], self.figures[key.replace("b1_", "relay_")]
            relayed = [r for r, _ in relay.rounds]
            paired = list(zip(through.rounds, relayed, hops, strict=True))
            # Own: the median request through the service less the median relayed one of the same round (the
            # goal is stated at the median); the difference of the rounds' means is kept beside it.
            own = [a - r for (a, _), (r, _) in zip(through.medians, relay.medians, strict=True)]
            out[key] = {"floor_ratio": round(statistics.median(r / d for (_, d), r, _ in paired), 3),
                        "own_ms": round(statistics.median(own) * 1000, 2),
                        "own_of_means_ms": round(statistics.median(a - r for (a, _), r, _ in paired) * 1000, 2),
                        "proxied_floor_ratio": round(statistics.median((d + h) / d for (_, d), _, h in paired), 3)}
            out[key] |= self.split(key)
        return out

    def split(self, key: str) -> dict[str, float]:
        """Where one operation through the service went, from its own metrics (medians of the rounds, ms): outside
        its handler (``outside_ms``: kube-apiserver's proxying both ways and the HTTP/TLS of the first hop), its own
        steps (``steps_ms``: the handler's time less its backing kube calls) and those calls (``kube_ms``), and
        what they took over the same operation done directly (``kube_over_direct_ms``: the second hop, and
        kube-apiserver busier with the service's background work, such as its informer's watch)."""
        rounds = self.inside[key]
        if not rounds:
            return {}
        direct = statistics.median(d for _, d in self.figures[key].rounds)

        def ms(values: Iterator[float]) -> float:
            return round(statistics.median(values) * 1000, 2)

        kube = ms(r.kube for r in rounds)
        return {"outside_ms": ms(r.wall - r.answering for r in rounds),
                "steps_ms": ms(r.answering - r.kube for r in rounds), "kube_ms": kube,
                "kube_over_direct_ms": round(kube - direct * 1000, 2)}

    # ------------------------------------------------------------------ B2
    def b2(self) -> None:
        s = self.stack
        defn_path, backing_field, value = s.rollout
        rollout = self.figure("b2_rollout_1000", "definition change (one server-side apply request) until all "
                                                 "1000 backing objects carry it, vs 1000 raw merge patches 8 in "
                                                 "flight; one per round")
        defn = yaml.safe_load((SAMPLES / s.definition).read_text())
        selector = f"?labelSelector={KIND_LABEL.replace('/', '%2F')}%3D{s.kind}"
        direct_names = [o["metadata"]["name"] for o in self.client.call(
            "GET", self.backing_path("bench") + "?labelSelector=bench%3Ddirect")["items"]]
        for r in range(self.rounds):
            wanted = f"{value}-{r}"
            dig(defn, defn_path[:-1])[defn_path[-1]] = wanted

            # Completion is seen on a watch: polling lists of every object would load kube-apiserver
            # during the rollout only, i.e. slow the measured side down.
            listing = self.client.call("GET", self.backing_path("bench") + selector)
            carrying = {o["metadata"]["name"] for o in listing["items"] if dig(o, backing_field) == wanted}
            watch = self.client.stream(self.backing_path("bench") + selector +
                                       f"&watch=true&resourceVersion={listing['metadata']['resourceVersion']}")
            start, cpu = time.perf_counter(), cpu_seconds(self.pid)
            # One request on the measuring client, like each raw patch: `kubectl apply` here would add its
            # process start and discovery (100-450 ms) to the measured side.
            self.client.call("PATCH", self.definition_path(defn) + "?fieldManager=bench&force=true", defn,
                             "application/apply-patch+yaml")
            for line in watch:
                obj = json.loads(line)["object"]
                try:
                    if dig(obj, backing_field) == wanted:
                        carrying.add(obj["metadata"]["name"])
                except (KeyError, TypeError):
                    pass
                if len(carrying) >= self.b1_count:
                    break
            aggregated, aggregated_cpu = time.perf_counter() - start, cpu_seconds(self.pid) - cpu
            watch.close()
            patch: dict[str, Any] = {}
            dig_set(patch, backing_field, wanted)

            def raw_patch(client: Client, name: str, body: dict[str, Any] = patch) -> None:
                client.call("PATCH", self.backing_path("bench", name), body, "application/merge-patch+json")

            start, cpu = time.perf_counter(), cpu_seconds(self.pid)
            self.pool.run(raw_patch, direct_names)
            rollout.rounds.append((aggregated, time.perf_counter() - start))
            # Not a ratio: the raw loop patches objects the service does not serve, so it idles meanwhile.
            self.b2_service_cpu_s.append(round(aggregated_cpu, 2))
            print(f"  b2 round {r}: service CPU {aggregated_cpu:.2f} s during the rollout, "
                  f"{cpu_seconds(self.pid) - cpu:.2f} s during the raw loop", flush=True)

    # ------------------------------------------------------------------ B4
    def b4(self, samples: int) -> None:
        """Both watches are open at once and see the same changes, so each change's latency through the service is
        paired with its latency directly: a stall of the machine delays both sides, not one round of one side."""
        s, target = self.stack, "b1-0-0"
        p50 = self.figure("b4_watch_p50", f"median latency of {samples} changes per round, both watches open")
        p99 = self.figure("b4_watch_p99", f"99th percentile of {samples} changes per round, both watches open")
        for _ in range(min(self.rounds, B4_ROUNDS)):
            through, direct = self.latencies(
                [self.app_path("bench") + f"?watch=true&fieldSelector=metadata.name%3D{target}",
                 self.backing_path("bench") + f"?watch=true&fieldSelector=metadata.name%3D{s.prefix}{target}"],
                samples)
            p50.rounds.append((statistics.median(through), statistics.median(direct)))
            p99.rounds.append((statistics.quantiles(through, n=100)[98], statistics.quantiles(direct, n=100)[98]))

    def latencies(self, paths: list[str], samples: int) -> list[list[float]]:
        """Per watch of ``paths``, the seconds from each of ``samples`` changes of the backing object to its event."""
        sent: dict[str, float] = {}
        seen: list[dict[str, float]] = [{} for _ in paths]
        streams = [self.client.stream(path) for path in paths]
        done = [threading.Event() for _ in paths]

        def reader(resp: http.client.HTTPResponse, arrived: dict[str, float], finished: threading.Event) -> None:
            for line in resp:
                at = time.perf_counter()
                annotations = json.loads(line)["object"].get("metadata", {}).get("annotations") or {}
                for key, value in annotations.items():
                    if key.endswith("bench-marker") and value in sent and value not in arrived:
                        arrived[value] = at - sent[value]
                if len(arrived) >= samples:
                    finished.set()
                    return

        for resp, arrived, finished in zip(streams, seen, done, strict=True):
            threading.Thread(target=reader, args=(resp, arrived, finished), daemon=True).start()
        time.sleep(0.5)
        for i in range(samples):
            marker = f"{i}-{time.time_ns()}"
            sent[marker] = time.perf_counter()
            self.client.call("PATCH", self.backing_path("bench", f"{self.stack.prefix}b1-0-0"),
                             {"metadata": {"annotations": {MARKER: marker}}}, "application/merge-patch+json")
            time.sleep(0.02)
        for finished in done:
            finished.wait(30)
        for resp in streams:
            resp.close()
        return [list(arrived.values()) for arrived in seen]

    # ------------------------------------------------------------------ scale
    def seed(self) -> None:
        """One Application through the service: its backing object is the template of every direct one."""
        self.client.call("POST", self.app_path("scale"), self.app("scale", "seed"))
        self.template = self.client.call("GET", self.backing_path("scale", self.stack.prefix + "seed"))

    def grow(self, total: int) -> None:
        """Create backing objects of Applications in namespace ``scale`` directly (fast) until ``total`` exist."""
        count = total - self.total
        labels = dict(self.template["metadata"].get("labels") or {})
        name_label = next(k for k in labels if k.endswith("application.name"))
        first = self.scale_count

        def create(client: Client, i: int) -> None:
            name = f"s-{i}"
            client.call("POST", self.backing_path("scale"),
                        self.direct_body(self.stack.prefix + name, {**labels, name_label: name}, "scale", name))

        self.pool.run(create, list(range(first, first + count)))
        self.scale_count += count
        self.total = total
        self.wait_seen(total)

    def clear_scale(self) -> None:
        selector = f"?labelSelector={KIND_LABEL.replace('/', '%2F')}%3D{self.stack.kind}"
        self.client.call("DELETE", self.backing_path("scale") + selector)
        self.total = 0
        self.wait_seen(0)

    def wait_seen(self, total: int) -> None:
        deadline = time.monotonic() + 300
        while len(self.client.call("GET", self.app_path(None))["items"]) != total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the service does not show {total} Applications")
            time.sleep(1)

    total = 1
    scale_count = 0
    b1_count = B1_COUNT

    def quiet(self) -> float:
        """Wait until the service, kube-apiserver and etcd are idle: what a burst of creates left each doing (the
        service's events and projections, kube-apiserver's garbage) is then not measured as part of a list
        (round 34 of the performance notes). Seconds waited."""
        kube = [pid for name, pid in self.cluster.pids.items() if name in ("kube-apiserver", "etcd")]
        return wait_quiet(self.pid, *kube, below=0.1, window=1.0, timeout=60.0)

    def scale_point(self, total: int) -> None:
        """RSS, one get and one list of every Application (median of a few) with ``total`` Applications."""
        # RSS two seconds after the last write at least, as in rounds before 34: with only the quiet wait's second,
        # tofu_agl's at 50 000 was read before its free heap was released (204 MiB against 154-156).
        time.sleep(2)
        print(f"  quiet after {self.quiet()} s", flush=True)
        rss = rss_kib(self.pid) / 1024
        any_app = self.app_path("bench", "b1-0-0") if self.figures.get("b1_create") else \
            self.app_path("scale", "seed")
        get_ms = statistics.median(timed(lambda: self.client.call("GET", any_app), 20) for _ in range(3)) * 1000
        # Three at every point: with two, the median at 50 000 was their mean, and one slow decoding in this client
        # (0.68-1.13 s for the same 66 MB, rounds 28-31) decided it (round 32 of the performance notes).
        lists = 3
        selector = f"?labelSelector={KIND_LABEL.replace('/', '%2F')}%3D{self.stack.kind}"
        sides: dict[str, tuple[str, list[tuple[float, float]]]] = {
            "listed": (self.app_path(None), []), "direct": (self.backing_path(None) + selector, [])}
        canned = self.cluster.dir / "bench-canned-list.json"
        floored = total >= LIST_FLOOR_FROM
        if floored:
            # The same answer through aggregation from a server that holds it in memory: what any server's list of
            # these Applications costs this client on this cluster (round 35 of the performance notes).
            sides["floor"] = (f"/apis/{relay_server.GROUP}/{relay_server.VERSION}/{self.stack.backing_plural}", [])
            canned.write_bytes(self.client.fetch("GET", self.app_path(None)))
        with relay(self.cluster, self.stack, canned_list=canned) if floored else nullcontext():
            for _ in range(lists):  # in turns, each from quiet processes
                for side, (path, timings) in sides.items():
                    self.quiet()
                    stolen = machine_cpu_seconds()["steal"]
                    timings.append(self.timed_list(path))
                    # Each list's figures, and the CPU the hypervisor took meanwhile (round 34 of the notes)
                    print(f"  {side}: {timings[-1][0]:.1f} ms, received at {timings[-1][1]:.1f}; steal "
                          f"{machine_cpu_seconds()['steal'] - stolen:.2f} CPU s", flush=True)
        canned.unlink(missing_ok=True)

        def median(side: str, field: int) -> float:
            return round(statistics.median(t[field] for t in sides[side][1]), 1)

        point = {"applications": total, "rss_mib": round(rss, 1), "get_ms": round(get_ms, 2),
                 "list_ms": median("listed", 0), "direct_list_ms": median("direct", 0),
                 # Of each, until the answer is received: the rest is this client decoding it (the json module).
                 "list_received_ms": median("listed", 1), "direct_list_received_ms": median("direct", 1)}
        if floored:
            point |= {"floor_list_ms": median("floor", 0), "floor_list_received_ms": median("floor", 1)}
        print(f"  scale {point}", flush=True)
        self.scale.append(point)
        if total >= 1000:
            self.rss[str(round(total, -3))] = round(rss, 1)


    def timed_list(self, path: str) -> tuple[float, float]:
        """ms of one list until decoded, and of it until received.

        The json module decodes with the cyclic garbage collector paused, as the services decode their own
        pages (:func:`shared.bodies.collector_paused`): with it running, two thirds of decoding 50 000 objects
        were the collector's passes over the objects being decoded, on both sides of the comparison (round 18 of
        the performance notes)."""
        start = time.perf_counter()
        raw = self.client.fetch("GET", path)
        received = time.perf_counter()
        with collector_paused():
            decoded = json.loads(raw)
            decoded_at = time.perf_counter()
            # Freed after the clock stops: a client keeps what it lists, and freeing 50 000 decoded objects
            # took 0.07-0.08 s of each side's figure here (round 32 of the performance notes).
            del decoded
        return (decoded_at - start) * 1000, (received - start) * 1000

    def memory(self, baseline: float, points: list[int]) -> dict[str, Any]:
        """RSS over the baseline at each point, and tracemalloc's count of what one backing object
        costs as the service keeps it: decoded by orjson, whole or through the informer's transforms."""
        self.seed()
        out: dict[str, Any] = {"baseline_rss_mib": round(baseline, 1), "points": []}
        for total in sorted(points):
            self.grow(total)
            time.sleep(2)
            rss = rss_kib(self.pid) / 1024
            point = {"applications": total, "rss_mib": round(rss, 1),
                     "kib_per_application": round((rss - baseline) * 1024 / total, 1)}
            print(f"  memory {point}", flush=True)
            out["points"].append(point)
        out["object_kib"] = object_cost(self.client, self.backing_path("scale"), self.stack.service.module)
        print(f"  one cached object, KiB: {out['object_kib']}", flush=True)
        return out


def wait_quiet(*pids: int, below: float = 0.05, window: float = 2.0, timeout: float = 300.0) -> float:
    """Wait until each of ``pids`` uses under ``below`` of a CPU over the same ``window`` seconds (a restarted
    service first catches up with its reconciler's work); returns the seconds waited (``timeout`` at most: a
    process that never settles is measured as it is, and the wait says so)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        before = [cpu_seconds(pid) for pid in pids]
        time.sleep(window)
        if all((cpu_seconds(pid) - cpu) / window < below for pid, cpu in zip(pids, before, strict=True)):
            break
    return round(time.monotonic() - started, 1)


def object_cost(client: Client, path: str, module: str) -> dict[str, float]:
    """KiB per object that tracemalloc counts for the objects of ``path`` decoded by orjson and kept
    whole, without managedFields, through ``module``'s informer transform, and as its informer keeps
    them (that transform's output, packed)."""
    import gc
    import importlib
    import tracemalloc

    import orjson

    from shared.client.informer import Packer, without_managed_fields

    client.conn.request("GET", path, headers={"Accept": "application/json"})
    raw = client.conn.getresponse().read()
    cache_transform = importlib.import_module(f"{module}.storage").CACHE_TRANSFORM
    packer = Packer()
    packer.pack(cache_transform(orjson.loads(raw)["items"][0]))  # its dictionary, which the cache holds once
    transforms: dict[str, Callable[[Any], Any]] = {"whole": lambda o: o, "without_managed_fields":
                                                   without_managed_fields, "transformed": cache_transform,
                                                   "cached (packed)": lambda o: packer.pack(cache_transform(o))}
    cost: dict[str, float] = {}
    for label, transform in transforms.items():
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = [transform(o) for o in orjson.loads(raw)["items"]]
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        cost[label] = round(used / len(kept) / 1024, 2)
        del kept
    return cost


def post_each(client: Client, path: str, bodies: list[Any]) -> Callable[[int], Any]:
    """A side of :func:`interleaved` whose i-th request creates ``bodies[i]`` (made before the timing)."""
    return lambda i: client.call("POST", path, bodies[i])


def dig_set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value


@contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy records ``pid`` while the block runs (a flame graph SVG at ``out``); nothing when ``out`` is None."""
    if out is None:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = Path(sys.executable).with_name("py-spy")
    proc = subprocess.Popen([str(spy), "record", "-p", str(pid), "-o", str(out), "-r", "200", "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1)
    try:
        yield
    finally:
        proc.send_signal(2)
        proc.wait(60)


#: :mod:`tests.relay`, started and registered the way the services are.
RELAY_SERVICE = services.Service("bench-relay", "tests.relay", relay_server.GROUP, relay_server.VERSION)

#: The ServiceAccount (namespace, name) the services and the relay call kube-apiserver as, bound to cluster-admin.
SERVICE_ACCOUNT = ("kube-system", "agl-bench-service")


def service_identity(cluster: Cluster) -> tuple[str, ...]:
    """The arguments that make a service (or the relay) call kube-apiserver with a ServiceAccount's token.

    In a cluster the services call kube-apiserver with their ServiceAccount token (the chart's Deployment), and
    kube-apiserver keeps a token's review for 10 s. The local control plane's default identity for them is the
    admin's client certificate, whose chain kube-apiserver verifies again on every request: x509 authentication
    keeps nothing, and during gets at saturation it was a quarter of kube-apiserver's CPU, two verifications per
    get through the service against one per direct get (round 25 of the performance notes). The bench measures
    the second hop as a pod pays for it: a token of a ServiceAccount bound to cluster-admin, made once per
    cluster. The first hop (the bench's client) and the direct side keep the admin's certificate."""
    path = cluster.dir / "bench-service-token.kubeconfig"
    if not path.exists():
        namespace, name = SERVICE_ACCOUNT
        cluster.kubectl("create", "serviceaccount", name, "-n", namespace)
        cluster.kubectl("create", "clusterrolebinding", name, "--clusterrole=cluster-admin",
                        f"--serviceaccount={namespace}:{name}")
        token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration=12h").stdout.strip()
        config = yaml.safe_load(cluster.kubeconfig.read_text())
        config["users"] = [{"name": name, "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = name
        path.write_text(yaml.safe_dump(config))
    return ("--kubeconfig", str(path))


@contextmanager
def relay(cluster: Cluster, stack: Stack, canned_list: Path | None = None) -> Iterator[int]:
    """Run :mod:`tests.relay` for ``stack``'s backing objects behind its own APIService (answering a list of every
    object with ``canned_list``'s bytes when given); yields its pid."""
    canned = ("--canned-list", str(canned_list)) if canned_list is not None else ()
    running = services.start(cluster, RELAY_SERVICE, extra_args=(
        *service_identity(cluster), "--client-ca-file", str(cluster.pki_dir / "front-proxy-ca.crt"),
        "--backing", stack.backing, "--plural", stack.backing_plural, "--kind", "Relayed", *canned))
    try:
        yield running.pid
    finally:
        services.stop(cluster, RELAY_SERVICE)
        aggregation.unregister(cluster, relay_server.GROUP, relay_server.VERSION)


def hops(cluster: Cluster, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """What aggregation costs by itself, and who spends it.

    Each request kind is timed (median of ``--rounds`` means of 200) and each process's CPU time per
    request is counted from ``/proc`` (user + system; the service, the relay, kube-apiserver, etcd): a
    request the service answers from memory (its group-version discovery document) through
    kube-apiserver, the same kind of document kube-apiserver serves itself, a get and a create through
    the service, through :mod:`tests.relay` and directly.  Through the relay is the two extra hops alone;
    what the service costs above the relay is its own work."""
    stack, rounds = STACKS[name], args.rounds
    service = services.start(cluster, stack.service, extra_args=(*service_identity(cluster), *args.service_args))
    try:
        cluster.kubectl("apply", "-f", str(SAMPLES / stack.definition))
        bench = Bench(cluster, stack, service.pid, rounds)
        time.sleep(3)
        bench.seed()
        bench.client.call("POST", bench.app_path("bench"), bench.app("bench", "hop"))
        with relay(cluster, stack) as relay_pid:
            return _hops(bench, name, {"service": service.pid, "relay": relay_pid, **cluster.pids})
    finally:
        services.stop(cluster, stack.service)


def _hops(bench: Bench, name: str, processes: dict[str, int]) -> dict[str, Any]:
    stack = bench.stack
    paths = {"proxied_discovery": stack.apps, "local_discovery": stack.backing,
             "get_through_service": bench.app_path("bench", "hop"),
             "get_through_relay": bench.relay_path("bench", stack.prefix + "hop"),
             "direct_get": bench.backing_path("bench", stack.prefix + "hop")}
    created = iter(range(10**9))
    strict = "?fieldValidation=Strict"

    def create_through_service() -> Any:
        return bench.client.call("POST", bench.app_path("bench"), bench.app("bench", f"h-{next(created)}"))

    def create_through_relay() -> Any:
        body = bench.direct_body(f"relay-h-{next(created)}", {"bench": "relay"})
        return bench.client.call("POST", bench.relay_path("bench") + strict, body)

    def create_direct() -> Any:
        body = bench.direct_body(f"direct-h-{next(created)}", {"bench": "direct"})
        return bench.client.call("POST", bench.backing_path("bench") + strict, body)

    def get(path: str) -> Callable[[], Any]:
        return lambda: bench.client.call("GET", path)

    requests: dict[str, Callable[[], Any]] = {key: get(path) for key, path in paths.items()}
    requests |= {"create_through_service": create_through_service, "create_through_relay": create_through_relay,
                 "create_direct": create_direct}
    samples: dict[str, list[tuple[float, dict[str, float]]]] = {key: [] for key in requests}
    for _ in range(bench.rounds):
        for key, request in requests.items():
            before = {p: cpu_seconds(pid) for p, pid in processes.items()}
            wall = timed(request, 200)
            samples[key].append((wall, {p: (cpu_seconds(pid) - before[p]) / 200 for p, pid in processes.items()}))
    out: dict[str, Any] = {}
    for key, rounds_of in samples.items():
        out[key] = {"ms": round(statistics.median(w for w, _ in rounds_of) * 1000, 2)} | {
            f"{p}_cpu_ms": round(statistics.median(c[p] for _, c in rounds_of) * 1000, 2) for p in processes}
        print(f"{name} {key:<24} {out[key]}", flush=True)
    return out


def run_stack(cluster: Cluster, name: str, args: argparse.Namespace) -> dict[str, Any]:
    stack = STACKS[name]
    spent: dict[str, float] = {}
    with phase("start", spent):
        service = services.start(cluster, stack.service, extra_args=(*service_identity(cluster), *args.service_args))
        cluster.kubectl("apply", "-f", str(SAMPLES / stack.definition))
        time.sleep(3)
    try:
        baseline = rss_kib(service.pid) / 1024
        bench = Bench(cluster, stack, service.pid, args.rounds, args.count, port=service.port)
        print(f"{name}: pid {service.pid}, baseline RSS {baseline:.1f} MiB", flush=True)
        if args.memory:
            return bench.memory(baseline, args.points)
        profile = args.profile / f"{name}-b1.svg" if args.profile else None
        bench.seed()
        with phase("scale curve", spent):
            for total in (t for t in args.points if t < bench.count):
                bench.grow(total)
                bench.scale_point(total)
            bench.clear_scale()  # the seed too: from here on, every Application is B1's or a scale point's
        with phase("b1", spent), relay(cluster, stack), profiled(service.pid, profile):
            bench.b1()
        bench.total = bench.b1_count
        with phase("scale curve", spent):
            bench.scale_point(bench.b1_count)
        with phase("b4", spent):
            bench.b4(args.watch_samples)
        with phase("b2", spent), profiled(service.pid, args.profile / f"{name}-b2.svg" if args.profile else None):
            bench.b2()
        with phase("scale curve", spent):
            for total in (t for t in args.points if t > bench.b1_count):
                bench.grow(total)
                bench.scale_point(total)
        figures = {key: fig.summary() for key, fig in bench.figures.items()}
        for key, value in figures.items():
            print(f"  {key:<16} ratio {value['ratio']:5.2f}  [{value['min']:.2f}-{value['max']:.2f}]  "
                  f"aggregated {value['aggregated_ms']:.2f} ms  direct {value['direct_ms']:.2f} ms", flush=True)
        floors = bench.floors()
        print(f"  floors (direct + the hops alone): {floors}", flush=True)
        print(f"  seconds per step: {spent}", flush=True)
        return {**figures, "floors": floors, "rss_mib": bench.rss, "baseline_rss_mib": round(baseline, 1),
                "scale": bench.scale, "b2_service_cpu_s": bench.b2_service_cpu_s, "seconds_per_step": spent}
    finally:
        services.stop(cluster, stack.service)


def fresh_cluster() -> Cluster:
    """The bench cluster, new: CRDs installed, the two namespaces created."""
    name = os.environ.get("AGL_BENCH_CLUSTER", "bench")
    Cluster(name).destroy()
    cluster = Cluster(name)
    cluster.up(fresh=True)
    crds.install(cluster)
    cluster.kubectl("create", "namespace", "bench")
    cluster.kubectl("create", "namespace", "scale")
    return cluster


def on_fresh_cluster(measure: Callable[[Cluster], dict[str, Any]]) -> dict[str, Any]:
    """``measure`` on a new cluster, destroyed afterwards with every service stopped.

    A cluster of its own per measurement: a service must not run on a kube-apiserver and etcd that still hold
    another one's 10 000 backing objects and their Events (in tofu_agl's part of a shared cluster, the hops
    alone took 1.5-1.9 ms, against 0.9-1.0 ms on a fresh one)."""
    spent: dict[str, float] = {}
    with phase("cluster up", spent):
        cluster = fresh_cluster()
    try:
        return measure(cluster)
    finally:
        with phase("cluster down", spent):
            for stack in STACKS.values():
                services.stop(cluster, stack.service)
            cluster.destroy()


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} " \
           f"{platform.python_version()}, load average at the end {os.getloadavg()[0]:.2f}"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--stacks", nargs="+", default=list(STACKS), choices=list(STACKS))
    # Four: B1's creates are --count in all whatever the rounds, B1's gets and lists spread little from round to
    # round, and five rounds put the spec part above its 10 minutes (round 21 of the performance notes).
    parser.add_argument("--rounds", type=int, default=4,
                        help="repetitions of each figure (B4: at most 3); 1000 divided by it is B1's creates per "
                             "round (default %(default)s)")
    parser.add_argument("--watch-samples", type=int, default=400,
                        help="changes per round of B4, each seen by both watches; its p99 is their 4th-5th slowest "
                             "(default %(default)s)")
    parser.add_argument("--count", type=int, default=B1_COUNT,
                        help="Applications of B1 and B2 (default %(default)s; smaller for a quick run)")
    parser.add_argument("--points", type=int, nargs="+", default=list(SCALE_POINTS),
                        help="Applications at each point of the scale curve (default %(default)s)")
    parser.add_argument("--parts", nargs="+", choices=("spec", "scale"), default=["spec", "scale"],
                        help="spec: SPEC §8's ratios (about 9 min); scale: 50 000 Applications, start-up and "
                             "throughput (tests.bench_scale, about 40 min). With --out, a part not run keeps its "
                             "figures from the last run that had it (default: both)")
    parser.add_argument("--scale-points", type=int, nargs="+", default=[10_000, 50_000],
                        help="Applications at each point of the scale part, the last one also spread over 100 "
                             "namespaces (default %(default)s; smaller for a quick run)")
    parser.add_argument("--memory", action="store_true",
                        help="only memory: RSS at each --points point, and what one cached object costs "
                             "(tracemalloc on the backing objects read from kube-apiserver)")
    parser.add_argument("--out", type=Path, help="write benchmarks.json/.md and the scale PNG here (e.g. docs)")
    parser.add_argument("--profile", type=Path, help="write py-spy flame graphs of B1 here")
    parser.add_argument("--hops", action="store_true", help="only measure what aggregation itself costs")
    parser.add_argument("--service-args", nargs="*", default=[], help="extra flags for the services, e.g. "
                        "--service-args=--event-loop=asyncio")
    args = parser.parse_args(argv)
    # The measuring client too: its full collections (tens of ms each) would land in whichever side is timed.
    freeze_startup_objects()
    started = time.monotonic()
    results: dict[str, Any] = {}
    if args.hops or args.memory:
        for name in args.stacks:
            results[name] = on_fresh_cluster(functools.partial(hops if args.hops else run_stack, name=name, args=args))
        print(json.dumps(results, indent=1))
        return 0
    def checkpoint() -> None:
        # Each part is written as it ends: a failure in a later part keeps an earlier part's figures.
        if args.out:
            from tests.bench_report import write_report

            write_report(results, args.out)

    try:
        measure_parts(args, results, started, checkpoint)
    except BaseException:
        # What was measured before the failure is printed, so that a late failure does not lose the run.
        print("bench failed; what it measured so far:\n" + json.dumps(results, indent=1), flush=True)
        raise
    if args.out:
        from tests.bench_report import write_report

        write_report(results, args.out)
    else:
        print(json.dumps(results, indent=1))
    return 0


def measure_parts(args: argparse.Namespace, results: dict[str, Any], started: float,
                  checkpoint: Callable[[], None]) -> None:
    """The parts ``--parts`` names, into ``results``; ``checkpoint`` after the first of two."""
    if "spec" in args.parts:
        for name in args.stacks:
            results[name] = on_fresh_cluster(functools.partial(run_stack, name=name, args=args))
        results["machine"], results["date"] = machine(), now()
        results["duration_s"] = round(time.monotonic() - started)
        if "scale" in args.parts:
            checkpoint()
    if "scale" in args.parts:
        from tests import bench_scale

        scale_started = time.monotonic()
        extra = tuple(args.service_args)
        rounds = min(args.rounds, bench_scale.THROUGHPUT_ROUNDS)
        for name in args.stacks:
            points = tuple(args.scale_points)
            one = functools.partial(bench_scale.one_namespace, name=name, stack=STACKS[name], rounds=rounds,
                                    extra_args=extra, points=points)
            spread = functools.partial(bench_scale.spread, name=name, stack=STACKS[name], extra_args=extra,
                                       total=points[-1])
            at_scale = on_fresh_cluster(one)
            at_scale["spread"] = on_fresh_cluster(spread)
            results.setdefault(name, {})["at_scale"] = at_scale
        results["at_scale_run"] = {"machine": machine(), "date": now(),
                                   "duration_s": round(time.monotonic() - scale_started)}


if __name__ == "__main__":
    raise SystemExit(main())
