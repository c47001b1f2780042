"""Turn replays into numbers, tables and plots: `summarize`, `write_report`.

`summarize` is pure (a JSON-able dict per policy). `write_report` is the edge: it writes
``report.md``, ``metrics.json`` and PNG plots (matplotlib, Agg backend) into a directory.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from berth.sim.replay import ACCEPTED, SAMPLE_FIELDS, Simulation
from berth.sim.trace import BUSINESS_LABELS, DAY, HOUR
from berth.sim.types import PolicyRun

PLOTS = ("utilisation.png", "acceptance.png", "fragmentation.png", "latency.png")


def _rate(num: float, den: float) -> float | None:
    return num / den if den else None


def _pct(x: float | None, digits: int = 2) -> str:
    return (
        "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}%"
    )


def summarize(sim: Simulation, run: PolicyRun) -> dict[str, Any]:
    """One policy's measures (overall, per window, per business type) as plain data."""
    tr = sim.trace
    in_window = tr.start >= tr.window_start
    replayed = run.outcome > 0
    got = (run.outcome == ACCEPTED) | (run.outcome == 3)
    arrivals = run.arrivals[1:].sum(axis=0)
    accepted = run.accepted[1:].sum(axis=0)
    vcpus = np.array([sim.base.flavors[f].vcpus for f in tr.flavor_names])[tr.flavor]
    memory = np.array([sim.base.flavors[f].memory_mb for f in tr.flavor_names])[tr.flavor]
    sel = in_window & replayed
    by_reason: dict[str, int] = {}
    for per in run.failures.values():
        for code, n in per.items():
            by_reason[code] = by_reason.get(code, 0) + n
    window_rows = []
    for w in range(1, run.arrivals.shape[0]):
        a, c = run.arrivals[w], run.accepted[w]
        window_rows.append(
            {
                "start": float(run.windows[w]),
                "arrivals": int(a.sum()),
                "accepted": int(c.sum()),
                "acceptance": _rate(float(c.sum()), float(a.sum())),
                "evictions": int(run.evicted[w].sum()),
                "by_business": {
                    BUSINESS_LABELS[b]: _rate(float(c[b]), float(a[b]))
                    for b in range(len(BUSINESS_LABELS))
                    if a[b]
                },
            }
        )
    s = run.samples
    in_s = run.sample_times >= tr.window_start
    col = {f: i for i, f in enumerate(SAMPLE_FIELDS)}

    def mean(field: str) -> float | None:
        vals = s[in_s, col[field]]
        return float(vals.mean()) if vals.size else None

    def peak(field: str) -> float | None:
        vals = s[in_s, col[field]]
        return float(vals.max()) if vals.size else None

    def least(field: str) -> float | None:
        vals = s[in_s, col[field]]
        return float(vals.min()) if vals.size else None

    frag = {
        f: {
            "mean": float(run.fragmentation[in_s, j].mean()) if in_s.any() else None,
            "final": run.fragmentation_final.get(f),
        }
        for j, f in enumerate(run.tracked)
    }
    lat_us = run.latency_ns / 1e3
    lat = (
        {
            "p50": float(np.percentile(lat_us, 50)),
            "p90": float(np.percentile(lat_us, 90)),
            "p99": float(np.percentile(lat_us, 99)),
            "max": float(lat_us.max()),
            "mean": float(lat_us.mean()),
        }
        if lat_us.size
        else {}
    )
    distances = [p["distance"] for p in run.probes if "distance" in p]
    logged = [r for r in run.periodic_log if r.get("action") == "defrag"]
    runs = [r for r in logged if "skipped" not in r]
    gained: dict[str, int] = {}
    for r in runs:
        for f, after in r.get("capacity_after", {}).items():
            gained[f] = gained.get(f, 0) + after - r["capacity_before"][f]
    defrag = (
        {
            "runs": len(runs),
            "skipped": len(logged) - len(runs),
            "migrations": sum(int(r["migrations"]) for r in runs),
            "by_window": run.migrations[1:].tolist(),
            "capacity_gained": gained,
        }
        if logged
        else None
    )
    admission = (
        {
            "max_migrations": run.admission_migrations,
            "requests": int(run.admitted[1:].sum()),
            "migrations": int(run.admission_moves[1:].sum()),
            "by_window": run.admission_moves[1:].tolist(),
            "searches": run.admission_searches,
            "initial": {
                "requests": int(run.admitted[0]),
                "migrations": int(run.admission_moves[0]),
            },
        }
        if run.admission_migrations or run.admitted.any()
        else None
    )
    return {
        "policy": run.policy,
        "description": run.description,
        "filters": list(run.config.filters),
        "weighers": [w.model_dump() for w in run.config.weighers],
        "preemption": run.preemption,
        "acceptance": {
            "overall": _rate(float(accepted.sum()), float(arrivals.sum())),
            "arrivals": int(arrivals.sum()),
            "accepted": int(accepted.sum()),
            "by_business": {
                BUSINESS_LABELS[b]: _rate(float(accepted[b]), float(arrivals[b]))
                for b in range(len(BUSINESS_LABELS))
                if arrivals[b]
            },
            "vcpu_weighted": _rate(float(vcpus[sel & got].sum()), float(vcpus[sel].sum())),
            "memory_weighted": _rate(float(memory[sel & got].sum()), float(memory[sel].sum())),
            "initial": {
                "arrivals": int(run.arrivals[0].sum()),
                "accepted": int(run.accepted[0].sum()),
            },
        },
        "failures": {"by_reason": dict(sorted(by_reason.items())), "by_business": run.failures},
        "failure_examples": run.failure_messages,
        "evictions": {
            "total": int(run.evicted[1:].sum()),
            "by_business": {
                BUSINESS_LABELS[b]: int(run.evicted[1:, b].sum())
                for b in range(len(BUSINESS_LABELS))
            },
            "initial": int(run.evicted[0].sum()),
        },
        "utilisation": {
            "cpu_used_hosts": mean("cpu_util_used"),
            "memory_used_hosts": mean("mem_util_used"),
            "cpu_fleet": mean("cpu_util"),
            "memory_fleet": mean("mem_util"),
            "cpu_fleet_peak": peak("cpu_util"),
            "memory_fleet_peak": peak("mem_util"),
        },
        "hosts": {
            "fleet": len(sim.base),
            "used_mean": mean("used_hosts"),
            "used_peak": peak("used_hosts"),
            "empty_mean": mean("empty_hosts"),
            "empty_min": least("empty_hosts"),
        },
        "stranded": {"cpu": mean("stranded_cpu"), "memory": mean("stranded_mem")},
        "fragmentation": frag,
        "fragmentation_final": run.fragmentation_final,
        "bound": {
            "probes": run.probes,
            "distance": max(distances) if distances else None,
        },
        "defrag": defrag,
        "admission": admission,
        "latency_us": lat,
        "performance": {
            "events": run.events,
            "decisions": run.decisions,
            "admission_search_us_mean": (
                run.admission_ns / run.admission_searches / 1e3 if run.admission_searches else 0.0
            ),
            "evictions": run.evictions,
            "wall_s": run.wall_ns / 1e9,
            "events_per_s": run.events_per_second,
            "decisions_per_s": run.decisions / (run.wall_ns / 1e9) if run.wall_ns else 0.0,
            "commit_us_mean": run.commit_ns / 1e3 / max(1, run.decisions),
        },
        "windows": window_rows,
    }


def describe_trace(sim: Simulation) -> dict[str, Any]:
    tr = sim.trace
    counts = np.bincount(tr.business, minlength=len(BUSINESS_LABELS))
    bound = sim.offered_bound
    return {
        "name": tr.name,
        "source": tr.source,
        "requests": len(tr),
        "initial": int(tr.initial.sum()),
        "in_window": int((~tr.initial).sum()),
        "flavors": len(tr.flavor_names),
        "by_business": {BUSINESS_LABELS[b]: int(c) for b, c in enumerate(counts) if c},
        "window_s": tr.window,
        "horizon_s": tr.horizon if math.isfinite(tr.horizon) else None,
        "citation": tr.citation,
        "notes": tr.notes,
        "tracked_flavors": sim.tracked,
        "offered_peaks": [
            {
                "label": p.label,
                "time": float(sim.ev_time[p.event]),
                "instances": int(sum(p.offered.values())),
                "bound": p.bound.to_dict() if p.bound else None,
            }
            for p in sim.probes
        ],
        "offered_bound": bound.hosts if bound else None,
    }


# ---------------------------------------------------------------------------- markdown
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
    names = [s["policy"] for s in summaries]
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

    def row(label: str, fn: Any) -> list[str]:
        return [label, *(fn(s) for s in summaries)]

    lines += ["## Side by side", ""]
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
    if any(s.get("admission") for s in summaries):
        rows += [
            row(
                "admitted by migration",
                lambda s: f"{s['admission']['requests']:,}" if s.get("admission") else "–",
            ),
            row(
                "migrations (admission)",
                lambda s: f"{s['admission']['migrations']:,}" if s.get("admission") else "–",
            ),
            row(
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
        rows.append(
            row(
                "migrations (defrag)",
                lambda s: f"{s['defrag']['migrations']:,}" if s.get("defrag") else "–",
            )
        )
    rows += [
        row("decision p50 / p99 (µs)", lambda s: _lat(s)),
        row("events/s", lambda s: f"{s['performance']['events_per_s']:,.0f}"),
    ]
    lines += [_table(["measure", *names], rows), ""]
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
    codes = sorted({c for s in summaries for c in s["failures"]["by_reason"]})
    if codes:
        lines += ["## Failures by main reason", ""]
        lines += [
            _table(
                ["reason", *names],
                [
                    [c, *(f"{s['failures']['by_reason'].get(c, 0):,}" for s in summaries)]
                    for c in codes
                ],
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
    lines += ["## Acceptance per window", ""]
    unit = DAY if trace["window_s"] >= DAY else HOUR
    uname = "day" if unit == DAY else "h"
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
    lines += [_table(["window start", "arrivals", *names], wrows), ""]
    lines += _business_windows(summaries, unit, uname)
    lines += _defrag_section(summaries, unit, uname)
    lines += ["## Fragmentation at the end, every flavor with requests", ""]
    flavors = sorted(summaries[0]["fragmentation_final"])
    frows = [[f, *(_pct(s["fragmentation_final"].get(f), 1) for s in summaries)] for f in flavors]
    lines += [_table(["flavor", *names], frows), ""]
    lines += ["## Policies", ""]
    for s in summaries:
        weighers = ", ".join(f"{w['name']} ×{w['weight']:g}" for w in s["weighers"]) or "none"
        lines.append(
            f"- **{s['policy']}**: {s['description']}. Weighers: {weighers}. Filters: "
            f"{', '.join(s['filters'])}. Preemption: {s['preemption']}."
        )
    lines.append("")
    if plots:
        lines += ["## Plots", ""]
        for p in PLOTS:
            lines.append(f"![{p}]({p})")
        lines.append("")
    return "\n".join(lines)


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


# ---------------------------------------------------------------------------- plots
def plot(
    sim: Simulation, runs: Sequence[PolicyRun], summaries: Sequence[dict[str, Any]], out: Path
) -> list[Path]:
    """The four PNG plots; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tr = sim.trace
    unit = DAY if tr.window >= DAY else HOUR
    uname = "days" if unit == DAY else "hours"
    paths: list[Path] = []
    col = {f: i for i, f in enumerate(SAMPLE_FIELDS)}

    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    for run in runs:
        keep = run.sample_times >= tr.window_start
        t = run.sample_times[keep] / unit
        axes[0].plot(t, 100 * run.samples[keep, col["cpu_util_used"]], label=run.policy)
        axes[1].plot(t, 100 * run.samples[keep, col["mem_util_used"]], label=run.policy)
        axes[2].plot(t, run.samples[keep, col["used_hosts"]], label=run.policy)
    axes[0].set_ylabel("CPU util. of used hosts (%)")
    axes[1].set_ylabel("memory util. of used hosts (%)")
    axes[2].set_ylabel("hosts in use")
    axes[2].set_xlabel(f"time ({uname})")
    axes[0].legend(loc="best", fontsize=8)
    axes[0].set_title(f"Utilisation over time: {tr.name}")
    for ax in axes:
        ax.grid(alpha=0.3)
    paths.append(_save(fig, out / "utilisation.png"))

    fig, ax = plt.subplots(figsize=(10, 4.5))
    for s in summaries:
        xs = [w["start"] / unit for w in s["windows"]]
        ys = [
            100 * w["acceptance"] if w["acceptance"] is not None else np.nan for w in s["windows"]
        ]
        ax.step(xs, ys, where="post", label=s["policy"])
    ax.set_xlabel(f"window start ({uname})")
    ax.set_ylabel("accepted requests (%)")
    ax.set_title(f"Acceptance per window: {tr.name}")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    paths.append(_save(fig, out / "acceptance.png"))

    fig, ax = plt.subplots(figsize=(10, 4.5))
    flavors = sim.tracked
    width = 0.8 / max(1, len(summaries))
    x = np.arange(len(flavors))
    for k, s in enumerate(summaries):
        vals = [100 * (s["fragmentation"][f]["mean"] or 0.0) for f in flavors]
        ax.bar(x + k * width - 0.4 + width / 2, vals, width, label=s["policy"])
    ax.set_xticks(x, flavors, rotation=15, fontsize=8)
    ax.set_ylabel("free CPU that cannot hold the flavor (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Fragmentation per flavor (time mean)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="best", fontsize=8)
    paths.append(_save(fig, out / "fragmentation.png"))

    fig, ax = plt.subplots(figsize=(10, 4.5))
    lat_all = [r.latency_ns / 1e3 for r in runs if r.latency_ns.size]
    if lat_all:
        lo = max(1.0, min(float(v.min()) for v in lat_all))
        hi = max(float(v.max()) for v in lat_all)
        bins = np.logspace(np.log10(lo), np.log10(max(hi, lo * 10)), 60).tolist()
        for run in runs:
            if run.latency_ns.size:
                ax.hist(run.latency_ns / 1e3, bins=bins, histtype="step", label=run.policy)
        ax.set_xscale("log")
    ax.set_xlabel("decision latency (µs, select_destinations)")
    ax.set_ylabel("decisions")
    ax.set_title("Decision latency")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    paths.append(_save(fig, out / "latency.png"))
    return paths


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def write_report(
    out: str | Path,
    sim: Simulation,
    runs: Sequence[PolicyRun],
    fleet: str,
    command: str | None = None,
    options: dict[str, Any] | None = None,
    plots: bool = True,
) -> dict[str, Any]:
    """Write report.md, metrics.json and the plots into `out`; returns the metrics."""
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    summaries = [summarize(sim, r) for r in runs]
    trace = describe_trace(sim)
    metrics = {
        "trace": trace,
        "fleet": fleet,
        "command": command,
        "options": options or {},
        "policies": summaries,
        "timeseries": {
            r.policy: {
                "t": r.sample_times.tolist(),
                **{f: r.samples[:, i].tolist() for i, f in enumerate(SAMPLE_FIELDS)},
                "fragmentation": {
                    f: r.fragmentation[:, j].tolist() for j, f in enumerate(r.tracked)
                },
            }
            for r in runs
        },
    }
    (path / "metrics.json").write_text(json.dumps(metrics, indent=1, allow_nan=False) + "\n")
    if plots:
        plot(sim, runs, summaries, path)
    (path / "report.md").write_text(markdown(summaries, trace, fleet, command, plots))
    return metrics
