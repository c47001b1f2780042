"""The simulation report as markdown (report.md): tables built from `summarize`'s dicts."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from berth.sim.report_plots import PLOTS
from berth.sim.trace import BUSINESS_LABELS, DAY, HOUR


def _pct(x: float | None, digits: int = 2) -> str:
    return (
        "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}%"
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def markdown(
    summaries: Sequence[dict[str, Any]],
    trace: dict[str, Any],
    fleet: str,
    command: str | None = None,
    plots: bool = True,
) -> str:
    """report.md: the trace, the policies side by side, failures, acceptance per window."""
    lines = _header(trace, fleet, command)
    lines += ["## Side by side", ""]
    lines += [_table(["measure", *_names(summaries)], _side_by_side(summaries, trace)), ""]
    lines += [
        "Acceptance counts requests that arrive in the window; VMs already running when it "
        "opens are placed first (warm-up) and counted apart. Fragmentation is the time-mean "
        "share of free CPU that cannot hold the flavor (NUMA-exact). 'hosts used / bound' is, "
        "at each offered-load peak, the hosts the policy uses and a lower bound on the hosts "
        "the load it holds needs; the distance is used / bound - 1 (worst peak).",
        "",
    ]
    if any(s.get("admission") for s in summaries):
        lines += [
            "'admitted by migration': requests that fitted nowhere and were placed after at most "
            "the policy's number of live migrations made room on one host "
            "(`berth.core.defrag.admit`, tried before any eviction); migrations take no virtual "
            "time in the replay.",
            "",
        ]
    lines += _failures(summaries)
    unit = DAY if trace["window_s"] >= DAY else HOUR
    uname = "day" if unit == DAY else "h"
    lines += _windows(summaries, unit, uname)
    lines += _business_windows(summaries, unit, uname)
    lines += _defrag_section(summaries, unit, uname)
    lines += _final_fragmentation(summaries)
    lines += _policies(summaries)
    if plots:
        lines += ["## Plots", ""]
        for p in PLOTS:
            lines.append(f"![{p}]({p})")
        lines.append("")
    return "\n".join(lines)


def _names(summaries: Sequence[dict[str, Any]]) -> list[str]:
    return [s["policy"] for s in summaries]


def _header(trace: dict[str, Any], fleet: str, command: str | None) -> list[str]:
    """The title, the command, and what was replayed on what."""
    lines = [f"# Simulation report: {trace['name']}", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        f"- Trace: {_shown(trace['source']) or trace['name']}: {trace['requests']:,} requests "
        f"({trace['in_window']:,} in the window, {trace['initial']:,} already running at its "
        f"start), {trace['flavors']} flavors; by business type: "
        + ", ".join(f"{k} {v:,}" for k, v in trace["by_business"].items()),
        f"- Fleet: {fleet}",
    ]
    for note in trace["notes"]:
        lines.append(f"- {note}")
    if trace["citation"]:
        lines.append(f"- Data: {trace['citation']}")
    if trace["offered_bound"] is not None:
        peaks = "; ".join(
            f"{p['label']}: {p['instances']:,} instances need ≥ {p['bound']['hosts']} hosts "
            f"({p['bound']['method']})"
            for p in trace["offered_peaks"]
            if p["bound"]
        )
        lines.append(f"- Offered load (everything accepted) at its peaks: {peaks}")
    lines.append("")
    return lines


Measure = Callable[[dict[str, Any]], str]


def _side_by_side(summaries: Sequence[dict[str, Any]], trace: dict[str, Any]) -> list[list[str]]:
    """One row per measure, one column per policy."""

    def row(label: str, fn: Callable[..., str]) -> list[str]:
        return [label, *(fn(s) for s in summaries)]

    rows = [
        row("acceptance (in window)", lambda s: _pct(s["acceptance"]["overall"])),
    ]
    for b in BUSINESS_LABELS:
        if any(b in s["acceptance"]["by_business"] for s in summaries):
            rows.append(row(f"  {b}", lambda s, b=b: _pct(s["acceptance"]["by_business"].get(b))))
    rows += [
        row("acceptance, vCPU-weighted", lambda s: _pct(s["acceptance"]["vcpu_weighted"])),
        row("acceptance, memory-weighted", lambda s: _pct(s["acceptance"]["memory_weighted"])),
        row(
            "initial VMs placed",
            lambda s: (
                f"{s['acceptance']['initial']['accepted']:,}/"
                f"{s['acceptance']['initial']['arrivals']:,}"
            ),
        ),
        row("evictions", lambda s: f"{s['evictions']['total']:,}"),
        row("CPU util. of used hosts", lambda s: _pct(s["utilisation"]["cpu_used_hosts"], 1)),
        row("memory util. of used hosts", lambda s: _pct(s["utilisation"]["memory_used_hosts"], 1)),
        row("empty hosts (mean)", lambda s: _num(s["hosts"]["empty_mean"])),
        row("stranded CPU (of fleet)", lambda s: _pct(s["stranded"]["cpu"], 1)),
        row("stranded memory (of fleet)", lambda s: _pct(s["stranded"]["memory"], 1)),
    ]
    for f in trace["tracked_flavors"]:
        rows.append(
            row(f"fragmentation {f}", lambda s, f=f: _pct(s["fragmentation"][f]["mean"], 1))
        )
    rows += [
        row(
            "hosts used / bound at peak",
            lambda s: (
                "; ".join(
                    f"{p['used_hosts']}/{p.get('held_bound', '–')}" for p in s["bound"]["probes"]
                )
                or "–"
            ),
        ),
        row("distance to bound", lambda s: _pct(s["bound"]["distance"], 1)),
    ]
    rows += [row(label, fn) for label, fn in _migration_measures(summaries)]
    rows += [
        row("decision p50 / p99 (µs)", lambda s: _lat(s)),
        row("events/s", lambda s: f"{s['performance']['events_per_s']:,.0f}"),
    ]
    return rows


def _migration_measures(summaries: Sequence[dict[str, Any]]) -> list[tuple[str, Measure]]:
    """The admission-by-migration and defragmentation rows, when some policy has them."""
    out: list[tuple[str, Measure]] = []
    if any(s.get("admission") for s in summaries):
        out += [
            (
                "admitted by migration",
                lambda s: f"{s['admission']['requests']:,}" if s.get("admission") else "–",
            ),
            (
                "migrations (admission)",
                lambda s: f"{s['admission']['migrations']:,}" if s.get("admission") else "–",
            ),
            (
                "admission searches / mean µs",
                lambda s: (
                    f"{s['admission']['searches']:,} / "
                    f"{s['performance']['admission_search_us_mean']:,.0f}"
                    if s.get("admission")
                    else "–"
                ),
            ),
        ]
    if any(s.get("defrag") for s in summaries):
        out.append(
            (
                "migrations (defrag)",
                lambda s: f"{s['defrag']['migrations']:,}" if s.get("defrag") else "–",
            )
        )
    return out


def _failures(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """Refusals by main reason, with an example message for each."""
    codes = sorted({c for s in summaries for c in s["failures"]["by_reason"]})
    if not codes:
        return []
    lines = ["## Failures by main reason", ""]
    lines += [
        _table(
            ["reason", *_names(summaries)],
            [[c, *(f"{s['failures']['by_reason'].get(c, 0):,}" for s in summaries)] for c in codes],
        ),
        "",
    ]
    examples: dict[str, str] = {}
    for s in summaries:
        for c, m in s["failure_examples"].items():
            examples.setdefault(c, m)
    for c in codes:
        if c in examples:
            lines.append(f"- `{c}`: e.g. {examples[c]}")
    lines.append("")
    return lines


def _windows(summaries: Sequence[dict[str, Any]], unit: float, uname: str) -> list[str]:
    lines = ["## Acceptance per window", ""]
    wrows = []
    for w, win in enumerate(summaries[0]["windows"]):
        start = win["start"] / unit
        wrows.append(
            [
                f"{start:g} {uname}",
                f"{win['arrivals']:,}",
                *(_pct(s["windows"][w]["acceptance"]) for s in summaries),
            ]
        )
    return [*lines, _table(["window start", "arrivals", *_names(summaries)], wrows), ""]


def _final_fragmentation(summaries: Sequence[dict[str, Any]]) -> list[str]:
    lines = ["## Fragmentation at the end, every flavor with requests", ""]
    flavors = sorted(summaries[0]["fragmentation_final"])
    frows = [[f, *(_pct(s["fragmentation_final"].get(f), 1) for s in summaries)] for f in flavors]
    return [*lines, _table(["flavor", *_names(summaries)], frows), ""]


def _policies(summaries: Sequence[dict[str, Any]]) -> list[str]:
    lines = ["## Policies", ""]
    for s in summaries:
        weighers = ", ".join(f"{w['name']} ×{w['weight']:g}" for w in s["weighers"]) or "none"
        lines.append(
            f"- **{s['policy']}**: {s['description']}. Weighers: {weighers}. Filters: "
            f"{', '.join(s['filters'])}. Preemption: {s['preemption']}."
        )
    lines.append("")
    return lines


def _shown(source: str | None) -> str | None:
    """A trace file as the report shows it: relative to the working directory when it can be
    (reports get committed; absolute paths of one machine mean nothing elsewhere)."""
    if not source:
        return source
    path = Path(source)
    if not path.is_absolute():
        return source
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path.name


def _business_windows(summaries: Sequence[dict[str, Any]], unit: float, uname: str) -> list[str]:
    """Acceptance per window for each business type (priority) with arrivals in the window."""
    labels = [
        b for b in BUSINESS_LABELS if any(b in w["by_business"] for w in summaries[0]["windows"])
    ]
    if len(labels) < 2:  # one business type: the table above says it all
        return []
    names = [s["policy"] for s in summaries]
    lines = ["## Acceptance per window by business type", ""]
    head = ["window start", *(f"{n} {b}" for b in labels for n in names)]
    rows = []
    for w, win in enumerate(summaries[0]["windows"]):
        rows.append(
            [
                f"{win['start'] / unit:g} {uname}",
                *(_pct(s["windows"][w]["by_business"].get(b)) for b in labels for s in summaries),
            ]
        )
    return [*lines, _table(head, rows), ""]


def _defrag_section(summaries: Sequence[dict[str, Any]], unit: float, uname: str) -> list[str]:
    """Acceptance with and without periodic defragmentation, and migrations per window.

    A run named ``P+defrag`` is paired with the run named ``P`` when there is one."""
    runs = [s for s in summaries if s.get("defrag")]
    if not runs:
        return []
    by_name = {s["policy"]: s for s in summaries}
    lines = ["## Periodic defragmentation", ""]
    rows = []
    for s in runs:
        base = by_name.get(s["policy"].removesuffix("+defrag"))
        d = s["defrag"]
        gained = ", ".join(f"{f} {n:+,}" for f, n in d["capacity_gained"].items()) or "–"
        rows.append(
            [
                s["policy"],
                _pct(base["acceptance"]["overall"]) if base is not None and base is not s else "–",
                _pct(s["acceptance"]["overall"]),
                _pct(base["acceptance"]["memory_weighted"])
                if base is not None and base is not s
                else "–",
                _pct(s["acceptance"]["memory_weighted"]),
                f"{d['runs']:,}" + (f" ({d['skipped']:,} skipped)" if d.get("skipped") else ""),
                f"{d['migrations']:,}",
                gained,
            ]
        )
    head = [
        "policy",
        "acceptance without",
        "with",
        "memory-weighted without",
        "with",
        "runs",
        "migrations",
        "capacity gained by the plans",
    ]
    lines += [_table(head, rows), ""]
    lines += [
        "Each run plans live migrations with the core's planner (objective: capacity of the "
        "target flavors) within its budget and applies them at that instant; 'capacity gained' "
        "sums, over the runs, the instances of each target flavor that fit after the plan minus "
        "before it. A defragmenter that runs on pressure (Berth's own) skips an instant when no "
        "request found no room since its last run.",
        "",
    ]
    windows = runs[0]["windows"]
    wrows = [
        [
            f"{win['start'] / unit:g} {uname}",
            *(f"{s['defrag']['by_window'][w]:,}" for s in runs),
        ]
        for w, win in enumerate(windows)
    ]
    lines += ["Migrations per window:", ""]
    lines += [_table(["window start", *(s["policy"] for s in runs)], wrows), ""]
    return lines


def _lat(s: dict[str, Any]) -> str:
    lat = s["latency_us"]
    return f"{lat['p50']:.0f} / {lat['p99']:.0f}" if lat else "–"
