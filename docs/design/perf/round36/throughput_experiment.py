"""Round 36: why kube-apiserver's CPU per consistent get through a service doubles in some throughput rounds.

Run from the repository's root with the bench's environment::

    PYTHONPATH=. .nox/bench/bin/python docs/design/perf/round36/throughput_experiment.py tofu_agl \
        [applications] [rounds] [out]

A fresh bench cluster with ``applications`` Applications (default 1000), then ``rounds`` rounds of the bench's
saturated gets (consistent through the service, through tests.relay, and directly), with a burst of creates
through the service between rounds as the bench has. For each side: the bench's figures (requests per second,
CPU ms per request of each process, TCP connections opened, the CPU seconds of kube-apiserver's garbage
collector meanwhile), and, in the first half of the rounds, kube-apiserver's CPU profile over the same seconds
(``/debug/pprof``), written to ``out`` (default /tmp/round36) for ``go tool pprof -top``. In the second half,
each side starts right after a collection of kube-apiserver's heap (``/debug/pprof/heap?gc=1`` runs one).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from localcluster import services
from localcluster.cluster import Cluster

from tests.bench import SAMPLES, STACKS, Bench, Client, on_fresh_cluster, relay, service_identity, wait_quiet
from tests.bench_scale import THROUGHPUT_SECONDS, collector_cpu_seconds, get_sides, kube_pids, saturate


def profile(cluster: Cluster, seconds: float, out: Path, started: threading.Event) -> threading.Thread:
    """kube-apiserver's CPU profile over the next ``seconds``, fetched in a thread into ``out``."""
    def fetch() -> None:
        client = Client(cluster)
        started.set()
        out.write_bytes(client.fetch("GET", f"/debug/pprof/profile?seconds={int(seconds)}"))

    thread = threading.Thread(target=fetch)
    thread.start()
    return thread


def measure(cluster: Cluster, name: str, applications: int, rounds: int, out: Path) -> dict[str, Any]:
    stack = STACKS[name]
    extra = service_identity(cluster)
    running = services.start(cluster, stack.service, extra_args=extra)
    try:
        cluster.kubectl("apply", "-f", str(SAMPLES / stack.definition))
        time.sleep(3)
        bench = Bench(cluster, stack, running.pid, 1, port=running.port)
        bench.seed()
        bench.grow(applications)
        sides = get_sides(bench)
        relayed = bench.relay_path("scale", stack.prefix + "s-0")
        sides = {"get_aggregated": sides["get_aggregated"], "get_direct": sides["get_direct"],
                 "get_relay": lambda client, _i: client.call("GET", relayed)}

        def create(client: Client, i: int) -> Any:
            return client.call("POST", bench.app_path("throughput"), bench.app("throughput", f"x-{i}"))

        bench.client.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": "throughput"}})
        measured: list[dict[str, Any]] = []
        with relay(cluster, stack) as relay_pid:
            pids = {"service": bench.pid, "relay": relay_pid, **kube_pids(cluster)}
            run = 0
            for r in range(rounds):
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                for key in order:
                    waited = wait_quiet(*pids.values(), below=0.1, window=1.0, timeout=60.0)
                    collected = r >= rounds // 2
                    if collected:
                        bench.client.fetch("GET", "/debug/pprof/heap?gc=1")
                    gc_before = collector_cpu_seconds(bench.client)
                    started = threading.Event()
                    path = out / f"{name}-r{r}-{key}.pprof"
                    thread = profile(cluster, THROUGHPUT_SECONDS + 1, path, started) if not collected else None
                    if thread is not None:
                        started.wait()
                    figures = saturate(cluster, {key: sides[key]}, pids, run)[key]
                    if thread is not None:
                        thread.join()
                    gc_ms = (collector_cpu_seconds(bench.client) - gc_before) * 1000 / max(figures["requests"], 1)
                    run += 1
                    measured.append({"round": r, "side": key, "waited": waited, "collected_first": collected,
                                     "kube_gc_cpu_ms": round(gc_ms, 3), **figures})
                    print(json.dumps(measured[-1]), flush=True)
                wait_quiet(*pids.values(), below=0.1, window=1.0, timeout=60.0)
                figures = saturate(cluster, {"create": create}, pids, 1000 + r)["create"]
                measured.append({"round": r, "side": "create_aggregated", **figures})
                print(json.dumps(measured[-1]), flush=True)
        return {"measured": measured}
    finally:
        services.stop(cluster, stack.service)


def main() -> None:
    name = sys.argv[1]
    applications = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    out = Path(sys.argv[4] if len(sys.argv) > 4 else "/tmp/round36")
    out.mkdir(parents=True, exist_ok=True)
    result = on_fresh_cluster(lambda cluster: measure(cluster, name, applications, rounds, out))
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
