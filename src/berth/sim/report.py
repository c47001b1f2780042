"""Turn replays into numbers, tables and plots: `summarize`, `write_report`.

`summarize` is pure (a JSON-able dict per policy). `write_report` is the edge: it writes
``report.md`` (`berth.sim.report_markdown`), ``metrics.json`` and PNG plots
(`berth.sim.report_plots`) into a directory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.sim.replay import ACCEPTED, SAMPLE_FIELDS, Simulation
from berth.sim.report_markdown import markdown
from berth.sim.report_plots import plot
from berth.sim.trace import BUSINESS_LABELS
from berth.sim.types import PolicyRun

F64 = npt.NDArray[np.float64]


def _rate(num: float, den: float) -> float | None:
    return num / den if den else None


def summarize(sim: Simulation, run: PolicyRun) -> dict[str, Any]:
    """One policy's measures (overall, per window, per business type) as plain data."""
    by_reason: dict[str, int] = {}
    for per in run.failures.values():
        for code, n in per.items():
            by_reason[code] = by_reason.get(code, 0) + n
    samples = _Samples(sim, run)
    distances = [p["distance"] for p in run.probes if "distance" in p]
    return {
        "policy": run.policy,
        "description": run.description,
        "filters": list(run.config.filters),
        "weighers": [w.model_dump() for w in run.config.weighers],
        "preemption": run.preemption,
        "acceptance": _acceptance(sim, run),
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
            "cpu_used_hosts": samples.mean("cpu_util_used"),
            "memory_used_hosts": samples.mean("mem_util_used"),
            "cpu_fleet": samples.mean("cpu_util"),
            "memory_fleet": samples.mean("mem_util"),
            "cpu_fleet_peak": samples.peak("cpu_util"),
            "memory_fleet_peak": samples.peak("mem_util"),
        },
        "hosts": {
            "fleet": len(sim.base),
            "used_mean": samples.mean("used_hosts"),
            "used_peak": samples.peak("used_hosts"),
            "empty_mean": samples.mean("empty_hosts"),
            "empty_min": samples.least("empty_hosts"),
        },
        "stranded": {"cpu": samples.mean("stranded_cpu"), "memory": samples.mean("stranded_mem")},
        "fragmentation": {
            f: {
                "mean": (
                    float(run.fragmentation[samples.in_window, j].mean())
                    if samples.in_window.any()
                    else None
                ),
                "final": run.fragmentation_final.get(f),
            }
            for j, f in enumerate(run.tracked)
        },
        "fragmentation_final": run.fragmentation_final,
        "bound": {
            "probes": run.probes,
            "distance": max(distances) if distances else None,
        },
        "defrag": _defrag(run),
        "admission": _admission(run),
        "latency_us": _latency(run),
        "performance": _performance(run),
        "windows": _windows(run),
    }


class _Samples:
    """The in-window samples of one run, by field (None when there are none)."""

    def __init__(self, sim: Simulation, run: PolicyRun) -> None:
        self.values = run.samples
        self.in_window = run.sample_times >= sim.trace.window_start
        self.column = {f: i for i, f in enumerate(SAMPLE_FIELDS)}

    def _of(self, field: str) -> F64:
        return self.values[self.in_window, self.column[field]]

    def mean(self, field: str) -> float | None:
        vals = self._of(field)
        return float(vals.mean()) if vals.size else None

    def peak(self, field: str) -> float | None:
        vals = self._of(field)
        return float(vals.max()) if vals.size else None

    def least(self, field: str) -> float | None:
        vals = self._of(field)
        return float(vals.min()) if vals.size else None


def _acceptance(sim: Simulation, run: PolicyRun) -> dict[str, Any]:
    """Requests accepted in the window: overall, by business type, weighted by size."""
    tr = sim.trace
    in_window = tr.start >= tr.window_start
    replayed = run.outcome > 0
    got = (run.outcome == ACCEPTED) | (run.outcome == 3)
    arrivals = run.arrivals[1:].sum(axis=0)
    accepted = run.accepted[1:].sum(axis=0)
    vcpus = np.array([sim.base.flavors[f].vcpus for f in tr.flavor_names])[tr.flavor]
    memory = np.array([sim.base.flavors[f].memory_mb for f in tr.flavor_names])[tr.flavor]
    sel = in_window & replayed
    return {
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
    }


def _windows(run: PolicyRun) -> list[dict[str, Any]]:
    """Arrivals, acceptance and evictions per window (the warm-up window left out)."""
    rows = []
    for w in range(1, run.arrivals.shape[0]):
        a, c = run.arrivals[w], run.accepted[w]
        rows.append(
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
    return rows


def _latency(run: PolicyRun) -> dict[str, float]:
    lat_us = run.latency_ns / 1e3
    if not lat_us.size:
        return {}
    return {
        "p50": float(np.percentile(lat_us, 50)),
        "p90": float(np.percentile(lat_us, 90)),
        "p99": float(np.percentile(lat_us, 99)),
        "max": float(lat_us.max()),
        "mean": float(lat_us.mean()),
    }


def _defrag(run: PolicyRun) -> dict[str, Any] | None:
    """Periodic defragmentation: runs, migrations, capacity the plans gained (None: no runs)."""
    logged = [r for r in run.periodic_log if r.get("action") == "defrag"]
    if not logged:
        return None
    runs = [r for r in logged if "skipped" not in r]
    gained: dict[str, int] = {}
    for r in runs:
        for f, after in r.get("capacity_after", {}).items():
            gained[f] = gained.get(f, 0) + after - r["capacity_before"][f]
    return {
        "runs": len(runs),
        "skipped": len(logged) - len(runs),
        "migrations": sum(int(r["migrations"]) for r in runs),
        "by_window": run.migrations[1:].tolist(),
        "capacity_gained": gained,
    }


def _admission(run: PolicyRun) -> dict[str, Any] | None:
    """Admission by migration (None when the policy never admits so)."""
    if not (run.admission_migrations or run.admitted.any()):
        return None
    return {
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


def _performance(run: PolicyRun) -> dict[str, Any]:
    return {
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
