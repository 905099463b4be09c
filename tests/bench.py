"""Benchmarks of SPEC §8, reported as ratios against the direct operation in the same run.

``nox -s bench [-- --count N]`` starts a cluster named ``bench``, helm_agl, one Helm kind, and measures:

- B1 create / get / list of Applications through aggregation vs the same on HelmReleases directly;
- B2 rolling a definition change out to every instance vs a raw patch loop with the same concurrency;
- B3 helm_agl's resident memory with N Applications (absolute, and per Application);
- B4 watch latency, backing change -> event, through aggregation vs a direct HelmRelease watch (p50/p99).

These are measurements, never assertions: the numbers go to stdout (and ``--json`` to a file).
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from localcluster import crds, services
from localcluster.cluster import Cluster

SAMPLES = Path(__file__).resolve().parents[1] / "deploy" / "samples" / "definitions"
NS = "bench"
APPS = "/apis/apps.cozystack.io/v1alpha1"
HRS = "/apis/helm.toolkit.fluxcd.io/v2"


class Client:
    """One keep-alive HTTPS connection to kube-apiserver as admin (same cost for both sides)."""

    def __init__(self, cluster: Cluster) -> None:
        self.ctx = ssl.create_default_context(cafile=str(cluster.pki_dir / "ca.crt"))
        self.ctx.load_cert_chain(str(cluster.pki_dir / "admin.crt"), str(cluster.pki_dir / "admin.key"))
        self.port = int(cluster.server.rsplit(":", 1)[1])
        self.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=60)

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers={"Content-Type": content_type,
                                                            "Accept": "application/json"})
        resp = self.conn.getresponse()
        raw = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {raw[:300]!r}")
        return json.loads(raw) if raw else None

    def stream(self, path: str) -> http.client.HTTPResponse:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=120)
        conn.request("GET", path, headers={"Accept": "application/json"})
        return conn.getresponse()


def timed(fn: Callable[[], Any], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def ratio_line(name: str, through: float, direct: float, unit: str = "ms") -> dict[str, Any]:
    scale = 1000 if unit == "ms" else 1
    print(f"{name:<34} aggregated {through * scale:9.2f} {unit}   direct {direct * scale:9.2f} {unit}   "
          f"ratio {through / direct:6.2f}", flush=True)
    return {"name": name, "aggregated": through, "direct": direct, "ratio": through / direct}


def b1(client: Client, count: int, results: list[dict[str, Any]]) -> None:
    names = [f"b1-{i}" for i in range(count)]
    start = time.perf_counter()
    for name in names:
        client.call("POST", f"{APPS}/namespaces/{NS}/redises", {
            "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Redis",
            "metadata": {"name": name, "namespace": NS}, "spec": {"replicas": 2}})
    aggregated = (time.perf_counter() - start) / count
    template = client.call("GET", f"{HRS}/namespaces/{NS}/helmreleases/redis-{names[0]}")
    start = time.perf_counter()
    for name in names:
        body = {"apiVersion": template["apiVersion"], "kind": "HelmRelease",
                "metadata": {"name": f"direct-{name}", "namespace": NS,
                             "labels": {"bench": "direct"}}, "spec": template["spec"]}
        client.call("POST", f"{HRS}/namespaces/{NS}/helmreleases?fieldValidation=Strict", body)
    direct = (time.perf_counter() - start) / count
    results.append(ratio_line(f"B1 create (x{count})", aggregated, direct))
    repeat = min(count, 200)
    results.append(ratio_line(
        f"B1 get (x{repeat})",
        timed(lambda: client.call("GET", f"{APPS}/namespaces/{NS}/redises/{names[0]}"), repeat),
        timed(lambda: client.call("GET", f"{HRS}/namespaces/{NS}/helmreleases/redis-{names[0]}"), repeat)))
    results.append(ratio_line(
        f"B1 list of {count} (x10)",
        timed(lambda: client.call("GET", f"{APPS}/namespaces/{NS}/redises"), 10),
        timed(lambda: client.call("GET", f"{HRS}/namespaces/{NS}/helmreleases?labelSelector="
                                  "apps.cozystack.io%2Fapplication.kind%3DRedis"), 10)))


def b2(cluster: Cluster, client: Client, count: int, results: list[dict[str, Any]]) -> None:
    defn = yaml.safe_load((SAMPLES / "redis.yaml").read_text())
    defn["spec"]["release"]["chartRef"]["name"] = "redis-bench-v2"

    def rolled() -> int:
        items = client.call("GET", f"{HRS}/namespaces/{NS}/helmreleases?labelSelector="
                            "apps.cozystack.io%2Fapplication.kind%3DRedis")["items"]
        return sum(1 for hr in items if hr["spec"]["chartRef"]["name"] == "redis-bench-v2")

    start = time.perf_counter()
    cluster.kubectl("apply", "-f", "-", input=json.dumps(defn))
    while rolled() < count:
        time.sleep(0.05)
    aggregated = time.perf_counter() - start
    direct_names = [hr["metadata"]["name"] for hr in client.call(
        "GET", f"{HRS}/namespaces/{NS}/helmreleases?labelSelector=bench%3Ddirect")["items"]]
    local = threading.local()

    def patch(name: str) -> None:
        if not hasattr(local, "client"):
            local.client = Client(cluster)
        local.client.call("PATCH", f"{HRS}/namespaces/{NS}/helmreleases/{name}",
                          {"spec": {"chartRef": {"name": "redis-bench-v2"}}}, "application/merge-patch+json")

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(patch, direct_names))
    direct = time.perf_counter() - start
    results.append(ratio_line(f"B2 rollout to {count}", aggregated, direct, unit="s"))


def b3(service: services.Running, count: int, baseline_kib: int, results: list[dict[str, Any]]) -> None:
    rss = rss_kib(service.pid)
    print(f"B3 helm_agl RSS with {count} Applications: {rss / 1024:.1f} MiB "
          f"(baseline {baseline_kib / 1024:.1f} MiB, {(rss - baseline_kib) / max(count, 1):.2f} KiB each)")
    results.append({"name": "B3 rss", "rss_kib": rss, "baseline_kib": baseline_kib, "count": count})


def b4(client: Client, samples: int, results: list[dict[str, Any]]) -> None:
    target = "b1-0"

    def latencies(path: str) -> list[float]:
        sent: dict[str, float] = {}
        seen: list[float] = []
        resp = client.stream(path)
        done = threading.Event()

        def reader() -> None:
            for line in resp:
                event = json.loads(line)
                marker = (event["object"].get("metadata", {}).get("annotations") or {})
                for key, value in marker.items():
                    if key.endswith("bench-marker") and value in sent and value not in done_markers:
                        done_markers.add(value)
                        seen.append(time.perf_counter() - sent[value])
                if len(seen) >= samples:
                    done.set()
                    return

        done_markers: set[str] = set()
        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        time.sleep(0.5)
        for i in range(samples):
            marker = f"{path[-8:]}-{i}-{time.time_ns()}"
            sent[marker] = time.perf_counter()
            client.call("PATCH", f"{HRS}/namespaces/{NS}/helmreleases/redis-{target}",
                        {"metadata": {"annotations": {"apps.cozystack.io-bench-marker": marker}}},
                        "application/merge-patch+json")
            time.sleep(0.02)
        done.wait(30)
        resp.close()
        return seen

    through = latencies(f"{APPS}/namespaces/{NS}/redises?watch=true&fieldSelector=metadata.name%3D{target}")
    direct = latencies(f"{HRS}/namespaces/{NS}/helmreleases?watch=true&fieldSelector=metadata.name%3Dredis-{target}")
    for label, pick in (("p50", 0.5), ("p99", 0.99)):
        a = statistics.quantiles(through, n=100)[int(pick * 100) - 1] if len(through) > 1 else through[0]
        d = statistics.quantiles(direct, n=100)[int(pick * 100) - 1] if len(direct) > 1 else direct[0]
        results.append(ratio_line(f"B4 watch latency {label} ({len(through)})", a, d))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--count", type=int, default=1000, help="Applications to create (default %(default)s)")
    parser.add_argument("--watch-samples", type=int, default=200)
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    cluster = Cluster("bench")
    cluster.destroy()
    cluster = Cluster("bench")
    cluster.up(fresh=True)
    try:
        crds.install(cluster)
        service = services.start(cluster, services.HELM_AGL)
        cluster.kubectl("create", "namespace", NS)
        cluster.kubectl("apply", "-f", str(SAMPLES / "redis.yaml"))
        time.sleep(3)
        baseline = rss_kib(service.pid)
        client = Client(cluster)
        results: list[dict[str, Any]] = []
        print(f"benchmarks with {args.count} Applications (helm_agl pid {service.pid})", flush=True)
        b1(client, args.count, results)
        b3(service, args.count, baseline, results)
        b4(client, args.watch_samples, results)
        b2(cluster, client, args.count, results)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    finally:
        services.stop(cluster, services.HELM_AGL)
        cluster.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
