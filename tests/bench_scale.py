"""The benchmarks at scale: 50 000 Applications per service, start-up with 10 000 and 50 000 present, and
throughput at saturation (``python -m tests.bench --parts scale``; ``nox -s bench`` runs it after SPEC §8's
ratios).

For each service, on a new cluster of its own (one namespace):

- the backing objects of 10 000, then 50 000 Applications are created directly (fast, as in the scale curve);
  at each: the service's RSS, one get, a list of every Application through the service (answered from its
  cache) vs the same list directly, each until decoded and until received, and the **start-up**: once
  kube-apiserver is idle, the service is stopped and started again, and the
  time from the new process's start until it is Ready is measured. Ready means both of what a user needs: its
  ``/readyz`` answers 200, and a watch from ``resourceVersion=0`` on the service itself (with kube-apiserver's
  front-proxy identity, so the aggregator's availability probe is not in the figure) delivers the last
  Application created, i.e. the kind is served and its informer has synced;
- **throughput**: ``CLIENTS`` processes, one keep-alive connection each, send gets (consistent, and with
  ``resourceVersion=0``) and creates for a fixed time, through the service and directly, the sides interleaved
  second by second (:func:`saturate`), the reads and then the creates of each round from quiet processes; with
  the service's CPU milliseconds per request, from its ``/proc`` accounting.

Then on another new cluster, 50 000 Applications spread over 100 namespaces: RSS, list of all, start-up.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import re
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster import aggregation, processes, services
from localcluster.cluster import Cluster

from tests.bench import (
    KIND_LABEL,
    SAMPLES,
    Bench,
    Client,
    Stack,
    cpu_seconds,
    relay,
    rss_kib,
    service_identity,
    wait_quiet,
)

REPOSITORY = Path(__file__).resolve().parents[1]

#: Applications at the points of the scale part (start-up is timed at each).
POINTS = (10_000, 50_000)
SPREAD_NAMESPACES = 100
#: Concurrent clients of the throughput runs, each its own process (one Python client would saturate first).
CLIENTS = 16
#: Seconds of saturation per side and round, in slots of ``SLOT_SECONDS`` interleaved with the other sides'.
THROUGHPUT_SECONDS = 8.0
SLOT_SECONDS = 1.0
#: Rounds of the throughput runs, at most (each round is ``THROUGHPUT_SECONDS`` of each side).
THROUGHPUT_ROUNDS = 3
#: Processes of the service in the replica run (one host, one port shared with SO_REUSEPORT).
REPLICAS = 2
#: Bounds of the waits (a start-up that takes longer is reported as failed, not waited for).
STARTUP_TIMEOUT = 180.0
#: One line of the service's count of its own kube requests, on its ``/metrics``: labels and count.
KUBE_REQUESTS = re.compile(rb"^agl_kube_requests_total\{([^}]*)\} ([0-9.e+]+)$", re.M)
#: The CPU seconds kube-apiserver's Go runtime has spent on garbage collection, on its ``/metrics``.
GC_CPU = re.compile(rb"^go_cpu_classes_gc_total_cpu_seconds_total ([0-9.e+-]+)$", re.M)


class ServiceProbe:
    """Requests straight to the service's own port, as kube-apiserver sends them (front-proxy client
    certificate and ``X-Remote-*`` headers): a start-up is timed without the aggregator's availability probe."""

    def __init__(self, cluster: Cluster, stack: Stack, port: int) -> None:
        ca, _cert = aggregation.serving_cert(cluster, stack.service.name, services.NAMESPACE)
        self.ctx = ssl.create_default_context(cafile=str(ca.cert))
        self.ctx.check_hostname = False  # the serving certificate names the in-cluster Service, not 127.0.0.1
        self.ctx.load_cert_chain(str(cluster.pki_dir / "front-proxy-client.crt"),
                                 str(cluster.pki_dir / "front-proxy-client.key"))
        self.port = port

    def connection(self) -> ProbeConnection:
        """A connection of one poller's own (an ``http.client`` connection serves one thread)."""
        return ProbeConnection(self)


class ProbeConnection:
    """One poller's connection to the service, kept alive between polls as kube-apiserver keeps its own.

    A new TLS connection per poll, every 20 ms while the service starts, had the service spend its CPU on
    handshakes that no real client makes: 0.3 s of a 10 000-object start-up (docs/design/perf/README.md,
    round 19)."""

    def __init__(self, probe: ServiceProbe) -> None:
        self.probe = probe
        self.conn: http.client.HTTPSConnection | None = None

    def status(self, path: str) -> tuple[int, bytes]:
        """Status and first line of the answer to ``path``; (0, b"") when the service does not answer yet."""
        return self._get(path, first_line=True)

    def fetch(self, path: str) -> tuple[int, bytes]:
        """Status and whole answer of ``path``; (0, b"") when the service does not answer."""
        return self._get(path, first_line=False)

    def _get(self, path: str, first_line: bool) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPSConnection("127.0.0.1", self.probe.port, context=self.probe.ctx, timeout=30)
        try:
            self.conn.request("GET", path, headers={"X-Remote-User": "bench", "X-Remote-Group": "system:masters",
                                                    "Accept": "application/json"})
            resp = self.conn.getresponse()
            if resp.chunked and first_line:  # a watch's stream, which runs on: its first line is the answer
                line = resp.readline()
                self.close()
                return resp.status, line
            body = resp.read()
            return resp.status, body.split(b"\n", 1)[0] if first_line else body
        except (OSError, http.client.HTTPException):
            self.close()
            return 0, b""

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def startup(bench: Bench, running: services.Running, probe_ns: str, probe_name: str,
            extra_args: tuple[str, ...]) -> tuple[services.Running, dict[str, Any]]:
    """Restart the service and time it to Ready (see the module's docstring); returns the new process."""
    kube_pid = bench.cluster.pids["kube-apiserver"]
    floor = startup_floor(bench)
    # kube-apiserver still busy with what came before (the growth's writes, the lists just timed) would be timed
    # as the start-up's: one run took 22 s over 100 namespaces, 13 s when repeated alone.
    quiet_after = wait_quiet(kube_pid, below=0.1, timeout=120)
    # The collector first: reading kube-apiserver's /metrics costs it CPU, which is not the start-up's.
    kube_gc = collector_cpu_seconds(bench.client)
    kube_cpu = cpu_seconds(kube_pid)
    fresh, started = services.restart(bench.cluster, bench.stack.service, extra_args=extra_args)
    probe = ServiceProbe(bench.cluster, bench.stack, fresh.port)
    watch = (bench.app_path(probe_ns) + f"?watch=1&resourceVersion=0&timeoutSeconds=5"
             f"&fieldSelector=metadata.name%3D{probe_name}")
    deadline = started + STARTUP_TIMEOUT
    # Two pollers, so that a watch held open until the informer syncs does not delay seeing /readyz.
    times: dict[str, float] = {}

    def poll(key: str, answered: Callable[[int, bytes], bool], path: str) -> None:
        connection = probe.connection()
        try:
            while time.monotonic() < deadline:
                if answered(*connection.status(path)):
                    times[key] = time.monotonic() - started
                    return
                time.sleep(0.02)
        finally:
            connection.close()

    pollers = [threading.Thread(target=poll, args=("readyz", lambda code, _line: code == 200, "/readyz")),
               threading.Thread(target=poll, args=("served", lambda code, line: code == 200 and b'"ADDED"' in line,
                                                   watch))]
    for poller in pollers:
        poller.start()
    for poller in pollers:
        poller.join(STARTUP_TIMEOUT + 30)
    ready, served = times.get("readyz"), times.get("served")
    if ready is None or served is None:
        raise RuntimeError(f"{bench.stack.service.name} not Ready {STARTUP_TIMEOUT:.0f} s after its start")
    bench.pid = fresh.pid
    out: dict[str, Any] = {
        "ready_s": round(max(ready, served), 2), "readyz_s": round(ready, 2), "served_s": round(served, 2),
        # CPU seconds until Ready: what of the start-up is the service's own work, and what kube-apiserver's.
        "service_cpu_s": round(cpu_seconds(fresh.pid), 2),
        "kube_apiserver_cpu_s": round(cpu_seconds(kube_pid) - kube_cpu, 2),
        "kube_apiserver_gc_cpu_s": round(collector_cpu_seconds(bench.client) - kube_gc, 2),
        "kube_apiserver_quiet_after_s": quiet_after, **floor}
    out["service_kube_requests"] = kube_requests(probe)
    time.sleep(2)
    out["rss_mib_after_start"] = round(rss_kib(fresh.pid) / 1024, 1)
    print(f"  start-up {out}", flush=True)
    return fresh, out


def kube_requests(probe: ServiceProbe) -> dict[str, int]:
    """The service's own requests to kube-apiserver so far, by method, resource and answer (its
    ``agl_kube_requests_total``; a paged list counts once). Read after a start-up, it says how many lists and
    watches the service sent and whether one was refused and sent again: one start-up of tofu_agl with 50 000
    took 23 s, twice its floor, with kube-apiserver spending 37 CPU s against its usual 15 (round 36 of the
    performance notes)."""
    connection = probe.connection()
    try:
        status, body = connection.fetch("/metrics")
    finally:
        connection.close()
    if status != 200:
        return {}
    out: dict[str, int] = {}
    for labels, value in KUBE_REQUESTS.findall(body):
        named = {k.decode(): v.decode() for k, v in re.findall(rb'(\w+)="([^"]*)"', labels)}
        out[" ".join(named.get(k, "") for k in ("verb", "resource", "code"))] = int(float(value))
    return out


def startup_floor(bench: Bench) -> dict[str, float]:
    """A new process that receives the paged list the service's informer asks for and does nothing else
    (:mod:`tests.startup_floor`), once kube-apiserver is quiet: no start-up can be Ready sooner. Timed from the
    process's start to its exit (``floor_s``) and from its first request to its last page (``floor_list_s``),
    with kube-apiserver's CPU for it, which moves from run to run (round 19 of the performance notes)."""
    kube_pid = bench.cluster.pids["kube-apiserver"]
    wait_quiet(kube_pid, below=0.1, timeout=120)
    pki = bench.cluster.pki_dir
    argv = [sys.executable, "-m", "tests.startup_floor", "--port", bench.cluster.server.rsplit(":", 1)[1],
            "--path", bench.backing_path(None), "--selector", f"{KIND_LABEL}={bench.stack.kind}",
            "--ca", str(pki / "ca.crt"), "--cert", str(pki / "admin.crt"), "--key", str(pki / "admin.key")]
    kube_gc = collector_cpu_seconds(bench.client)  # before the CPU, as in startup()
    kube_cpu = cpu_seconds(kube_pid)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPOSITORY, capture_output=True, text=True, timeout=STARTUP_TIMEOUT, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"the start-up floor failed: {done.stderr[-1000:]}")
    received = json.loads(done.stdout)
    out = {"floor_s": round(elapsed, 2), "floor_list_s": round(received["seconds"], 2),
           "floor_kube_apiserver_cpu_s": round(cpu_seconds(kube_pid) - kube_cpu, 2),
           "floor_kube_apiserver_gc_cpu_s": round(collector_cpu_seconds(bench.client) - kube_gc, 2),
           "floor_pages": received["pages"], "floor_mib": round(received["bytes"] / 2**20, 1)}
    print(f"  start-up floor {out}", flush=True)
    return out


def collector_cpu_seconds(client: Client) -> float:
    """The CPU seconds kube-apiserver's garbage collector has spent so far (the Go runtime's own account).

    The same paged list costs kube-apiserver about twice the CPU when a collection of its heap falls inside it
    (round 25 of the performance notes), and which of a start-up and its floor pays for one is kube-apiserver's
    collector's pacing, not the client's doing: this says how much of each one's kube-apiserver CPU it was."""
    found = GC_CPU.search(client.fetch("GET", "/metrics"))
    if found is None:
        raise RuntimeError("kube-apiserver's /metrics has no go_cpu_classes_gc_total_cpu_seconds_total")
    return float(found.group(1))


def grow_spread(bench: Bench, total: int) -> None:
    """Backing objects of ``total`` Applications spread evenly over ``SPREAD_NAMESPACES`` namespaces."""
    for i in range(SPREAD_NAMESPACES):
        bench.client.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": f"spread-{i}"}})
    labels = dict(bench.template["metadata"].get("labels") or {})
    name_label = next(k for k in labels if k.endswith("application.name"))

    def create(client: Client, i: int) -> None:
        name, namespace = f"s-{i}", f"spread-{i % SPREAD_NAMESPACES}"
        client.call("POST", bench.backing_path(namespace),
                    bench.direct_body(bench.stack.prefix + name, {**labels, name_label: name}, namespace, name))

    bench.pool.run(create, list(range(total - bench.total)))
    bench.total = total
    bench.wait_seen(total)


# ---------------------------------------------------------------------------- throughput


def _client_process(cluster: Cluster, requests: list[Callable[[Client, int], Any]], schedule: list[int],
                    first: int, start: Any, began: Any, results: Any) -> None:
    """One client of :func:`saturate`: in slot ``i`` it sends ``requests[schedule[i]]`` one after the other until
    the slot ends; per side, the requests done and failed and the seconds it spent on them (from the start of
    its first request of a slot to the end of its last)."""
    client = Client(cluster)
    done, errors, busy = [0] * len(requests), [0] * len(requests), [0.0] * len(requests)
    failure = ""
    number = first  # a number no other request of the run uses (creates' names)
    start.wait()
    t0 = began.value
    time.sleep(max(0.0, t0 - time.monotonic()))
    for slot, side in enumerate(schedule):
        end = t0 + (slot + 1) * SLOT_SECONDS
        now = slot_began = time.monotonic()
        while now < end:
            try:
                requests[side](client, number)
                done[side] += 1
            except (RuntimeError, OSError) as exc:
                errors[side] += 1
                failure = failure or str(exc)[:300]
                client = Client(cluster)
            number += 1
            now = time.monotonic()
        busy[side] += now - slot_began
    results.put((done, errors, busy, failure))


def interleaving(sides: int, slots_per_side: int) -> list[int]:
    """The side of each slot of a run: every side once per cycle, the order rotated by one from cycle to cycle,
    so that each side follows each other one about as often."""
    return [(cycle + i) % sides for cycle in range(slots_per_side) for i in range(sides)]


def saturate(cluster: Cluster, sides: dict[str, Callable[[Client, int], Any]], pids: dict[str, int],
             run: int) -> dict[str, dict[str, float]]:
    """Each side's requests per second from ``CLIENTS`` processes, the sides interleaved in slots of
    ``SLOT_SECONDS`` for ``THROUGHPUT_SECONDS`` each, and the CPU milliseconds per request of each process in
    ``pids``; ``run`` numbers the call, so that the numbers its requests get (the names of what creates create)
    are unique in the benchmark.

    Interleaved rather than one side after the other: on this machine a whole process's work per CPU second
    changes by half or more from one 8-second window to the next (kube-apiserver's, the service's and the
    relay's alike, a collection of kube-apiserver's heap apart), which decided the ratio of a run more than the
    sides did (round 36 of the performance notes). Slots of a second put every side in each such window. A
    side's rate is each client's requests over the time it spent on them, summed over clients, as before; the
    processes' CPU and the machine's new TCP connections are read at each slot's end and counted to its side."""
    keys = list(sides)
    schedule = interleaving(len(keys), round(THROUGHPUT_SECONDS / SLOT_SECONDS))
    ctx = multiprocessing.get_context("fork")
    start, began, results = ctx.Barrier(CLIENTS + 1), ctx.Value("d", 0.0), ctx.Queue()
    workers = [ctx.Process(target=_client_process, args=(cluster, [sides[k] for k in keys], schedule,
                                                         (run * CLIENTS + w) * 10**7, start, began, results))
               for w in range(CLIENTS)]
    for w in workers:
        w.start()
    time.sleep(0.5)  # the processes' own start-up (TLS contexts) is not measured
    t0 = began.value = time.monotonic() + 0.2
    start.wait()
    spent = {key: dict.fromkeys(pids, 0.0) for key in keys}
    opened = dict.fromkeys(keys, 0)
    time.sleep(max(0.0, t0 - time.monotonic()))
    cpu, tcp = {name: cpu_seconds(pid) for name, pid in pids.items()}, tcp_active_opens()
    for slot, side in enumerate(schedule):
        time.sleep(max(0.0, t0 + (slot + 1) * SLOT_SECONDS - time.monotonic()))
        now, tcp_now = {name: cpu_seconds(pid) for name, pid in pids.items()}, tcp_active_opens()
        for name in pids:
            spent[keys[side]][name] += now[name] - cpu[name]
        opened[keys[side]] += tcp_now - tcp
        cpu, tcp = now, tcp_now
    outcomes = [results.get(timeout=len(schedule) * SLOT_SECONDS + 120) for _ in workers]
    for w in workers:
        w.join(30)
    out: dict[str, dict[str, float]] = {}
    for i, key in enumerate(keys):
        done, errors = sum(o[0][i] for o in outcomes), sum(o[1][i] for o in outcomes)
        if errors > done:
            raise RuntimeError(f"{key}: {errors} of {done + errors} requests failed, e.g. "
                               f"{next(o[3] for o in outcomes if o[3])}")
        out[key] = {"rps": round(sum(o[0][i] / o[2][i] for o in outcomes if o[2][i]), 1), "requests": done,
                    "errors": errors,
                    # The machine's TCP connections opened meanwhile: the clients' own, and any a proxy had to
                    # open again (a TLS handshake each) had it not kept its connections alive (round 35).
                    "tcp_opened": opened[key]}
        out[key] |= {f"{name}_cpu_ms": round(spent[key][name] * 1000 / max(done, 1), 3) for name in pids}
    return out


def tcp_active_opens() -> int:
    """The machine's count of TCP connections it has opened (``ActiveOpens`` of ``/proc/net/snmp``)."""
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Tcp:")]
    return int(lines[1][lines[0].index("ActiveOpens")])


def throughput(bench: Bench, rounds: int) -> dict[str, Any]:
    """Gets and creates at saturation through the service and directly, interleaved round by round, once the
    service is idle."""
    cluster = bench.cluster
    print(f"  service idle after {wait_quiet(bench.pid)} s", flush=True)
    bench.client.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": "throughput"}})
    labels = {"bench": "throughput"}

    def create_app(client: Client, i: int) -> Any:
        return client.call("POST", bench.app_path("throughput"), bench.app("throughput", f"t-{i}"))

    def create_direct(client: Client, i: int) -> Any:
        return client.call("POST", bench.backing_path("throughput") + "?fieldValidation=Strict",
                           bench.direct_body(f"direct-t-{i}", labels, "throughput"))

    relayed = bench.relay_path("scale", bench.stack.prefix + "s-0")
    sides = {**get_sides(bench), "get_relay": lambda client, _i: client.call("GET", relayed),
             "create_aggregated": create_app, "create_direct": create_direct}
    # The consistent gets' floor: the same get through tests.relay, which only passes it on (the two extra hops
    # alone, made with the services' HTTP stack), in the same rounds (round 35 of the performance notes).
    with relay(cluster, bench.stack) as relay_pid:
        pids = {"service": bench.pid, "relay": relay_pid, **kube_pids(cluster)}
        return summarize_throughput(saturated_in_turns(cluster, sides, pids, rounds))


def get_sides(bench: Bench) -> dict[str, Callable[[Client, int], Any]]:
    """Gets of one Application of the scale namespace: consistent and at rv=0 through the service, and of its
    backing object directly."""
    name = "s-0"

    def get(path: str) -> Callable[[Client, int], Any]:
        return lambda client, _i: client.call("GET", path)

    return {"get_aggregated": get(bench.app_path("scale", name)),
            "get_rv0_aggregated": get(bench.app_path("scale", name) + "?resourceVersion=0"),
            "get_direct": get(bench.backing_path("scale", bench.stack.prefix + name))}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (an exited child not yet waited for is a zombie, which ``kill(pid, 0)`` finds)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kube_pids(cluster: Cluster) -> dict[str, int]:
    return {k: v for k, v in cluster.pids.items() if k in ("kube-apiserver", "etcd")}


def saturated_in_turns(cluster: Cluster, sides: dict[str, Callable[[Client, int], Any]], pids: dict[str, int],
                       rounds: int) -> dict[str, list[dict[str, float]]]:
    """Each round, the reads interleaved in one run of :func:`saturate` and then the creates in another, each
    run from quiet processes; each side's figures per round."""
    measured: dict[str, list[dict[str, float]]] = {key: [] for key in sides}
    groups = [{k: v for k, v in sides.items() if not k.startswith("create")},
              {k: v for k, v in sides.items() if k.startswith("create")}]
    run = 0
    for r in range(rounds):
        for group in filter(None, groups):
            waited = wait_quiet(*pids.values(), below=0.1, window=1.0, timeout=60.0)
            for key, figures in saturate(cluster, group, pids, run).items():
                measured[key].append(figures)
                print(f"  throughput round {r} {key} (after {waited} s of waiting for quiet): {figures}",
                      flush=True)
            run += 1
    return measured


def replica_throughput(bench: Bench, extra_args: tuple[str, ...], rounds: int) -> tuple[services.Running,
                                                                                         dict[str, Any]]:
    """Gets at saturation through ``REPLICAS`` processes of the service behind its APIService, against direct
    gets in the same rounds: the next step the issue names when one process is the limit.

    The replicas share the service's port (``--reuse-port``): the kernel spreads kube-apiserver's connections
    over them as kube-proxy spreads a Service's over its pods, with no relay of its own on the two cores. They
    elect a leader, as replicas in a cluster do. Each replica's CPU per request shows that both served. Returns
    the first replica (the one the service's record names, which ``services.stop`` ends)."""
    cluster, service = bench.cluster, bench.stack.service
    args = (*extra_args, "--reuse-port", "--leader-elect")
    first, _started = services.restart(cluster, service, extra_args=args)
    others = [services.launch(cluster, service, port=first.port, extra_args=args,
                              log_file=first.log.with_name(f"{service.name}-replica-{i}.log"))
              for i in range(1, REPLICAS)]
    try:
        pids = {"replica-0": first.pid, **{f"replica-{i}": p.pid for i, p in enumerate(others, 1)}}
        for pid in pids.values():
            wait_quiet(pid, timeout=STARTUP_TIMEOUT)  # each lists every object, then idles
        if dead := [name for name, pid in pids.items() if not alive(pid)]:
            raise RuntimeError(f"{', '.join(dead)} of {service.name} exited; see {first.log.parent}")
        aggregation.wait_available(cluster, service.group, service.version, timeout=STARTUP_TIMEOUT)
        bench.pid = first.pid
        print(f"  {REPLICAS} replicas on port {first.port}: {pids}", flush=True)
        measured = saturated_in_turns(cluster, get_sides(bench), {**pids, **kube_pids(cluster)}, rounds)
    finally:
        for other in others:
            processes.terminate(other.pid, grace=10)

    def median(key: str, field: str) -> float:
        return round(statistics.median(m[field] for m in measured[key]), 3)

    def ratio(aggregated: str) -> float:
        return round(statistics.median(a["rps"] / d["rps"] for a, d in zip(measured[aggregated],
                                                                           measured["get_direct"], strict=True)), 3)

    return first, {"replicas": REPLICAS, "rounds": rounds,
                   "get": {"aggregated": median("get_aggregated", "rps"), "direct": median("get_direct", "rps"),
                           "ratio": ratio("get_aggregated"),
                           "aggregated_rv0": median("get_rv0_aggregated", "rps"),
                           "ratio_rv0": ratio("get_rv0_aggregated")},
                   "replica_cpu_ms_per_request": {
                       replica: {"get": median("get_aggregated", f"{replica}_cpu_ms"),
                                 "get_rv0": median("get_rv0_aggregated", f"{replica}_cpu_ms")} for replica in pids},
                   "kube_apiserver_cpu_ms_per_request": {key: median(key, "kube-apiserver_cpu_ms")
                                                         for key in measured},
                   "errors": int(sum(m["errors"] for ms in measured.values() for m in ms))}


def summarize_throughput(measured: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Medians of the rounds: requests per second per side, their ratio, and CPU ms per request."""
    def median(key: str, field: str) -> float:
        return round(statistics.median(m[field] for m in measured[key]), 3)

    def ratio(aggregated: str, direct: str) -> float:
        return round(statistics.median(a["rps"] / d["rps"] for a, d in zip(measured[aggregated], measured[direct],
                                                                           strict=True)), 3)

    return {
        "throughput": {"get": {"aggregated": median("get_aggregated", "rps"), "direct": median("get_direct", "rps"),
                               "ratio": ratio("get_aggregated", "get_direct"),
                               "relay": median("get_relay", "rps"), "ratio_relay": ratio("get_relay", "get_direct"),
                               "aggregated_rv0": median("get_rv0_aggregated", "rps"),
                               "ratio_rv0": ratio("get_rv0_aggregated", "get_direct")},
                       "create": {"aggregated": median("create_aggregated", "rps"),
                                  "direct": median("create_direct", "rps"),
                                  "ratio": ratio("create_aggregated", "create_direct")},
                       "clients": CLIENTS, "seconds_per_round": THROUGHPUT_SECONDS, "slot_seconds": SLOT_SECONDS,
                       "rounds": len(measured["get_direct"]),
                       "errors": int(sum(m["errors"] for ms in measured.values() for m in ms))},
        "cpu_ms_per_request": {"get": median("get_aggregated", "service_cpu_ms"),
                               "get_relay": median("get_relay", "relay_cpu_ms"),
                               "get_rv0": median("get_rv0_aggregated", "service_cpu_ms"),
                               "create": median("create_aggregated", "service_cpu_ms")},
        "kube_apiserver_cpu_ms_per_request": {key: median(key, "kube-apiserver_cpu_ms") for key in measured
                                              if "kube-apiserver_cpu_ms" in measured[key][0]},
    }


# ---------------------------------------------------------------------------- one service


def first_list_ms(bench: Bench) -> float:
    """The first list of every Application after the objects were created: it also makes the projections the
    service keeps for later lists (``shared.client.projections``), so the scale point's lists, which follow it,
    measure the steady state, and this one is reported on its own."""
    started = time.perf_counter()
    bench.client.call("GET", bench.app_path(None))
    elapsed = round((time.perf_counter() - started) * 1000, 1)
    print(f"  first list after the creates: {elapsed} ms", flush=True)
    return elapsed


def one_namespace(cluster: Cluster, name: str, stack: Stack, rounds: int, extra_args: tuple[str, ...],
                  points: tuple[int, ...] = POINTS) -> dict[str, Any]:
    extra_args = (*service_identity(cluster), *extra_args)
    running = services.start(cluster, stack.service, extra_args=extra_args)
    try:
        cluster.kubectl("apply", "-f", str(SAMPLES / stack.definition))
        time.sleep(3)
        bench = Bench(cluster, stack, running.pid, rounds, port=running.port)
        baseline = rss_kib(running.pid) / 1024
        bench.seed()
        out: dict[str, Any] = {"baseline_rss_mib": round(baseline, 1), "startup_s": {}, "startup": {}}
        for total in points:
            started = time.monotonic()
            bench.grow(total)
            print(f"{name}: {total} Applications present ({time.monotonic() - started:.0f} s)", flush=True)
            out.setdefault("first_list_ms", {})[str(total)] = first_list_ms(bench)
            bench.scale_point(total)
            running, timing = startup(bench, running, "scale", f"s-{bench.scale_count - 1}", extra_args)
            out["startup_s"][str(total)] = timing["ready_s"]
            out["startup"][str(total)] = timing
        out |= throughput(bench, rounds)
        running, out["throughput_replicas"] = replica_throughput(bench, extra_args, rounds)
        out["scale"], out["rss_mib"] = bench.scale, bench.rss
        return out
    finally:
        services.stop(cluster, stack.service)


def spread(cluster: Cluster, name: str, stack: Stack, extra_args: tuple[str, ...],
           total: int = POINTS[-1]) -> dict[str, Any]:
    extra_args = (*service_identity(cluster), *extra_args)
    running = services.start(cluster, stack.service, extra_args=extra_args)
    try:
        cluster.kubectl("apply", "-f", str(SAMPLES / stack.definition))
        time.sleep(3)
        bench = Bench(cluster, stack, running.pid, 1, port=running.port)
        bench.seed()
        started = time.monotonic()
        grow_spread(bench, total)
        print(f"{name}: {total} Applications over {SPREAD_NAMESPACES} namespaces "
              f"({time.monotonic() - started:.0f} s)", flush=True)
        first = first_list_ms(bench)
        bench.scale_point(total)
        last = total - 2  # the seed is one of them; the last created
        _running, timing = startup(bench, running, f"spread-{last % SPREAD_NAMESPACES}", f"s-{last}", extra_args)
        return {"namespaces": SPREAD_NAMESPACES, "point": bench.scale[-1], "startup": timing,
                "first_list_ms": first}
    finally:
        services.stop(cluster, stack.service)
