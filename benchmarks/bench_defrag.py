"""Defragmentation benchmark: the planner on fragmented fleets; writes results/defrag.md.

What it does (docs/defrag.md has the planner):

1. Synthetic NUMA-heavy fleets: two-socket hosts (24 pinned CPUs and 96 GB per cell), filled
   host by host with single-cell 2/4/8-CPU guests in a random arrival order until three draws
   in a row no longer fit, then a random 35 % deleted: much is free, but few cells hold a
   16-CPU single-cell guest (l16) and fewer hosts a 32-CPU two-cell guest (x32). The planner
   gets a budget of 3 % of the VMs and 10 moves per wave; capacity, fragmentation, empty hosts,
   migrations and planning time (median of the runs) at 1,000 and 10,000 hosts, and the
   empty-hosts objective at 1,000.
2. A fleet fragmented by the simulator: the Azure packing sample (Protean OSDI 2020 / CoSpot
   SoCC 2022, CC-BY 4.0) replayed on 560 x azure-1 under Nova's spreading profile up to the
   middle of its window, then the same planner for the two largest common flavors.
3. The heuristic's gap to the exact optimum (`berth.solvers.defrag_exact`, HiGHS) on small
   synthetic fleets (8, 10 and 12 hosts, several seeds, budgets of 3 % and 10 % of the VMs).
4. Capacity against migrations on the 1,000-host fleet (a plot, when matplotlib is present).
5. With ``--reference REV``: the planner of git revision REV (its `planner.py`, loaded beside
   this one) against this one on the same inputs, interleaved in one run: CPU time medians and
   a fingerprint of each plan (they must be identical). Inputs: the fleets of 1. and 2., and
   every plan the simulator's Berth policy asks for in a replay of the Azure sample's first
   20,000 VMs on 520 x azure-1.

    .venv/bin/python benchmarks/bench_defrag.py [--quick] [--reference REV]
        [--out benchmarks/results/defrag.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import defrag_budget
from berth.core.config import profile
from berth.core.defrag import Budget, Objective, Plan, Target, check_plan, plan_defrag
from berth.core.engine import FilterScheduler
from berth.core.model import DiskInventory, Flavor, Fleet, Host, NumaCell
from berth.core.table import HostTable
from berth.sim.fragmented import fill_then_churn
from berth.solvers.defrag_exact import exact_optimum, heuristic_gap, plan_value
from provenance import machine, source_state

REPO = Path(__file__).resolve().parent.parent
NOW = 1_000_000.0
SMALL = ("s2", "s4", "m8")
SMALL_SHARE = (0.5, 0.3, 0.2)
LARGE = ("l16", "x32")


def _flavor(name: str, vcpus: int, numa_nodes: int) -> Flavor:
    return Flavor(
        name=name,
        vcpus=vcpus,
        memory_mb=vcpus * 4096,
        extra_specs={"hw:cpu_policy": "dedicated", "hw:numa_nodes": str(numa_nodes)},
    )


FLAVORS = [
    _flavor("s2", 2, 1),
    _flavor("s4", 4, 1),
    _flavor("m8", 8, 1),
    _flavor("l16", 16, 1),
    _flavor("x32", 32, 2),
]


def numa_fleet(n_hosts: int, seed: int, delete: float = 0.35) -> HostTable:
    """Hosts filled in a random arrival order of small guests, then a random share deleted."""
    rng = np.random.default_rng(seed)
    cell = NumaCell(dedicated_cpus=24, memory_mb=98304)
    hosts = [
        Host(
            name=f"h{i:05d}",
            numa_cells=[cell, cell],
            last_heartbeat=NOW,
            disk=DiskInventory(hdd_gb=0),
        )
        for i in range(n_hosts)
    ]
    table = HostTable.from_fleet(Fleet(now=NOW, hosts=hosts, flavors=FLAVORS))
    return fill_then_churn(
        table, list(SMALL), np.asarray(SMALL_SHARE, dtype=np.float64), rng, delete
    )


def weighted(figures: dict[str, int], flavors: tuple[str, ...]) -> int:
    return sum(figures[f] for f in flavors)


Planner = Callable[..., Plan]
REFERENCE: dict[str, Any] = {}
"""The reference planner (`--reference`): {"rev": ..., "plan_defrag": ...}, and the comparisons
made with it ({"rows": [...]})."""


def load_reference(rev: str) -> Planner:
    """`plan_defrag` of revision `rev`'s planner.py, imported as a module beside this one (it
    uses this checkout's objective, rules and table modules, whose interfaces it needs)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:src/berth/core/defrag/planner.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory(prefix="berth-ref-planner-") as folder:
        path = Path(folder) / "reference_planner.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("reference_planner", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up while defined
        spec.loader.exec_module(module)
    planner: Planner = module.plan_defrag
    return planner


def fingerprint(plan: Plan) -> str:
    """A short hash of everything a plan says (moves in order, waves, footprints, figures)."""
    text = json.dumps(plan.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def compare(
    name: str,
    inputs: list[tuple[HostTable, Target, Budget, FilterScheduler, float, int]],
    repeats: int,
) -> None:
    """Plan every input with the reference planner and this one, interleaved, `repeats` times;
    record the CPU time medians (summed over the inputs) and whether every plan is identical."""
    if not REFERENCE or not inputs:
        return
    reference: Planner = REFERENCE["plan_defrag"]
    ref_cpu: list[float] = []
    new_cpu: list[float] = []
    same = True
    moves = 0
    prints: list[str] = []
    for table, target, budget, scheduler, now, seed in inputs:
        r_times, n_times = [], []
        for _ in range(repeats):
            cpu = time.process_time()
            old = reference(table, target, budget, scheduler=scheduler, now=now, seed=seed)
            r_times.append(time.process_time() - cpu)
            cpu = time.process_time()
            new = plan_defrag(table, target, budget, scheduler=scheduler, now=now, seed=seed)
            n_times.append(time.process_time() - cpu)
        same &= fingerprint(old) == fingerprint(new) and old == new
        moves += new.migrations
        prints.append(fingerprint(new))
        ref_cpu.append(statistics.median(r_times))
        new_cpu.append(statistics.median(n_times))
    row = {
        "name": name,
        "plans": len(inputs),
        "moves": moves,
        "reference_cpu_s": sum(ref_cpu),
        "cpu_s": sum(new_cpu),
        "speedup": sum(ref_cpu) / max(sum(new_cpu), 1e-9),
        "same": same,
        "fingerprint": hashlib.sha256("".join(prints).encode()).hexdigest()[:12],
    }
    REFERENCE.setdefault("rows", []).append(row)
    print(
        f"reference {REFERENCE['rev']} vs this planner, {name}: {row['reference_cpu_s']:.2f} s -> "
        f"{row['cpu_s']:.2f} s CPU (x{row['speedup']:.1f}), same plans: {same}",
        flush=True,
    )


def run_plan(
    table: HostTable, target: Target, budget: Budget, now: float, repeats: int
) -> tuple[Plan, list[tuple[float, float]]]:
    """Plan `repeats` times; (wall s, CPU s) of each run."""
    scheduler = FilterScheduler.from_config(profile("berth"))
    times = []
    plan = None
    for _ in range(repeats):
        started, cpu = time.perf_counter(), time.process_time()
        plan = plan_defrag(table, target, budget, scheduler=scheduler, now=now)
        times.append((time.perf_counter() - started, time.process_time() - cpu))
    assert plan is not None
    return plan, times


def berth_replay_inputs() -> list[tuple[HostTable, Target, Budget, FilterScheduler, float, int]]:
    """Every planner call of the simulator's Berth policy (periodic defragmentation under
    pressure) in a replay of the Azure sample's first 20,000 VMs on 520 x azure-1."""
    import berth.sim.defrag as sim_defrag
    from berth.sim.azure import find_azure_dir, read_azure
    from berth.sim.evictions import default_evictor
    from berth.sim.fleets import load_fleet_or_sizing
    from berth.sim.policies import resolve
    from berth.sim.replay import ReplayOptions, Simulation

    try:
        find_azure_dir(None)
    except Exception as exc:  # the data set is optional for this benchmark
        print(f"azure sample not found ({exc}); skipping the Berth replay", flush=True)
        return []
    inputs: list[tuple[HostTable, Target, Budget, FilterScheduler, float, int]] = []
    planner: Planner = getattr(sim_defrag, "plan_defrag")  # noqa: B009 (patched below)

    def record(
        table: HostTable,
        target: Target,
        budget: Budget,
        *,
        scheduler: FilterScheduler,
        now: float,
        seed: int = 0,
    ) -> Plan:
        inputs.append((table.copy(), target, budget, scheduler, now, seed))
        return planner(table, target, budget, scheduler=scheduler, now=now, seed=seed)

    trace = read_azure().head(20000)
    fleet, _ = load_fleet_or_sizing("520xazure-1", trace)
    options = ReplayOptions(bound=False, evictor=default_evictor(), warmup=resolve("first_fit"))
    setattr(sim_defrag, "plan_defrag", record)  # noqa: B010 (the replay calls it by name)
    try:
        Simulation(trace, fleet, options).run(resolve("berth"))
    finally:
        setattr(sim_defrag, "plan_defrag", planner)  # noqa: B010
    return inputs


def describe(
    plan: Plan, vms: int, times: list[tuple[float, float]], check_s: float
) -> dict[str, Any]:
    waves = plan.moves[-1].wave + 1 if plan.moves else 0
    return {
        "vms": vms,
        "budget": plan.budget.max_migrations,
        "moves": plan.migrations,
        "moves_share": plan.migrations / max(1, vms),
        "waves": waves,
        "before": plan.before.model_dump(),
        "after": plan.after.model_dump(),
        "plan_s_median": statistics.median(t for t, _ in times),
        "plan_cpu_s_median": statistics.median(c for _, c in times),
        "plan_s_all": times,
        "check_s": check_s,
    }


def synthetic(sizes: list[int], repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sizes:
        started = time.perf_counter()
        table = numa_fleet(n, seed=1)
        built = time.perf_counter() - started
        vms = len(table.allocations)
        budget = Budget(max_migrations=int(0.03 * vms), max_concurrent=10)
        target = Target(flavors=LARGE)
        plan, times = run_plan(table, target, budget, NOW, repeats)
        started = time.perf_counter()
        check_plan(table, plan)
        checked = time.perf_counter() - started
        berth = FilterScheduler.from_config(profile("berth"))
        compare(
            f"synthetic NUMA, {n:,} hosts, capacity",
            [(table, target, budget, berth, NOW, 0)],
            repeats,
        )
        row = describe(plan, vms, times, checked)
        row["hosts"] = n
        row["build_s"] = built
        out[f"capacity-{n}"] = row
        print(
            f"synthetic {n} hosts, {vms} VMs: l16 {plan.before.capacity['l16']} -> "
            f"{plan.after.capacity['l16']}, x32 {plan.before.capacity['x32']} -> "
            f"{plan.after.capacity['x32']}, {plan.migrations} moves in {row['waves']} waves, "
            f"plan {row['plan_s_median']:.2f} s (median of {len(times)})",
            flush=True,
        )
        if n == sizes[0]:
            empty = Target(objective=Objective.EMPTY_HOSTS)
            plan, times = run_plan(table, empty, budget, NOW, repeats)
            compare(
                f"synthetic NUMA, {n:,} hosts, empty hosts",
                [(table, empty, budget, FilterScheduler.from_config(profile("berth")), NOW, 0)],
                repeats,
            )
            row = describe(plan, vms, times, 0.0)
            row["hosts"] = n
            out[f"empty-{n}"] = row
            print(
                f"synthetic {n} hosts, empty hosts: {plan.before.empty_hosts} -> "
                f"{plan.after.empty_hosts} with {plan.migrations} moves",
                flush=True,
            )
    return out


class _Capture:
    """A periodic action of the replay that keeps a copy of the table the first time it runs."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.table: HostTable | None = None
        self.now = 0.0

    def __call__(self, state: Any, now: float) -> int:
        if self.table is None:
            self.table = state.table.copy()
            self.now = float(state.now)
        return 0


def simulated(repeats: int) -> dict[str, Any]:
    from berth.sim.azure import find_azure_dir, read_azure
    from berth.sim.fleets import load_fleet_or_sizing
    from berth.sim.policies import resolve
    from berth.sim.replay import ReplayOptions, Simulation, large_flavors

    try:
        find_azure_dir(None)
    except Exception as exc:  # the data set is optional for this benchmark
        print(f"azure sample not found ({exc}); skipping the replayed fleet", flush=True)
        return {}
    trace = read_azure()
    fleet, _ = load_fleet_or_sizing("560xazure-1", trace)
    capture = _Capture(trace.window / 2)
    started = time.perf_counter()
    Simulation(trace, fleet, ReplayOptions(periodic=[capture], bound=False)).run(resolve("nova"))
    replayed = time.perf_counter() - started
    table = capture.table
    assert table is not None
    sizes = {n: (f.vcpus, f.memory_mb) for n, f in table.flavors.items()}
    large = tuple(large_flavors(trace, k=2, sizes=sizes))
    vms = len(table.allocations)
    budget = Budget(max_migrations=int(0.03 * vms), max_concurrent=10)
    plan, times = run_plan(table, Target(flavors=large), budget, capture.now, repeats)
    berth = FilterScheduler.from_config(profile("berth"))
    compare(
        f"Azure replay (nova, mid-window), {len(table)} hosts",
        [(table, Target(flavors=large), budget, berth, capture.now, 0)],
        repeats,
    )
    started = time.perf_counter()
    check_plan(table, plan)
    row = describe(plan, vms, times, time.perf_counter() - started)
    row["hosts"] = len(table)
    row["flavors"] = list(large)
    row["replay_s"] = replayed
    print(
        f"azure replay (nova, mid-window) {len(table)} hosts, {vms} VMs: "
        + ", ".join(f"{f} {plan.before.capacity[f]} -> {plan.after.capacity[f]}" for f in large)
        + f", {plan.migrations} moves, plan {row['plan_s_median']:.2f} s",
        flush=True,
    )
    return {"azure": row}


def gaps(
    sizes: list[int],
    seeds: list[int],
    shares: list[float],
    limit: float,
    target: Target,
    delete: float = 0.35,
) -> dict[str, Any]:
    rows = []
    scheduler = FilterScheduler.from_config(profile("berth"))
    for n in sizes:
        for seed in seeds:
            table = numa_fleet(n, seed=100 + seed, delete=delete)
            vms = len(table.allocations)
            for share in shares:
                budget = Budget(max_migrations=max(1, round(share * vms)))
                heur = plan_defrag(table, target, budget, scheduler=scheduler, now=NOW)
                started = time.perf_counter()
                best = exact_optimum(
                    table, target, budget, scheduler=scheduler, now=NOW, time_limit=limit
                )
                solve = time.perf_counter() - started
                value = plan_value(heur)
                rows.append(
                    {
                        "hosts": n,
                        "seed": seed,
                        "vms": vms,
                        "budget": budget.max_migrations,
                        "before": (
                            heur.before.empty_hosts
                            if target.objective is Objective.EMPTY_HOSTS
                            else weighted(heur.before.capacity, LARGE)
                        ),
                        "heuristic": value,
                        "heuristic_moves": heur.migrations,
                        "exact": best.value,
                        "bound": best.bound,
                        "optimal": best.optimal,
                        "exact_moves": best.moved,
                        "gap": heuristic_gap(best, value),
                        "solve_s": solve,
                    }
                )
                gap = rows[-1]["gap"]
                print(
                    f"gap {n} hosts seed {seed} budget {budget.max_migrations}: heuristic "
                    f"{value:g}, exact {best.value:g} (bound {best.bound}, "
                    f"{'optimal' if best.optimal else 'time limit'}), gap "
                    f"{'?' if gap is None else f'{gap:.1%}'}, {solve:.1f} s",
                    flush=True,
                )
    return {"rows": rows}


def curve(table_hosts: int, shares: list[float]) -> list[dict[str, Any]]:
    table = numa_fleet(table_hosts, seed=1)
    vms = len(table.allocations)
    scheduler = FilterScheduler.from_config(profile("berth"))
    out = []
    for share in shares:
        budget = Budget(max_migrations=int(share * vms), max_concurrent=10)
        plan = plan_defrag(table, Target(flavors=LARGE), budget, scheduler=scheduler, now=NOW)
        out.append(
            {
                "share": share,
                "budget": budget.max_migrations,
                "moves": plan.migrations,
                **{f"capacity_{f}": plan.after.capacity[f] for f in LARGE},
            }
        )
    return out


def plot(points: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 3.6))
    moves = [p["moves"] for p in points]
    for f in LARGE:
        ax.plot(moves, [p[f"capacity_{f}"] for p in points], marker="o", label=f)
    ax.set_xlabel("migrations used")
    ax.set_ylabel("instances that fit")
    ax.set_title("capacity of the large flavors vs migrations (1,000 hosts)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------------- report
def command_line() -> str:
    exe = Path(sys.executable)
    shown = ".venv/bin/python" if ".venv" in exe.parts else exe.name
    return shlex.join([shown, *sys.argv])


def pct(x: float) -> str:
    return f"{x:.1%}"


def markdown(result: dict[str, Any], plot_name: str | None) -> str:
    info = result["machine"]
    lines = [
        "# Defragmentation benchmark",
        "",
        f"- date: {result['date']}",
        f"- commit: {result['commit']}",
        f"- machine: {info.get('cpu_model', '?')}, {info['nproc']} CPUs, {info['platform']}, "
        f"Python {info['python']}, numpy {info['numpy']}",
        f"- load average at start / end: {result['load_start']} / {result['load_end']} "
        "(the machine is shared: compare ratios within this run)",
        f"- command: `{result['command']}`",
        "",
        "Planner: `berth.core.defrag.plan_defrag` with the `berth` scheduler profile; every plan "
        "below was verified with `check_plan` (every wave's intermediate state). Planning times "
        "are medians of 3 runs, wall clock and CPU time of the process (the CPU time is what the "
        "planner costs when the machine's other workers compete for its 2 cores).",
        "",
        "## Fragmented fleets: capacity for the large flavors, 3 % migration budget",
        "",
        "| fleet | VMs | budget | moves (share of VMs) | waves | l16 / large 1 before → after "
        "| x32 / large 2 before → after | fragmentation before → after | empty hosts | plan s "
        "(median wall / CPU) | check s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in result["fleets"].items():
        if key.startswith("empty"):
            continue
        flavors = row.get("flavors", list(LARGE))
        b, a = row["before"], row["after"]
        name = (
            f"synthetic NUMA, {row['hosts']:,} hosts"
            if key.startswith("capacity")
            else f"Azure replay (nova, mid-window), {row['hosts']} hosts"
        )
        caps = [f"{f}: {b['capacity'][f]:,} → {a['capacity'][f]:,}" for f in flavors]
        frag = "; ".join(
            f"{f}: {pct(b['fragmentation'][f])} → {pct(a['fragmentation'][f])}" for f in flavors
        )
        lines.append(
            f"| {name} | {row['vms']:,} | {row['budget']:,} | {row['moves']:,} "
            f"({pct(row['moves_share'])}) | {row['waves']} | {caps[0]} | {caps[1]} | {frag} | "
            f"{b['empty_hosts']} → {a['empty_hosts']} | {row['plan_s_median']:.2f} / "
            f"{row['plan_cpu_s_median']:.2f} | {row['check_s']:.2f} |"
        )
    for key, row in result["fleets"].items():
        if key.startswith("empty"):
            lines += [
                "",
                f"Empty-hosts objective on the {row['hosts']:,}-host synthetic fleet: "
                f"{row['before']['empty_hosts']} → {row['after']['empty_hosts']} empty hosts with "
                f"{row['moves']} of {row['budget']} migrations, planned in "
                f"{row['plan_s_median']:.2f} s.",
            ]
    lines += _reference_lines(result.get("reference"))
    for key, title in (
        ("gaps", "l16 + x32 capacity"),
        ("gaps_empty", "empty hosts (fleets with half the VMs deleted)"),
    ):
        lines += _gap_lines(result[key]["rows"], title, result["gap_limit"])
    if result["curve"]:
        lines += [
            "",
            "## Capacity against migrations (synthetic, 1,000 hosts)",
            "",
            "| budget (share of VMs) | moves | l16 | x32 |",
            "|---|---|---|---|",
        ]
        for p in result["curve"]:
            lines.append(
                f"| {p['budget']} ({pct(p['share'])}) | {p['moves']} | {p['capacity_l16']:,} | "
                f"{p['capacity_x32']:,} |"
            )
        if plot_name:
            lines += ["", f"![capacity vs migrations]({plot_name})"]
    if result.get("budget"):
        at = lines.index(
            "## Fragmented fleets: capacity for the large flavors, 3 % migration budget"
        )
        section = defrag_budget.markdown(
            result["budget"], result.get("budget_times", []), result["bound_limit"]
        )
        lines[at - 1 : at - 1] = section
    lines.append("")
    return "\n".join(lines)


def _reference_lines(ref: dict[str, Any] | None) -> list[str]:
    if not ref or not ref.get("rows"):
        return []
    lines = [
        "",
        f"## Planning time: this planner against revision {ref['rev']}",
        "",
        f"The planner of revision {ref['rev']} (`--reference`) and this one on the same inputs, "
        "interleaved in this run; CPU seconds, medians of 3 runs per input, summed over the "
        "inputs. A plan is the same when its fingerprint (a hash of its moves in order, waves, "
        "footprints and figures) and the plan object are equal.",
        "",
        "| inputs | plans | moves | reference CPU s | this CPU s | speed-up | same plans "
        "| fingerprint |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in ref["rows"]:
        lines.append(
            f"| {r['name']} | {r['plans']} | {r['moves']:,} | {r['reference_cpu_s']:.2f} | "
            f"{r['cpu_s']:.2f} | {r['speedup']:.1f}x | {'yes' if r['same'] else '**no**'} | "
            f"{r['fingerprint']} |"
        )
    return lines


def _gap_lines(rows: list[dict[str, Any]], title: str, limit: float) -> list[str]:
    lines: list[str] = []
    if rows:
        lines += [
            "",
            f"## Gap to the exact optimum: {title}",
            "",
            "Small synthetic fleets. Exact: `berth.solvers.defrag_exact.exact_optimum` "
            "(MIP, HiGHS, "
            f"{limit:g} s limit; among optimal final states the one with the fewest moves); "
            "gap = (bound − heuristic) / bound, the true gap where the optimum was proven.",
            "",
            "| hosts | seed | VMs | budget | before | heuristic (moves) | exact (moves) | proven "
            "| gap | solve s |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            gap = "?" if r["gap"] is None else pct(r["gap"])
            lines.append(
                f"| {r['hosts']} | {r['seed']} | {r['vms']} | {r['budget']} | {r['before']} | "
                f"{r['heuristic']:g} ({r['heuristic_moves']}) | {r['exact']:g} "
                f"({r['exact_moves']}) | {'yes' if r['optimal'] else 'no'} | {gap} | "
                f"{r['solve_s']:.1f} |"
            )
        known = [r["gap"] for r in rows if r["gap"] is not None]
        if known:
            lines += [
                "",
                f"Gap over {len(known)} cases: median {pct(statistics.median(known))}, mean "
                f"{pct(statistics.fmean(known))}, worst {pct(max(known))}; the heuristic "
                f"reached the optimum in {sum(g < 1e-9 for g in known)} of them.",
            ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small fleets only (a smoke run)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/defrag.md")
    parser.add_argument("--gap-limit", type=float, default=20.0, help="seconds per exact solve")
    parser.add_argument(
        "--bound-limit", type=float, default=60.0, help="seconds per relaxed bound (budget curves)"
    )
    parser.add_argument(
        "--budget-only", action="store_true", help="only the budget sections (a partial file)"
    )
    parser.add_argument(
        "--reference", metavar="REV", help="also time the planner of this git revision (same plans)"
    )
    args = parser.parse_args(argv)
    if args.reference:
        REFERENCE.update(rev=args.reference, plan_defrag=load_reference(args.reference))
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    sizes = [300, 1000] if args.quick else [1000, 10000]
    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": source_state(("src/berth/core/defrag", "src/berth/solvers"), "defrag"),
        "machine": machine(),
        "command": command_line(),
        "load_start": load_start,
        "gap_limit": args.gap_limit,
    }
    budget_sizes = (300,) if args.quick else (300, 1000)
    result["bound_limit"] = args.bound_limit
    result["budget"] = defrag_budget.curves(budget_sizes, args.bound_limit)
    timing_sizes = (1000,) if args.quick else (1000, 10000)
    result["budget_times"] = defrag_budget.timings(timing_sizes, 0.03, 1 if args.quick else 3)
    if args.budget_only:
        result["fleets"], result["curve"] = {}, []
        result["gaps"] = result["gaps_empty"] = {"rows": []}
        result["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        args.out.write_text(markdown(result, None), encoding="utf-8")
        print(f"wrote {args.out}")
        return 0
    fleets = synthetic(sizes, repeats=3)
    if not args.quick:
        fleets.update(simulated(repeats=3))
        if REFERENCE:
            inputs = berth_replay_inputs()
            compare("Azure sample, first 20,000 VMs on 520 x azure-1, Berth policy", inputs, 3)
    result["fleets"] = fleets
    if REFERENCE:
        result["reference"] = {"rev": REFERENCE["rev"], "rows": REFERENCE.get("rows", [])}
    gap_sizes = [8] if args.quick else [8, 10, 12]
    gap_seeds = [0, 1] if args.quick else [0, 1, 2, 3]
    result["gaps"] = gaps(gap_sizes, gap_seeds, [0.03, 0.10], args.gap_limit, Target(flavors=LARGE))
    empty = Target(objective=Objective.EMPTY_HOSTS)
    result["gaps_empty"] = gaps(gap_sizes, gap_seeds, [0.10, 0.30], args.gap_limit, empty, 0.5)
    shares = [0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08]
    result["curve"] = curve(sizes[0], shares)
    result["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    plot_path = args.out.with_name(args.out.stem + "-capacity.png")
    drawn = plot(result["curve"], plot_path)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(result, plot_path.name if drawn else None), encoding="utf-8")
    print(f"wrote {args.out}" + (f" and {plot_path}" if drawn else ""))
    print(json.dumps({k: v for k, v in result.items() if k != "curve"}, default=str)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
