"""`berth plan-capacity` on the synthetic day and on the Azure sample: what to buy for a growth
forecast, how many replays the search needed, how long it took; writes the "## plan-capacity"
section of benchmarks/results/insight.md (the rest of that file is left as it is) and each
run's acceptance curve as a PNG beside it.

    PYTHONPATH=src python benchmarks/bench_capacity_plan.py [--only synthetic|azure] [--workers 2]

The Azure sample is found as `berth simulate` finds it ($BERTH_AZURE_TRACE_DIR, data/, ...);
without it the Azure run is skipped and the section says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

from berth.cli.plan_capacity import build_problem, run_plan
from berth.sim.azure import find_azure_dir
from berth.sim.capacity_report import CLAIMS, money, plan_data, plot_curve
from berth.sim.trace import TraceError

RESULTS = Path(__file__).resolve().parent / "results"
INSIGHT = RESULTS / "insight.md"
HEADING = "## plan-capacity"

RUNS: dict[str, dict[str, Any]] = {
    "synthetic": {
        "trace": "synthetic",
        "fleet": "90xstd-2s+11xssd-2s+14xdpdk-2s",
        "offers": ["std-2s:9000", "ssd-2s:12000", "dpdk-2s:15000"],
        "growth": 1.3,
        "acceptance": 0.995,
        "evictions": None,
    },
    "green-field": {
        "trace": "synthetic",
        "days": 0.25,
        "fleet": "none",
        "offers": ["std-2s:9000", "ssd-2s:12000", "dpdk-2s:15000"],
        "growth": 1.0,
        "acceptance": 0.995,
        "evictions": None,
    },
    "azure": {
        "trace": "azure",
        "fleet": "500xazure-1",
        "offers": ["azure-1:1.0", "azure-10:1.2"],
        "growth": 1.1,
        "acceptance": 0.995,
        "evictions": 0.05,
    },
}


def run(name: str, workers: int, policy: str) -> dict[str, Any]:
    spec = RUNS[name]
    started = time.perf_counter()
    problem, offers, fleet = build_problem(
        spec["trace"], spec["fleet"], spec["offers"], policy=policy, growth=spec["growth"],
        seed=0, limit=None, days=spec.get("days", 1.0), azure_dir=None, business="on-demand",
        preemption=True,
    )  # fmt: skip
    result = run_plan(
        problem, offers, spec["acceptance"], spec["evictions"], workers=workers,
        show_progress=True,
    )  # fmt: skip
    target = f"--target-acceptance {100 * spec['acceptance']:g}%"
    if spec["evictions"] is not None:
        target += f" --target-evictions {100 * spec['evictions']:g}%"
    days = f" --days {spec['days']:g}" if "days" in spec else ""
    command = (
        f"berth plan-capacity --trace {spec['trace']}{days} --fleet {spec['fleet']} "
        + " ".join(f"--offer {o}" for o in spec["offers"])
        + f" --growth {spec['growth']:g} {target} --policy {policy} --workers {workers}"
    )
    context = {
        "command": command,
        "trace": problem.trace.name,
        "requests": len(problem.trace),
        "growth": spec["growth"],
        "fleet": fleet,
        "policy": policy,
        "target_business": ["on-demand"],
        "offered_types": problem.offered,
        "citation": problem.trace.citation,
    }
    data = plan_data(result, context)
    data["elapsed_s"] = time.perf_counter() - started
    (RESULTS / f"insight-plan-{name}.json").write_text(json.dumps(data, indent=1) + "\n")
    return data


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f}%"


def section(results: dict[str, dict[str, Any] | None], workers: int) -> str:
    lines = [
        HEADING,
        "",
        f"`benchmarks/bench_capacity_plan.py`, 2026-12-01, {platform.machine()} "
        f"{os.cpu_count()} CPUs shared with other jobs (load varied: times are indicative), "
        f"{workers} local replay processes. docs/plan-capacity.md explains the search.",
        "",
    ]
    for name, data in results.items():
        if data is None:
            lines += [f"### {name}", "", "Skipped: the Azure sample was not found.", ""]
            continue
        answer = data["answer"]
        replays = [r for r in data["curve"] if r["pruned"] is None]
        median = sorted(r["wall_s"] for r in replays)[len(replays) // 2] if replays else 0.0
        lines += [
            f"### {name}: {data['trace']} ({data['requests']:,} requests after "
            f"{data['growth']:g}x growth)",
            "",
            f"`{data['command']}`",
            "",
            f"* fleet as it is: {data['fleet']}",
            f"* lower bound (no replay): {data['bound_purchase']['mix']} per cluster"
            if data["bound_purchase"]
            else "* lower bound: none",
        ]
        if data["bound_purchase"] and not any(data["bound_purchase"]["purchase"]):
            lines.append(
                "  (the existing fleet already has the volume the target forces: what is short "
                "is packing, NUMA cells, pools and anti-affinity, which only the replays see)"
            )
        if answer is not None:
            lines += [
                f"* **answer: buy {answer['mix']} per cluster** ({answer['bought_hosts']} hosts, "
                f"cost {money(answer['cost'])}); on-demand accepted "
                f"{_pct(answer['acceptance'])} in the window, "
                f"{_pct(answer['warmup_acceptance'])} in the warm-up; preemptible "
                f"evicted {_pct(answer['eviction_rate'])}",
                f"* {CLAIMS[data['claim']]}",
            ]
        else:
            lines.append("* no purchase found: " + " ".join(data["notes"]))
        lines += [
            f"* {data['replays']} replays (median {median:.1f} s each), "
            f"{data['pruned_by_bound']} purchases pruned by the bound, "
            f"{data['elapsed_s']:.0f} s in all",
            "",
            "| purchase per cluster | cost | accepted (window) | accepted (warm-up) "
            "| evicted | verdict |",
            "|---|---:|---:|---:|---:|---|",
        ]  # fmt: skip
        for r in data["curve"]:
            lines.append(
                f"| {r['mix']} | {money(r['cost'])} | {_pct(r['acceptance'])} "
                f"| {_pct(r['warmup_acceptance'])} | {_pct(r['eviction_rate'])} | {r['verdict']} |"
            )
        lines += ["", f"![acceptance curve: {name}](insight-plan-{name}.png)", ""]
        if data.get("citation"):
            lines += [f"Data: {data['citation']}", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_section(text: str) -> None:
    """Replace (or add) the plan-capacity section of insight.md; other sections stay."""
    old = INSIGHT.read_text() if INSIGHT.exists() else ""
    pattern = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: text + "\n", old, count=1).rstrip() + "\n"
    else:
        new = (old.rstrip() + "\n\n" + text) if old.strip() else text
    INSIGHT.write_text(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(RUNS))
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--policy", default="berth-placement")
    parser.add_argument(
        "--section-only", action="store_true", help="Rewrite the section from the saved runs."
    )
    args = parser.parse_args()
    results: dict[str, dict[str, Any] | None] = {}
    for name in [] if args.section_only else [args.only] if args.only else list(RUNS):
        if name == "azure":
            try:
                find_azure_dir()
            except TraceError:
                results[name] = None
                continue
        results[name] = run(name, args.workers, args.policy)
        answer = results[name]["answer"]  # type: ignore[index]
        print(name, answer["mix"] if answer else "none", results[name]["claim"])  # type: ignore[index]
    for name in RUNS:  # a run not redone this time keeps its recorded result
        saved = RESULTS / f"insight-plan-{name}.json"
        if name not in results and saved.exists():
            results[name] = json.loads(saved.read_text())
    for name, data in results.items():
        if data is not None:
            plot_curve(data, RESULTS / f"insight-plan-{name}.png")
    write_section(section({k: results[k] for k in RUNS if k in results}, args.workers))


if __name__ == "__main__":
    main()
