"""Turns the results of ``tests.bench`` into ``benchmarks.json`` (SPEC §8's keys exactly), ``benchmarks.md``
and the scale curve ``benchmarks-scale.png``; the full per-round details go to ``perf/bench-details.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIGURES = ("b1_get", "b1_create", "b1_list_1000", "b2_rollout_1000", "b4_watch_p50", "b4_watch_p99")
#: Shown in benchmarks.md, not among SPEC §8's keys.
EXTRA = ("b1_list_1000_rv0", "relay_get", "relay_create", "aggregation_hop")
STACKS = ("helm_agl", "tofu_agl")
GOALS = {"b1_get": 1.0, "b1_create": 1.5, "b1_list_1000": 0.6, "b2_rollout_1000": 1.3, "b4_watch_p99": 1.2}
RSS_GOALS = {"5000": 150, "10000": 250}


def spec_json(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stack in STACKS:
        if stack in results:
            r = results[stack]
            out[stack] = {key: r[key]["ratio"] for key in FIGURES} | {"rss_mib": r["rss_mib"]}
    out["machine"] = results["machine"]
    out["date"] = results["date"]
    return out


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Benchmarks (SPEC §8)",
        "",
        "`nox -s bench` starts, one service at a time, a new cluster of its own (`bench`), the service and one sample",
        "kind (helm_agl: `Redis`, tofu_agl: `VPC`), and measures each operation through the aggregated API against the",
        "same operation on the backing object directly **in the same run**, interleaved round by round; the ratio is",
        "what matters. Each figure is the **median of the rounds' ratios** with their range; what one round averages",
        "is in the last column. Nothing here is asserted by the test suite.",
        "",
        f"Run of {results['date']} ({results['machine']}; the whole run, `python -m tests.bench --out docs` "
        "as `nox -s bench` runs it, took "
        f"{results['duration_s'] / 60:.1f} min). The machine is shared with other work, so absolute times move;"
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
        lines += [f"## {stack}", "", "| benchmark | ratio (median) | range | aggregated | direct | goal | one round |",
                  "|---|---:|---:|---:|---:|---:|---|"]
        for key in FIGURES + tuple(k for k in EXTRA if k in r):
            f = r[key]
            goal = f"≤ {GOALS[key]}" if key in GOALS else ""
            lines.append(f"| {key} | {f['ratio']:.2f} | {f['min']:.2f} to {f['max']:.2f} | {f['aggregated_ms']:.1f} ms"
                         f" | {f['direct_ms']:.1f} ms | {goal} | {f['what']} |")
        if "floors" in r:
            lines += ["", "What the two extra hops alone make of each operation: the *floor* is the direct operation "
                      "through `tests.relay` (`relay_get`, `relay_create`), an aggregated server that does nothing "
                      "but pass the request on to kube-apiserver with the services' own HTTP and TLS stack; *own* is "
                      "what the service adds above it (its caller's authentication and authorization, admission, "
                      "validation, translation, projection, the Event). The *first hop only* is the direct "
                      "operation plus one request the service answers from memory (`aggregation_hop`). Medians of "
                      "the rounds:", "",
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
                          "background, such as the create's Event):", "",
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
        for p in r["scale"]:
            lines.append(f"| {p['applications']} | {p['rss_mib']} | {p['get_ms']} | {p['list_ms']} | "
                         f"{p['direct_list_ms']} |")
        lines.append("")
    lines += ["![scale curve](benchmarks-scale.png)", ""]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cost, rss) = plt.subplots(1, 2, figsize=(11, 4.2))
    for stack in STACKS:
        if stack not in results:
            continue
        points = results[stack]["scale"]
        n = [p["applications"] for p in points]
        cost.plot(n, [p["list_ms"] for p in points], marker="o", label=f"{stack} list")
        cost.plot(n, [p["direct_list_ms"] for p in points], marker="x", linestyle="--", label=f"{stack} direct list")
        cost.plot(n, [p["get_ms"] for p in points], marker="s", label=f"{stack} get")
        rss.plot(n, [p["rss_mib"] for p in points], marker="o", label=stack)
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
    (out / "benchmarks.json").write_text(json.dumps(spec_json(results), indent=1) + "\n")
    (out / "design" / "perf").mkdir(parents=True, exist_ok=True)
    (out / "design" / "perf" / "bench-details.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "benchmarks.md").write_text(markdown(results))
    plot(results, out / "benchmarks-scale.png")
