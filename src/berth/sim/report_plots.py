"""The simulation report's PNG plots (matplotlib, Agg backend, imported only when plotting)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from berth.sim.replay import SAMPLE_FIELDS, Simulation
from berth.sim.trace import DAY, HOUR
from berth.sim.types import PolicyRun

PLOTS = ("utilisation.png", "acceptance.png", "fragmentation.png", "latency.png")


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
