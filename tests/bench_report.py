"""Turns the results of ``tests.bench`` into ``benchmarks.json`` (SPEC §8's keys exactly), ``benchmarks.md``
and the scale curve ``benchmarks-scale.png``; the full per-round details go to ``perf/bench-details.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIGURES = ("b1_get", "b1_create", "b1_list_1000", "b2_rollout_1000", "b4_watch_p50", "b4_watch_p99", "b1_get_rv0")
#: Shown in benchmarks.md, not among SPEC §8's keys.
EXTRA = ("b1_list_1000_rv0", "relay_get", "relay_create", "aggregation_hop")
STACKS = ("helm_agl", "tofu_agl")
GOALS = {"b1_get_rv0": 1.0, "b1_create": 1.8, "b1_list_1000": 0.6, "b2_rollout_1000": 1.3, "b4_watch_p99": 1.2}
#: What a consistent get may add above the floor of the two hops (tests.relay), ms.
OWN_GET_GOAL_MS = 0.1
RSS_GOALS = {"5000": 150, "10000": 250, "50000": 400}
STARTUP_GOALS = {"10000": 3.0, "50000": 15.0}
KIB_PER_APPLICATION_GOAL = 5.0
LIST_AT_SCALE_GOAL = 0.2
GET_THROUGHPUT_GOAL = 0.5


def merged(results: dict[str, Any], out: Path) -> dict[str, Any]:
    """This run's figures over the last run's (``design/perf/bench-details.json``): a part that was not run
    (``--parts``) keeps the figures of the last run that had it, with that run's date."""
    details = out / "design" / "perf" / "bench-details.json"
    previous: dict[str, Any] = json.loads(details.read_text()) if details.exists() else {}
    combined = {**previous, **{k: v for k, v in results.items() if k not in STACKS}}
    for stack in STACKS:
        now, before = results.get(stack, {}), previous.get(stack, {})
        spec = now if "b1_get" in now else {k: v for k, v in before.items() if k != "at_scale"}
        at_scale = now.get("at_scale", before.get("at_scale"))
        if spec or at_scale:
            combined[stack] = {**spec, **({"at_scale": at_scale} if at_scale else {})}
    return combined


def spec_json(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stack in STACKS:
        if stack not in results:
            continue
        r = results[stack]
        figures = {key: r[key]["ratio"] for key in FIGURES if key in r}
        if "floors" in r:
            figures["b1_get_own_ms"] = r["floors"]["b1_get"]["own_ms"]
        rss = dict(r.get("rss_mib", {}))
        at = r.get("at_scale")
        if at:
            rss |= {count: mib for count, mib in at["rss_mib"].items() if count not in rss}
            figures |= {"startup_s": at["startup_s"],
                        "startup_floor_s": {count: start["floor_s"] for count, start in at["startup"].items()
                                            if "floor_s" in start},
                        "throughput": {op: {"aggregated": t["aggregated"], "direct": t["direct"]}
                                       for op, t in at["throughput"].items() if op in ("get", "create")},
                        "cpu_ms_per_request": at["cpu_ms_per_request"]}
            if "throughput_replicas" in at:
                replicas = at["throughput_replicas"]
                figures["throughput_replicas"] = {"replicas": replicas["replicas"],
                                                  "get": {k: replicas["get"][k] for k in ("aggregated", "direct")}}
        out[stack] = {**figures, "rss_mib": rss}
    out["machine"] = results.get("machine")
    out["date"] = results.get("date")
    if "at_scale_run" in results:
        out["at_scale_date"] = results["at_scale_run"]["date"]
    return out


def goals(r: dict[str, Any]) -> list[tuple[str, float, str, bool]]:
    """Every SPEC §8 goal with this run's figure: (what, figure, goal, met)."""
    rows = [(f"{key} (ratio)", r[key]["ratio"], f"≤ {goal}", r[key]["ratio"] <= goal)
            for key, goal in GOALS.items() if key in r]
    if "floors" in r:
        own = r["floors"]["b1_get"]["own_ms"]
        rows.insert(0, ("consistent get, ms above the relay floor", own, f"≤ {OWN_GET_GOAL_MS}",
                        own <= OWN_GET_GOAL_MS))
    base = r.get("baseline_rss_mib")
    for count, mib in r.get("rss_mib", {}).items():
        if count in RSS_GOALS:
            rows.append((f"RSS at {count}, MiB", mib, f"≤ {RSS_GOALS[count]}", mib <= RSS_GOALS[count]))
        if base is not None and int(count) >= 10000:
            per = round((mib - base) * 1024 / int(count), 2)
            rows.append((f"KiB per Application at {count}", per, f"≤ {KIB_PER_APPLICATION_GOAL}",
                         per <= KIB_PER_APPLICATION_GOAL))
    at = r.get("at_scale")
    if at:
        for point in (*at["scale"], at["spread"]["point"]):
            n = point["applications"]
            per = round((point["rss_mib"] - at["baseline_rss_mib"]) * 1024 / n, 2)
            where = "over 100 namespaces" if point is at["spread"]["point"] else "in one namespace"
            if str(n) in RSS_GOALS and n > 10000:
                rows.append((f"RSS at {n} {where}, MiB", point["rss_mib"], f"≤ {RSS_GOALS[str(n)]}",
                             point["rss_mib"] <= RSS_GOALS[str(n)]))
                rows.append((f"KiB per Application at {n} {where}", per, f"≤ {KIB_PER_APPLICATION_GOAL}",
                             per <= KIB_PER_APPLICATION_GOAL))
            if n == 50000:
                ratio = list_ratio(point)
                rows.append((f"list of all {n} {where} (ratio{floor_list_note(point)})", ratio,
                             f"≤ {LIST_AT_SCALE_GOAL}", ratio <= LIST_AT_SCALE_GOAL))
        for count, seconds in ((c, s) for c, s in at["startup_s"].items() if c in STARTUP_GOALS):
            rows.append((f"start-up to Ready with {count}, s{floor_note(at['startup'][count])}", seconds,
                         f"≤ {STARTUP_GOALS[count]}", seconds <= STARTUP_GOALS[count]))
        spread_start = at["spread"]["startup"]["ready_s"]
        rows.append((f"start-up to Ready with 50000 over 100 namespaces, s{floor_note(at['spread']['startup'])}",
                     spread_start, f"≤ {STARTUP_GOALS['50000']}", spread_start <= STARTUP_GOALS["50000"]))
        get = at["throughput"]["get"]
        relayed = f"; floor: through tests.relay, {get['ratio_relay']}" if "ratio_relay" in get else ""
        rows.append((f"get throughput at saturation, 16 clients (ratio{relayed})", get["ratio"],
                     f"≥ {GET_THROUGHPUT_GOAL}", get["ratio"] >= GET_THROUGHPUT_GOAL))
    return rows


def list_ratio(point: dict[str, Any]) -> float:
    """A list of every Application through the service over the same list directly."""
    return round(float(point["list_ms"]) / float(point["direct_list_ms"]), 3)


def received(point: dict[str, Any]) -> str:
    """The two lists until their answers were received (before this client decoded them), and their ratio."""
    if "list_received_ms" not in point:
        return ""
    mine, direct = float(point["list_received_ms"]), float(point["direct_list_received_ms"])
    return f"{mine:.0f} / {direct:.0f} ms ({mine / direct:.3f})"


def floor_list(point: dict[str, Any]) -> str:
    """The same answer through aggregation from a server that holds it in memory: ms, and over the direct list."""
    if "floor_list_ms" not in point:
        return ""
    return f"{point['floor_list_ms']} ms ({float(point['floor_list_ms']) / float(point['direct_list_ms']):.3f})"


def floor_list_note(point: dict[str, Any]) -> str:
    """What a goal row says of a list's floor."""
    shown = floor_list(point)
    return f"; floor: the same answer from memory, {shown}" if shown else ""


def floor_note(start: dict[str, Any]) -> str:
    """What a goal row says of a start-up's floor, and of kube-apiserver's collections during each."""
    if "floor_s" not in start:
        return ""
    collected = ""
    if "kube_apiserver_gc_cpu_s" in start and "floor_kube_apiserver_gc_cpu_s" in start:
        collected = (f"; kube-apiserver's garbage collector: {start['kube_apiserver_gc_cpu_s']} CPU s during the "
                     f"start-up, {start['floor_kube_apiserver_gc_cpu_s']} during the floor")
    return f" (floor: a bare paged list from a new process, {start['floor_s']} s{collected})"


def floor(start: dict[str, Any]) -> str:
    """A start-up's floor (:func:`tests.bench_scale.startup_floor`): the bare process's time, and of it the list."""
    if "floor_s" not in start:
        return ""
    return f"{start['floor_s']} s ({start['floor_list_s']} s)"


def gc_share(start: dict[str, Any], key: str) -> str:
    """Of kube-apiserver's CPU, its garbage collector's (runs before round 25 did not read it)."""
    return f" (GC {start[key]})" if key in start else ""


def scale_points(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The scale curve: the spec part's points, then the scale part's larger ones (one namespace)."""
    points = {p["applications"]: p for p in r.get("scale", [])}
    for p in (r.get("at_scale") or {}).get("scale", []):
        points.setdefault(p["applications"], p)
    return [points[n] for n in sorted(points)]


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Benchmarks (SPEC §8)",
        "",
        "`nox -s bench` starts, one service at a time, a new cluster of its own (`bench`), the service and one sample",
        "kind (helm_agl: `Redis`, tofu_agl: `VPC`), and measures each operation through the aggregated API against the",
        "same operation on the backing object directly **in the same run**: in B1 the sides take turns request by",
        "request, elsewhere round by round; the ratio is what matters. Each figure is the **median of the rounds'",
        "ratios** with their range; what one round averages is in the last column. Nothing here is asserted by the",
        "test suite. The service (and `tests.relay`, the floor) calls kube-apiserver with a ServiceAccount's token, as",
        "in a pod; the bench's client, and so the first hop and every direct operation, with the admin's client",
        "certificate.",
        "",
        f"SPEC §8's ratios: run of {results['date']} ({results['machine']}; this part, `python -m tests.bench "
        f"--parts spec --out docs`, took {results['duration_s'] / 60:.1f} min)."
        + (f" At scale (50 000 Applications, start-up, throughput; `--parts scale`): run of "
           f"{results['at_scale_run']['date']} ({results['at_scale_run']['machine']}; "
           f"{results['at_scale_run']['duration_s'] / 60:.1f} min)." if "at_scale_run" in results else "")
        + " `nox -s bench` runs both parts, one after the other. Absolute times move with the machine's load;"
        " ratios much less.",
        "",
        "Profiles before and after, what changed and why each goal is or is not met:",
        "[design/perf/README.md](design/perf/README.md).",
        "",
    ]
    for stack in STACKS:
        if stack not in results:
            continue
        r = results[stack]
        lines += [f"## {stack}", "", "Every goal of SPEC §8 with this run's figure:", "",
                  "| goal | figure | target | met |", "|---|---:|---:|:---:|"]
        lines += [f"| {what} | {figure} | {target} | {'yes' if met else '**no**'} |"
                  for what, figure, target, met in goals(r)]
        lines += ["", "| benchmark | ratio (median) | range | aggregated | direct | goal | one round |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for key in tuple(k for k in FIGURES + EXTRA if k in r):
            f = r[key]
            goal = f"≤ {GOALS[key]}" if key in GOALS else ""
            lines.append(f"| {key} | {f['ratio']:.2f} | {f['min']:.2f} to {f['max']:.2f} | {f['aggregated_ms']:.1f} ms"
                         f" | {f['direct_ms']:.1f} ms | {goal} | {f['what']} |")
        if "floors" in r:
            lines += ["", "What the two extra hops alone make of each operation: the *floor* is the direct operation "
                      "through `tests.relay` (`relay_get`, `relay_create`), an aggregated server that does nothing "
                      "but pass the request on to kube-apiserver with the services' own HTTP and TLS stack; *own* is "
                      "what the service adds above it (its caller's authentication and authorization, admission, "
                      "validation, translation, projection): the median request through the service less the median "
                      "relayed one, the three sides taking turns request by request. The *first hop only* is the "
                      "direct operation plus one request the service answers from memory (`aggregation_hop`). "
                      "Medians of the rounds:", "",
                      "| benchmark | ratio | floor: the two hops alone (relay) | own | first hop only |",
                      "|---|---:|---:|---:|---:|"]
            for key, floor in r["floors"].items():
                lines.append(f"| {key} | {r[key]['ratio']:.2f} | {floor['floor_ratio']:.2f} | "
                             f"{floor['own_ms']:.2f} ms | {floor['proxied_floor_ratio']:.2f} |")
            if all("steps_ms" in floor for floor in r["floors"].values()):
                lines += ["", "Where one operation through the service goes, from the service's own `/metrics` read "
                          "before and after each round (`apiserver_request_duration_seconds` for its handler, "
                          "`agl_kube_request_duration_seconds` for its requests on the backing resource); medians "
                          "of the rounds, ms per operation. *Outside the service*: the caller's time less the "
                          "handler's, i.e. kube-apiserver's proxying both ways and the first hop's HTTP and TLS. "
                          "*Its steps*: the handler's time less its backing requests (authentication and "
                          "authorization of the caller, admission, validation, translation, field management, "
                          "projection). *Its kube requests*, and what they took over the same operation done "
                          "directly (the second hop, and a kube-apiserver busier with what the service does in the "
                          "background, such as the informer's watch of what it wrote):", "",
                          "| benchmark | through the service | outside the service | its steps | its kube requests | "
                          "direct | kube requests over direct |", "|---|---:|---:|---:|---:|---:|---:|"]
                for key, floor in r["floors"].items():
                    lines.append(f"| {key} | {r[key]['aggregated_ms']:.2f} | {floor['outside_ms']:.2f} | "
                                 f"{floor['steps_ms']:.2f} | {floor['kube_ms']:.2f} | {r[key]['direct_ms']:.2f} | "
                                 f"{floor['kube_over_direct_ms']:.2f} |")
        lines += ["", f"Resident memory (baseline before any Application: {r['baseline_rss_mib']} MiB):", "",
                  "| Applications | RSS | per Application over baseline | goal |", "|---:|---:|---:|---:|"]
        for count, mib in r["rss_mib"].items():
            per = (mib - r["baseline_rss_mib"]) * 1024 / int(count)
            goal = f"≤ {RSS_GOALS[count]} MiB" if count in RSS_GOALS else ""
            lines.append(f"| {count} | {mib} MiB | {per:.1f} KiB | {goal} |")
        lines += ["", "Scale curve (one get: mean of 20, median of 3; one list of every Application: median of 3,"
                  " 2 at 10 000):", "", "| Applications | RSS MiB | get ms | list ms | direct list ms |",
                  "|---:|---:|---:|---:|---:|"]
        for p in scale_points(r):
            lines.append(f"| {p['applications']} | {p['rss_mib']} | {p['get_ms']} | {p['list_ms']} | "
                         f"{p['direct_list_ms']} |")
        lines.append("")
        if r.get("at_scale"):
            lines += at_scale_markdown(r["at_scale"])
    lines += ["![scale curve](benchmarks-scale.png)", ""]
    return "\n".join(lines)


def at_scale_markdown(at: dict[str, Any]) -> list[str]:
    """The scale part: 10 000 and 50 000 Applications in one namespace, 50 000 over 100 namespaces."""
    lines = ["### At scale", "", "Backing objects created directly; the service's RSS, a list of every Application "
             "through it (from its cache) and the same list directly, each timed until this client decoded its answer "
             "with Python's json module, its collector paused (and until it was received, before decoding), then a "
             "restart timed to Ready "
             "(`/readyz` "
             "answers 200 and a watch from resourceVersion=0 on the service's own port delivers the last "
             "Application created). Before each restart, the start-up's floor: a new process that receives the "
             "paged list the service's informer asks for, with the same HTTP client, and does nothing else "
             "(`tests.startup_floor`), timed from its start to its exit, and from its first request to its last "
             "page. A list's floor: the service's answer, held in memory by `tests.relay` and listed through its "
             "own APIService in turns with the two lists, timed the same way:", "",
             "| Applications | RSS MiB | KiB each over baseline | first list ms | list ms | direct list ms "
             "| list ratio | of it, until received (ratio) | list floor ms (ratio) | start-up to Ready "
             "| of which /readyz "
             "| service / kube-apiserver CPU s until Ready (of it, kube-apiserver's garbage collector) "
             "| floor: a bare paged list, s (of it, the list) | kube-apiserver CPU s for the floor (of it, GC) "
             "| RSS after the restart |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    firsts = at.get("first_list_ms", {})
    rows = [(str(p["applications"]), p, at["startup"][str(p["applications"])], firsts.get(str(p["applications"])))
            for p in at["scale"]]
    rows.append((f"{at['spread']['point']['applications']} over {at['spread']['namespaces']} namespaces",
                 at["spread"]["point"], at["spread"]["startup"], at["spread"].get("first_list_ms")))
    for label, p, start, first in rows:
        per = (p["rss_mib"] - at["baseline_rss_mib"]) * 1024 / p["applications"]
        lines.append(f"| {label} | {p['rss_mib']} | {per:.2f} | {first if first is not None else ''} | "
                     f"{p['list_ms']} | {p['direct_list_ms']} | {list_ratio(p):.3f} | {received(p)} | "
                     f"{floor_list(p)} | {start['ready_s']} s | "
                     f"{start['readyz_s']} s | {start.get('service_cpu_s', '')} / "
                     f"{start.get('kube_apiserver_cpu_s', '')}{gc_share(start, 'kube_apiserver_gc_cpu_s')} | "
                     f"{floor(start)} | {start.get('floor_kube_apiserver_cpu_s', '')}"
                     f"{gc_share(start, 'floor_kube_apiserver_gc_cpu_s')} | "
                     f"{start['rss_mib_after_start']} MiB |")
    t = at["throughput"]
    cpu = at["cpu_ms_per_request"]
    kube = at.get("kube_apiserver_cpu_ms_per_request", {})
    lines += ["", f"Throughput at saturation: {t['clients']} client processes, one keep-alive connection each, "
              f"{t['seconds_per_round']:.0f} s per side and round, the sides interleaved in slots of "
              f"{t.get('slot_seconds', t['seconds_per_round']):g} s (the reads in one run, then the creates, each "
              "from quiet processes); medians of "
              f"{t['rounds']} rounds (requests that failed: {t['errors']}). CPU per request from `/proc` of the "
              "service and of kube-apiserver:", "",
              "| operation | through the service, req/s | directly, req/s | ratio | service CPU ms per request | "
              "kube-apiserver CPU ms per request, through / direct |", "|---|---:|---:|---:|---:|---:|"]
    for label, op, agg, direct, ratio, cpu_key in (
            ("get (consistent)", "get", "aggregated", "direct", "ratio", "get"),
            ("get, resourceVersion=0", "get", "aggregated_rv0", "direct", "ratio_rv0", "get_rv0"),
            ("create", "create", "aggregated", "direct", "ratio", "create")):
        kube_key = {"get": "get_aggregated", "get_rv0": "get_rv0_aggregated", "create": "create_aggregated"}[cpu_key]
        direct_key = "create_direct" if op == "create" else "get_direct"
        lines.append(f"| {label} | {t[op][agg]} | {t[op][direct]} | {t[op][ratio]:.3f} | {cpu[cpu_key]} | "
                     f"{kube.get(kube_key, '')} / {kube.get(direct_key, '')} |")
    if "relay" in t["get"]:
        lines.append(f"| get (consistent) through tests.relay, which only passes it on (the floor) | "
                     f"{t['get']['relay']} | {t['get']['direct']} | {t['get']['ratio_relay']:.3f} | "
                     f"{cpu.get('get_relay', '')} (the relay's) | {kube.get('get_relay', '')} / "
                     f"{kube.get('get_direct', '')} |")
    if replicas := at.get("throughput_replicas"):
        lines += ["", replica_line(replicas)]
    return [*lines, ""]


def replica_line(r: dict[str, Any]) -> str:
    """The gets through several replicas of the service on one port, against direct gets in the same rounds."""
    get, kube = r["get"], r["kube_apiserver_cpu_ms_per_request"]
    per_replica = ", ".join(f"{name} {cpu['get']} / {cpu['get_rv0']}"
                            for name, cpu in r["replica_cpu_ms_per_request"].items())
    return (f"The same gets through {r['replicas']} replicas of the service on its one port (`--reuse-port`, the "
            f"kernel spreading kube-apiserver's connections; leader election on), medians of {r['rounds']} rounds: "
            f"consistent {get['aggregated']} req/s against {get['direct']} directly, ratio **{get['ratio']:.3f}**; "
            f"resourceVersion=0 {get['aggregated_rv0']} req/s, ratio {get['ratio_rv0']:.3f}. Each replica's CPU ms "
            f"per get, consistent / rv=0: {per_replica}; kube-apiserver's per consistent get "
            f"{kube.get('get_aggregated', '')} through, {kube.get('get_direct', '')} direct "
            f"(requests that failed: {r['errors']}).")


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cost, rss) = plt.subplots(1, 2, figsize=(11, 4.2))
    for stack in STACKS:
        if stack not in results:
            continue
        points = scale_points(results[stack])
        n = [p["applications"] for p in points]
        cost.plot(n, [p["list_ms"] for p in points], marker="o", label=f"{stack} list")
        cost.plot(n, [p["direct_list_ms"] for p in points], marker="x", linestyle="--", label=f"{stack} direct list")
        cost.plot(n, [p["get_ms"] for p in points], marker="s", label=f"{stack} get")
        rss.plot(n, [p["rss_mib"] for p in points], marker="o", label=stack)
        spread = (results[stack].get("at_scale") or {}).get("spread")
        if spread:
            rss.plot([spread["point"]["applications"]], [spread["point"]["rss_mib"]], marker="^", linestyle="",
                     label=f"{stack}, over {spread['namespaces']} namespaces")
            cost.plot([spread["point"]["applications"]], [spread["point"]["list_ms"]], marker="^", linestyle="",
                      label=f"{stack} list, over {spread['namespaces']} namespaces")
    for ax, title, unit in ((cost, "cost of one operation", "ms"), (rss, "service RSS", "MiB")):
        ax.set_xscale("log")
        ax.set_title(title)
        ax.set_xlabel("Applications")
        ax.set_ylabel(unit)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    cost.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results = merged(results, out)
    (out / "benchmarks.json").write_text(json.dumps(spec_json(results), indent=1) + "\n")
    (out / "design" / "perf").mkdir(parents=True, exist_ok=True)
    (out / "design" / "perf" / "bench-details.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "benchmarks.md").write_text(markdown(results))
    plot(results, out / "benchmarks-scale.png")
