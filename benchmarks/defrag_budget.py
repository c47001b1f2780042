"""Fragment rate and large-flavor capacity against the migration budget (bench_defrag.py's
"Budget" sections): Berth's planner beside a plain best-single-move greedy and the relaxed MIP
bound (`berth.solvers.defrag_bound`), on fragmented NUMA fleets shaped like published VM
rescheduling snapshots (`berth.sim.fragmented`), plus planning time at 1,000 and 10,000 hosts.

The greedy is the textbook one: every round, the single migration (any movable instance, any
host the scheduler's filters allow, landing where the claim rule puts it) that gains the most
16-vCPU one-cell slots; it stops when none gains. It runs on the planner's own machinery
(`MoveSearch` with NUMA shapes and pairs off), so both see the same rules.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from berth.core import jit
from berth.core.config import profile
from berth.core.defrag import (
    Budget,
    Objective,
    Plan,
    Target,
    apply_moves,
    check_plan,
    measure,
    plan_defrag,
)
from berth.core.defrag.planner import _Planner
from berth.core.defrag.search import MoveSearch
from berth.core.engine import FilterScheduler
from berth.core.fragmentation import flavor_cpu_free
from berth.core.resources import H_VCPU
from berth.core.table import HostTable
from berth.sim.fragmented import NOW, REFERENCE, fragmented_fleet
from berth.solvers.defrag_bound import defrag_bound

SCHED = FilterScheduler.from_config(profile("berth"))
TARGET = Target(objective=Objective.FRAGMENT_RATE, flavors=(REFERENCE,))
FIGURES = Target(flavors=(REFERENCE, "w32"))
"""What is reported: the reference flavor and the largest (32 vCPUs over both cells)."""
BUDGETS = (5, 10, 25, 50, 100)
VARIANTS: dict[str, dict[str, float]] = {
    "scheduler-placed, 15 % departed": {"churn": 0.15},
    "random cells": {},
}


def greedy(table: HostTable, budget: int) -> HostTable:
    """The plain greedy's final state (module docstring)."""
    planner = _Planner(table, TARGET, Budget(max_migrations=budget), SCHED, NOW, 0)
    MoveSearch(planner, shapes=False, pairs=False).run()
    return planner.work


def _figures(table: HostTable) -> dict[str, Any]:
    f = measure(table, FIGURES, scheduler=SCHED, now=NOW)
    return {
        "rate": f.fragmentation[REFERENCE],
        "n16": f.capacity[REFERENCE],
        "w32": f.capacity["w32"],
    }


def _after(table: HostTable, plan: Plan) -> HostTable:
    work = table.copy()
    apply_moves(work, plan.moves)
    return work


def curves(sizes: tuple[int, ...], bound_limit: float) -> list[dict[str, Any]]:
    """Per fleet and budget: before, greedy, Berth (plan checked) and the bound."""
    jit.prepare()
    out = []
    for variant, options in VARIANTS.items():
        for n in sizes:
            table = fragmented_fleet(n, seed=0, **options)
            free = float(flavor_cpu_free(table, REFERENCE).sum())
            row: dict[str, Any] = {
                "variant": variant,
                "hosts": n,
                "vms": len(table.allocations),
                "free_share": free / float(table.host_cap[:, H_VCPU].sum()),
                "before": _figures(table),
                "points": [],
            }
            for b in BUDGETS:
                started = time.perf_counter()
                plan = plan_defrag(
                    table, TARGET, Budget(max_migrations=b), scheduler=SCHED, now=NOW
                )
                seconds = time.perf_counter() - started
                check_plan(table, plan, scheduler=SCHED, now=NOW)
                bound = defrag_bound(
                    table,
                    TARGET,
                    Budget(max_migrations=b),
                    scheduler=SCHED,
                    now=NOW,
                    time_limit=bound_limit,
                )
                slots = None if bound is None or bound.bound is None else bound.bound
                row["points"].append(
                    {
                        "budget": b,
                        "moves": plan.migrations,
                        "seconds": seconds,
                        "berth": _figures(_after(table, plan)),
                        "greedy": _figures(greedy(table, b)),
                        "bound_slots": slots,
                        "bound_rate": None if slots is None else (free - 16 * slots) / free,
                        "bound_proven": bool(bound is not None and bound.optimal),
                    }
                )
            out.append(row)
    return out


def timings(sizes: tuple[int, ...], share: float, repeats: int) -> list[dict[str, Any]]:
    """Planning time (median wall and CPU seconds of `repeats`; one run above 5,000 hosts) at a
    budget of `share` of the VMs and at 100 moves, on the scheduler-placed fleet."""
    jit.prepare()
    out = []
    for n in sizes:
        table = fragmented_fleet(n, seed=0, churn=0.15)
        runs = repeats if n <= 5000 else 1
        for budget in (100, max(1, int(share * len(table.allocations)))):
            wall, cpu = [], []
            plan = None
            for _ in range(runs):
                w0, c0 = time.perf_counter(), time.process_time()
                plan = plan_defrag(
                    table, TARGET, Budget(max_migrations=budget), scheduler=SCHED, now=NOW
                )
                wall.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
            assert plan is not None
            check_plan(table, plan, scheduler=SCHED, now=NOW)
            out.append(
                {
                    "hosts": n,
                    "vms": len(table.allocations),
                    "budget": budget,
                    "runs": runs,
                    "moves": plan.migrations,
                    "wall": statistics.median(wall),
                    "cpu": statistics.median(cpu),
                    "before": plan.before.fragmentation[REFERENCE],
                    "after": plan.after.fragmentation[REFERENCE],
                }
            )
    return out


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.1f}%"


def _cut(rate: float | None, before: float) -> str:
    return "?" if rate is None else f"{_pct(rate)} (−{_pct(1 - rate / before)})"


def markdown(rows: list[dict[str, Any]], times: list[dict[str, Any]], limit: float) -> list[str]:
    lines = [
        "",
        "## Budget: fragment rate and large-flavor capacity against migrations",
        "",
        "Fleets from `berth.sim.fragmented`: two 44-vCPU NUMA cells per host, one-cell guests "
        "of 2, 4, 8 and 16 vCPUs and two-cell guests of 16 and 32 vCPUs, about 7-8 VMs a host; "
        "*scheduler-placed* hosts were filled by the claim rule and then lost 15 % of their VMs "
        "at random, *random cells* hosts got each one-cell guest on a random fitting cell. "
        "Fragment rate: free CPU on cells that a 16-vCPU one-cell guest (n16) cannot use, over "
        "all free CPU (target `fragment-rate`). Berth: `plan_defrag` (every plan checked with "
        "`check_plan`). Greedy: the best single move, repeated (module docstring of "
        "`benchmarks/defrag_budget.py`). Bound: `berth.solvers.defrag_bound` (relaxed MIP, "
        f"HiGHS, {limit:g} s limit; no plan within the budget ends with more n16 slots), "
        "shown as the fragment rate it allows. w32: capacity of the 32-vCPU two-cell guest.",
    ]
    for row in rows:
        b = row["before"]
        lines += [
            "",
            f"### {row['variant']}, {row['hosts']:,} hosts, {row['vms']:,} VMs "
            f"({_pct(row['free_share'])} of CPU free)",
            "",
            f"Before: fragment rate {_pct(b['rate'])}, n16 {b['n16']:,}, w32 {b['w32']:,}.",
            "",
            "| budget | greedy rate (cut) | Berth rate (cut) | bound rate (cut) | Berth / bound "
            "slots gained | greedy n16 / w32 | Berth n16 / w32 | bound n16 | Berth s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for p in row["points"]:
            g, m = p["greedy"], p["berth"]

            slots = p["bound_slots"]
            gained = (
                "?"
                if slots is None or slots <= b["n16"]
                else _pct((m["n16"] - b["n16"]) / (slots - b["n16"]))
            )
            proven = "" if p["bound_proven"] else " (dual)"
            rate = b["rate"]
            lines.append(
                f"| {p['budget']} | {_cut(g['rate'], rate)} | {_cut(m['rate'], rate)} | "
                f"{_cut(p['bound_rate'], rate)}{proven} | {gained} | {g['n16']:,} / {g['w32']:,} | "
                f"{m['n16']:,} / {m['w32']:,} | {'?' if slots is None else f'{slots:,.0f}'} | "
                f"{p['seconds']:.2f} |"
            )
    if times:
        lines += [
            "",
            "## Budget: planning time",
            "",
            "Scheduler-placed fleets, `fragment-rate` target; medians of the runs, wall clock and "
            "CPU time of the process (the machine's other workers compete for its 2 cores).",
            "",
            "| hosts | VMs | budget | moves | fragment rate before → after | runs "
            "| plan s (median wall / CPU) |",
            "|---|---|---|---|---|---|---|",
        ]
        for t in times:
            lines.append(
                f"| {t['hosts']:,} | {t['vms']:,} | {t['budget']:,} | {t['moves']:,} | "
                f"{_pct(t['before'])} → {_pct(t['after'])} | {t['runs']} | "
                f"{t['wall']:.2f} / {t['cpu']:.2f} |"
            )
    return lines
