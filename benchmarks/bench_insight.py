"""Insight benchmark: the cost of asking why a host won, and why-not latency, at 10,000 hosts.

Builds `bench_core`'s seeded 10,000-host fleet (six hardware kinds, two NUMA cells, 50 flavors)
and fills it with `bench_core.fill`, then:

* **why**: for the same seeded requests, `select_destinations` alone and `explain_placement`
  (the same decision plus `core.why`'s breakdown), interleaved request by request in one run,
  under the 'berth' and 'nova' profiles; the cost of `--why` is the ratio of the medians.
  With `--base-src DIR` the plain decisions are also timed with another checkout's `src` (a
  subprocess on the same fleet), to show the hook costs nothing when not asked.
* **why-not**: a fuller fill (host targets 80-95%) so that some flavors fit nowhere; for each
  such flavor, `policy.why_not.why_not` with a third of the instances preemptible; median and
  maximum latency, and which ways out were found.

Writes the sections "why" and "why-not" of `benchmarks/results/insight.md` (other sections of
that file are left as they are).

    .venv/bin/python benchmarks/bench_insight.py [--hosts 10000] [--decisions 200]
                                                 [--base-src DIR] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_core
from bench_core import NOW, SEED, build_fleet, fill, make_requests
from berth.core.config import profile
from berth.core.engine import FilterScheduler
from berth.core.explain import NoValidHost
from berth.core.request import RequestSpec
from berth.core.table import HostTable

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "results" / "insight.md"
FULL = (0.95, 1.0)
"""Per-host CPU fill targets of the why-not fleet (`bench_core.fill` keeps memory under 85%):
full enough that the larger flavors fit nowhere among 10,000 hosts."""


def _table(hosts: int, target: tuple[float, float] | None = None) -> HostTable:
    fleet = build_fleet(hosts, SEED)
    table = HostTable.from_fleet(fleet)
    saved = bench_core.TARGET_UTILISATION
    if target is not None:
        bench_core.TARGET_UTILISATION = target
    try:
        fill(table, fleet, SEED)
    finally:
        bench_core.TARGET_UTILISATION = saved
    return table


def _requests(table: HostTable, n: int) -> list[RequestSpec]:
    fleet_flavors = build_fleet(8, SEED).flavors  # the same 50 flavors, cheaply
    return make_requests("mixed", n, fleet_flavors, SEED, 0)


def _median_ms(ns: Sequence[int]) -> float:
    return statistics.median(ns) / 1e6


def time_plain(hosts: int, decisions: int, prof: str, repeats: int = 5) -> dict[str, Any]:
    """Plain decisions only, the fastest of `repeats` per request (the `--base-src`
    subprocess runs this for the other checkout)."""
    table = _table(hosts)
    sched = FilterScheduler.from_config(profile(prof))
    reqs = [r for r in _requests(table, decisions) if _decide(sched, table, r)]
    out = []
    gc.disable()
    for r in reqs:
        fastest = 1 << 62
        for _ in range(repeats):
            t = time.perf_counter_ns()
            sched.select_destinations(table, r, NOW)
            fastest = min(fastest, time.perf_counter_ns() - t)
        out.append(fastest)
    gc.enable()
    return {"median_ms": _median_ms(out), "n": len(out)}


def _decide(sched: FilterScheduler, table: HostTable, r: RequestSpec) -> bool:
    try:
        sched.select_destinations(table, r, NOW)
    except NoValidHost:
        return False
    return True


def time_why(table: HostTable, decisions: int, prof: str, repeats: int) -> dict[str, Any]:
    """Each request decided plain, with a hook that does nothing (the engine's recording
    alone) and with `explain_placement`, interleaved `repeats` times; per request the fastest
    of each (the machine is shared: the minimum is the least disturbed), then medians."""
    from berth.core.why import WhyRecorder

    sched = FilterScheduler.from_config(profile(prof))
    reqs = [r for r in _requests(table, decisions) if _decide(sched, table, r)]

    def nothing(_: Any) -> None:
        return None

    best: dict[str, list[int]] = {"plain": [], "hook": [], "why": []}
    draws: Counter[str] = Counter()
    gc.disable()
    answers: list[int] = []
    for r in reqs:
        fastest = dict.fromkeys(best, 1 << 62)
        answer = 1 << 62
        for _ in range(repeats):
            for mode in best:
                recorder = WhyRecorder(sched, r) if mode == "why" else None
                hook = {"plain": None, "hook": nothing, "why": recorder}[mode]
                t = time.perf_counter_ns()
                sched.select_destinations(table, r, NOW, why=hook)
                fastest[mode] = min(fastest[mode], time.perf_counter_ns() - t)
                if recorder is not None:  # the answer's JSON data, from fresh records
                    t = time.perf_counter_ns()
                    [w.to_dict() for w in recorder.instances]
                    answer = min(answer, time.perf_counter_ns() - t)
        for mode, ns in fastest.items():
            best[mode].append(ns)
        answers.append(answer)
        if recorder is not None:  # the last run's
            draws.update(w.draw for w in recorder.instances)
    gc.enable()
    p, h, w = (_median_ms(best[m]) for m in ("plain", "hook", "why"))
    ratios = [b / a for a, b in zip(best["plain"], best["why"], strict=True)]
    return {
        "profile": prof,
        "n": len(reqs),
        "plain_ms": p,
        "hook_ms": h,
        "why_ms": w,
        "answer_ms": _median_ms(answers),
        "overhead_pct": 100 * (w - p) / p,
        "ratio_pct": 100 * (statistics.median(ratios) - 1),
        "draws": dict(draws),
    }


def time_why_not(table: HostTable, limit: int) -> dict[str, Any]:
    from berth.policy.why_not import WhyNotOptions, family_by_name, why_not

    sched = FilterScheduler.from_config(profile("berth"))

    marked = {  # a third of the instances, deterministically; a set, as the service keeps
        iid for iid in table.allocations if iid.startswith("fill-") and int(iid[5:]) % 3 == 0
    }

    def preemptible(a: Any) -> bool:
        return a.instance_id in marked

    failing = []
    for name in sorted(table.flavors):
        r = RequestSpec(flavor=name, instance_ids=("why-not",))
        if not _decide(sched, table, r):
            failing.append(name)
    names = sorted(table.flavors)
    times: list[int] = []
    kinds: Counter[str] = Counter()
    rows = []
    for name in failing[:limit]:
        r = RequestSpec(flavor=name, instance_ids=("why-not",))
        why_not(sched, table, r, NOW, preemptible=preemptible, family=family_by_name(names, name))
        t = time.perf_counter_ns()
        answer = why_not(
            sched,
            table,
            r,
            NOW,
            preemptible=preemptible,
            family=family_by_name(names, name),
            options=WhyNotOptions(max_moves=3),
        )
        took = time.perf_counter_ns() - t
        times.append(took)
        kinds.update(o.kind for o in answer.options)
        rows.append(
            (name, took / 1e6, [f"{o.kind} ({o.price:g} {o.unit})" for o in answer.options])
        )
    return {
        "failing": len(failing),
        "timed": len(times),
        "median_ms": _median_ms(times) if times else None,
        "max_ms": max(times) / 1e6 if times else None,
        "kinds": dict(kinds),
        "rows": rows,
    }


def _base(src: Path, hosts: int, decisions: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{src}:{Path(__file__).resolve().parent}"}
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--plain-only",
            "--hosts",
            str(hosts),
            "--decisions",
            str(decisions),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _shown_args(args: Sequence[str]) -> str:
    """The arguments, with --base-src's directory (a machine path) shown as DIR."""
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a == "--base-src":
            out[i + 1] = "DIR"
    return " ".join(out)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def markdown(report: dict[str, Any]) -> str:
    head = (
        f"- Date: {report['date']}; command: `{report['command']}`; commit {report['commit']}\n"
        f"- Machine: {report['machine']} (2 cores shared with other work: timings are noisy, "
        "compare the ratios measured in one run)\n"
        f"- Fleet: `benchmarks/bench_core.py`'s seeded {report['hosts']:,}-host fleet "
        "(six hardware kinds, two NUMA cells, 50 flavors)\n"
    )
    why = [
        "## why\n",
        "Cost of `--why` against the same decision without it: each of the seeded 'mixed' "
        "requests (25% with a zone, 20% in a server group, 15% for two instances) decided "
        "plain (`select_destinations`), with a hook that does nothing (the engine's recording "
        "alone) and with `WhyRecorder` (which gathers the shown candidates' numbers; the parts, "
        "deltas and deciding weigher are worked out when first read), interleaved 5 times; per "
        "request the fastest of each (the least disturbed on a shared machine), then the "
        "medians over requests, and the median of the per-request ratios. Warm caches, "
        "garbage collector paused. The last column times turning the records into the "
        "answer's JSON data (`InstanceWhy.to_dict`: parts, deltas, summary), which `--why` and "
        "`?why=true` do once the decision is made.\n",
        head,
        "| profile | requests | decision (ms) | with the hook only (ms) | with why (ms) | "
        "cost of why (medians) | median per-request cost | draws | building the answer (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in report["why"]:
        draws = ", ".join(f"{k} {v}" for k, v in sorted(r["draws"].items()))
        why.append(
            f"| {r['profile']} | {r['n']} | {r['plain_ms']:.3f} | {r['hook_ms']:.3f} | "
            f"{r['why_ms']:.3f} | {r['overhead_pct']:+.1f}% | {r['ratio_pct']:+.1f}% | {draws} | "
            f"{r['answer_ms']:.3f} |"
        )
    paired = all(r["ratio_pct"] < 10 for r in report["why"])
    medians = all(r["overhead_pct"] < 10 for r in report["why"])
    noise = max(abs(100 * (r["hook_ms"] / r["plain_ms"] - 1)) for r in report["why"])
    why.append(
        f"\nTarget (< 10% of the decision): {'met' if paired else 'NOT met'} on the median "
        f"per-request cost (each request timed with and without, paired); "
        f"{'met' if medians else 'NOT met'} on the ratio of the medians. The hook-only column "
        f"does next to nothing, so its distance from the plain decision ({noise:.1f}% at most "
        "here) is the noise of this shared machine.\n"
    )
    if report.get("base"):
        b = report["base"]
        why.append(
            "Not asked: plain decisions (`select_destinations` without a hook) with this "
            f"checkout and with the base checkout ({b['src_commit']}, before the hook), in "
            "separate processes on the same fleet and requests ('berth' profile), the two "
            f"alternated {b['rounds']} times; per process the median of the per-request "
            "fastest of 5, then the best process of each (processes differ more than "
            "interleaved runs, so read this as a bound on the difference):\n"
        )
        why.append("| source | decision median (ms) |\n|---|---:|")
        why.append(f"| this checkout | {b['this_ms']:.3f} |")
        why.append(f"| base | {b['base_ms']:.3f} |")
        why.append(f"\nDifference: {100 * (b['this_ms'] / b['base_ms'] - 1):+.1f}%.\n")
    wn = report["why_not"]
    lines = [
        "## why-not\n",
        "Latency of `policy.why_not.why_not` (all four ways out planned and each checked on a "
        "copy of the table) for every flavor that fits nowhere on a fuller fill of the same "
        "fleet (host targets 95-100% of CPU), a third of the instances preemptible, up to 3 live "
        "migrations; warm (each flavor asked once before timing).\n",
        head,
        f"- Flavors that fit nowhere: {wn['failing']} of 50; timed: {wn['timed']}",
        f"- Median {_ms(wn['median_ms'])}, max {_ms(wn['max_ms'])}",
        f"- Ways out found: {', '.join(f'{k} {v}' for k, v in sorted(wn['kinds'].items()))}\n",
        "| flavor | ms | ways out (cheapest first) |",
        "|---|---:|---|",
    ]
    for name, ms, ways in wn["rows"]:
        lines.append(f"| {name} | {ms:.1f} | {'; '.join(ways) or '-'} |")
    return "\n".join(why) + "\n\n" + "\n".join(lines) + "\n"


def write_sections(path: Path, text: str) -> None:
    """Replace the '## why' and '## why-not' sections of `path` (or create it)."""
    if not path.exists():
        path.write_text("# Insight benchmarks\n\n" + text, encoding="utf-8")
        return
    old = path.read_text(encoding="utf-8")
    pattern = re.compile(r"^## why(-not)?\n.*?(?=^## (?!why(-not)?\n)|\Z)", re.M | re.S)
    rest = pattern.sub("", old).rstrip() + "\n\n"
    path.write_text(rest + text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--decisions", type=int, default=200)
    ap.add_argument("--why-not-flavors", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=5, help="timings per request and mode")
    ap.add_argument("--base-rounds", type=int, default=3, help="processes per checkout")
    ap.add_argument("--base-src", type=Path, help="another checkout's src, for plain decisions")
    ap.add_argument("--base-label", default="base", help="how the report names --base-src")
    ap.add_argument("--plain-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--render", type=Path, help="only write the report of a run's JSON line (its stdout)"
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.render is not None:
        lines = args.render.read_text(encoding="utf-8").splitlines()
        rendered = json.loads(next(x for x in lines if x.startswith("{")))
        write_sections(args.out, markdown(rendered))
        return 0
    if args.plain_only:
        print(json.dumps(time_plain(args.hosts, args.decisions, "berth")))
        return 0
    table = _table(args.hosts)
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/bench_insight.py " + _shown_args(argv or sys.argv[1:]),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "machine": f"{platform.processor() or platform.machine()}, nproc {os.cpu_count()}",
        "hosts": args.hosts,
        "why": [time_why(table, args.decisions, p, args.repeats) for p in ("berth", "nova")],
    }
    if args.base_src is not None:  # alternate the two checkouts' processes; best of each
        here = Path(__file__).resolve().parent.parent / "src"
        runs: dict[str, list[float]] = {"base": [], "this": []}
        for _ in range(args.base_rounds):
            runs["base"].append(_base(args.base_src, args.hosts, args.decisions)["median_ms"])
            runs["this"].append(_base(here, args.hosts, args.decisions)["median_ms"])
        base, this = {"median_ms": min(runs["base"])}, {"median_ms": min(runs["this"])}
        report["base"] = {
            "base_ms": base["median_ms"],
            "this_ms": this["median_ms"],
            "src_commit": args.base_label,
            "rounds": args.base_rounds,
        }
    del table
    full = _table(args.hosts, FULL)
    report["why_not"] = time_why_not(full, args.why_not_flavors)
    print(json.dumps(report, default=str))
    text = markdown(report)
    print(text)
    write_sections(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
