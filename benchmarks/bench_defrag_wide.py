"""Defragmentation on mixed fleets (half two-cell, half eight-cell hosts); writes
results/defrag-wide.md.

What it measures (docs/defrag.md, docs/numa.md "Hosts of up to eight cells"):

1. The planner's landing shapes on tables wider than two cells (`core.defrag.shapes.Ranked`)
   against the planner that lands every move on a wide table where the claim rule puts it
   (the behaviour before them: `landing_shapes` patched to list none there), on the same
   fragmented mixed fleets, budgets of 3 % and 10 % of the VMs: capacity of the large flavors
   after the plan, moves, planning CPU time (median of the runs, interleaved). Every plan is
   checked with `check_plan` (each wave's intermediate state).
2. The planner's gap to the exact optimum (`solvers.defrag_exact`, which now models hosts of
   up to eight cells) on small mixed fleets.

Fleet: two 44-vCPU sockets per host, as `berth.sim.fragmented`; even hosts show them as two
NUMA cells, odd hosts as eight cells of 11 vCPUs (NPS4), with a distance matrix (10 on the
diagonal, 12 inside a socket, 32 across). Guests: one-cell 2/4/8 vCPUs, two-cell 2x4 and 2x8,
four-cell 4x4 (q16) and 4x8 (q32); filled by the claim rule until three draws miss, then 35 %
of the VMs depart at random (`fill_then_churn`).

    .venv/bin/python benchmarks/bench_defrag_wide.py [--quick] [--out ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from berth.core.config import profile
from berth.core.defrag import Budget, Plan, Target, check_plan, plan_defrag
from berth.core.defrag import search as search_module
from berth.core.defrag.shapes import landing_shapes
from berth.core.engine import FilterScheduler
from berth.core.model import DiskInventory, Flavor, Fleet, Host, NumaCell
from berth.core.table import HostTable
from berth.sim.fragmented import fill_then_churn
from berth.solvers.defrag_exact import exact_optimum, heuristic_gap, plan_value
from provenance import machine, source_state

REPO = Path(__file__).resolve().parent.parent
NOW = 1_000_000.0
MIX = (  # name, vCPUs, guest cells, share of arrivals
    ("n2", 2, 1, 0.20),
    ("n4", 4, 1, 0.20),
    ("n8", 8, 1, 0.20),
    ("w8", 8, 2, 0.15),
    ("w16", 16, 2, 0.10),
    ("q16", 16, 4, 0.10),
    ("q32", 32, 4, 0.05),
)
LARGE = ("q32", "w16")
TARGETS = (LARGE, ("w16",), ("q32",))
"""Capacity targets of the landing-shape comparison (slots added up)."""
SCHED = FilterScheduler.from_config(profile("berth"))


def _distances(cells: int) -> list[list[int]]:
    half = cells // 2
    return [
        [10 if a == b else (12 if a // half == b // half else 32) for b in range(cells)]
        for a in range(cells)
    ]


def mixed_fleet(n_hosts: int, seed: int) -> HostTable:
    socket_mem = 44 * 4096 + 16384
    hosts = []
    for i in range(n_hosts):
        wide = i % 2 == 1
        cells = 8 if wide else 2
        cell = NumaCell(shared_cpus=88 // cells, memory_mb=2 * socket_mem // cells)
        hosts.append(
            Host(
                name=f"h{i:05d}",
                numa_cells=[cell] * cells,
                numa_distances=_distances(cells) if wide else None,
                last_heartbeat=NOW,
                disk=DiskInventory(hdd_gb=0),
            )
        )
    flavors = [
        Flavor(
            name=name,
            vcpus=vcpus,
            memory_mb=vcpus * 4096,
            extra_specs={"hw:numa_nodes": str(cells)},
        )
        for name, vcpus, cells, _ in MIX
    ]
    table = HostTable.from_fleet(Fleet(now=NOW, hosts=hosts, flavors=flavors))
    share = np.array([m[3] for m in MIX], dtype=np.float64)
    rng = np.random.default_rng(seed)
    return fill_then_churn(table, [m[0] for m in MIX], share / share.sum(), rng, 0.35)


def _rule_only(table: HostTable, flavor: str) -> Any:
    """The landing shapes before this change: none on a table wider than two cells."""
    return landing_shapes(table, flavor) if table.cell_free.shape[1] == 2 else []


def _plan(table: HostTable, target: Target, budget: Budget, shapes: bool) -> tuple[Plan, float]:
    started = time.process_time()
    if shapes:
        plan = plan_defrag(table, target, budget, scheduler=SCHED, now=NOW)
    else:
        with mock.patch.object(search_module, "landing_shapes", _rule_only):
            plan = plan_defrag(table, target, budget, scheduler=SCHED, now=NOW)
    return plan, time.process_time() - started


def shapes_rows(sizes: list[int], seeds: list[int], shares: list[float], runs: int) -> list[Any]:
    rows = []
    for n, seed in ((n, seed) for n in sizes for seed in seeds):
        table = mixed_fleet(n, seed)
        vms = len(table.allocations)
        for flavors, share in ((f, share) for f in TARGETS for share in shares):
            target = Target(flavors=flavors)
            budget = Budget(max_migrations=max(1, round(share * vms)), max_concurrent=10)
            times: dict[bool, list[float]] = {True: [], False: []}
            plans: dict[bool, Plan] = {}
            for _ in range(runs):
                for shapes in (False, True):  # interleaved
                    plans[shapes], cpu = _plan(table, target, budget, shapes)
                    times[shapes].append(cpu)
            for plan in plans.values():
                check_plan(table, plan, scheduler=SCHED, now=NOW)
            row = {
                "hosts": n,
                "seed": seed,
                "vms": vms,
                "budget": budget.max_migrations,
                "target": flavors,
                "before": sum(plans[True].before.capacity.values()),
                "rule": sum(plans[False].after.capacity.values()),
                "shapes": sum(plans[True].after.capacity.values()),
                "rule_moves": plans[False].migrations,
                "shapes_moves": plans[True].migrations,
                "rule_empty": plans[False].after.empty_hosts,
                "shapes_empty": plans[True].after.empty_hosts,
                "rule_s": statistics.median(times[False]),
                "shapes_s": statistics.median(times[True]),
            }
            rows.append(row)
            print(row, flush=True)
    return rows


def gap_rows(sizes: list[int], seeds: list[int], limit: float) -> list[Any]:
    rows = []
    target = Target(flavors=LARGE)
    for n in sizes:
        for seed in seeds:
            table = mixed_fleet(n, 100 + seed)
            vms = len(table.allocations)
            for share in (0.1, 0.25):
                budget = Budget(max_migrations=max(1, round(share * vms)))
                plan, _ = _plan(table, target, budget, True)
                started = time.process_time()
                best = exact_optimum(
                    table, target, budget, scheduler=SCHED, now=NOW, time_limit=limit
                )
                solve = time.process_time() - started
                value = plan_value(plan)
                assert best.bound is None or value <= best.bound + 1e-6
                row = {
                    "hosts": n,
                    "seed": seed,
                    "vms": vms,
                    "budget": budget.max_migrations,
                    "before": float(sum(plan.before.capacity[f] for f in LARGE)),
                    "plan": value,
                    "exact": best.value,
                    "bound": best.bound,
                    "optimal": best.optimal,
                    "gap": heuristic_gap(best, value),
                    "solve_s": solve,
                }
                rows.append(row)
                print(row, flush=True)
    return rows


def markdown(shape: list[Any], gaps: list[Any], start_load: str, command: str) -> str:
    info = machine()
    out = [
        "# Defragmentation on mixed fleets (two-cell and eight-cell hosts)",
        "",
        f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        f"- commit: {source_state(['src/berth/core/defrag', 'src/berth/solvers'], 'defrag')}",
        f"- machine: {info['cpu_model']}, {info['nproc']} CPUs, {info['platform']}, "
        f"Python {info['python']}, numpy {info['numpy']}",
        f"- load average at start / end: {start_load} / {info['load']} (the machine is shared: "
        "compare ratios within this run)",
        f"- command: `{command}`",
        "",
        "Fleet, guests and method: the module docstring of `benchmarks/bench_defrag_wide.py`. "
        "Targets: capacity (slots added up) of q32 (four cells of 8 vCPUs), w16 (two cells of "
        "8), or both. *Rule*: "
        "the planner landing every move on a wide host where the claim rule puts it (before "
        "the ranked landing shapes); *shapes*: the planner now. Every plan passed `check_plan`. "
        "CPU seconds are medians over the interleaved runs.",
        "",
        "## Landing shapes on wide hosts",
        "",
        "| hosts | seed | VMs | target | budget | before | rule (moves) | shapes (moves) | "
        "shapes - rule | CPU s rule / shapes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in shape:
        gain = r["shapes"] - r["rule"]
        out.append(
            f"| {r['hosts']} | {r['seed']} | {r['vms']} | {' + '.join(r['target'])} | "
            f"{r['budget']} | {r['before']} | {r['rule']} ({r['rule_moves']}) | "
            f"{r['shapes']} ({r['shapes_moves']}) | {gain:+d} | "
            f"{r['rule_s']:.2f} / {r['shapes_s']:.2f} |"
        )
    out += [
        "",
        "## The planner against the exact optimum (small mixed fleets)",
        "",
        "Objective: q32 + w16 slots. `solvers.defrag_exact` on hosts of two and eight cells; the "
        "gap is (bound - plan) / bound.",
        "",
        "| hosts | VMs | budget | before | plan | exact | optimal | gap | solve CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in gaps:
        gap = "?" if r["gap"] is None else f"{r['gap']:.1%}"
        out.append(
            f"| {r['hosts']} | {r['vms']} | {r['budget']} | {r['before']:g} | {r['plan']:g} | "
            f"{r['exact']:g} | {'yes' if r['optimal'] else 'time limit'} | {gap} | "
            f"{r['solve_s']:.1f} |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small fleets only (a smoke run)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/defrag-wide.md")
    parser.add_argument("--gap-limit", type=float, default=30.0, help="seconds per exact solve")
    args = parser.parse_args()
    start_load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if args.quick:
        shape = shapes_rows([40], [0], [0.03], 1)
        gaps = gap_rows([6], [0], args.gap_limit)
    else:
        shape = shapes_rows([100, 300], [0, 1], [0.03, 0.10], 2)
        gaps = gap_rows([6, 8], [0, 1, 2], args.gap_limit)
    command = "python benchmarks/bench_defrag_wide.py" + (" --quick" if args.quick else "")
    args.out.write_text(markdown(shape, gaps, start_load, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
