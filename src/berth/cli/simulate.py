"""`berth simulate`: replay a trace against a fleet under several policies; write a report.

    berth simulate --trace azure --fleet 560xazure-1 --policy nova,first_fit,best_fit,berth \\
                   --out sim-out [--seed 0] [--limit N] [--json]

Exit codes: 0 done, 2 bad input (one line naming the file, line or option).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from berth.cli.names import DEFAULT_SIZING, MAX_ADMISSION
from berth.core.errors import BerthError  # imports nothing heavy: a fast --help

if TYPE_CHECKING:  # the replay (SciPy for its bounds) loads when `simulate` runs: a fast --help
    from berth.sim.defrag import PeriodicDefrag
    from berth.sim.policies import Policy
    from berth.sim.replay import Simulation
    from berth.sim.trace import Trace
    from berth.sim.types import PolicyRun

out = Console()
err = Console(stderr=True)

EXIT_BAD_INPUT = 2
DEFAULT_POLICIES = "nova,first_fit,best_fit,worst_fit,berth-placement,berth"
DEFAULT_FLEETS = {"azure": "560xazure-1", "synthetic": DEFAULT_SIZING}


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def load_trace(spec: str, seed: int, azure_dir: Path | None, days: float) -> Trace:
    from berth.sim.azure import read_azure
    from berth.sim.synthetic import SyntheticConfig, generate
    from berth.sim.tracefile import read_trace

    if spec == "azure":
        return read_azure(azure_dir)
    if spec == "synthetic":
        return generate(SyntheticConfig(seed=seed, days=days))
    return read_trace(spec)


def run_simulation(
    trace_spec: str,
    fleet_spec: str | None,
    policies: str,
    out_dir: Path,
    *,
    seed: int = 0,
    limit: int | None = None,
    azure_dir: Path | None = None,
    days: float = 1.0,
    track: list[str] | None = None,
    sample_every: float | None = None,
    bound: bool = True,
    preemption: bool = True,
    plots: bool = True,
    show_progress: bool = True,
    command: str | None = None,
    warmup: str | None = None,
    defrag_every: str | None = None,
    defrag_budget: str = "3%",
    defrag_flavors: list[str] | None = None,
    defrag_concurrent: int = 1,
    admit_migrations: int | None = None,
) -> dict[str, Any]:
    """The whole command without the console: read, replay each policy, write the report.

    With `defrag_every`, every policy is replayed twice: as it is, and with periodic
    defragmentation (named ``policy+defrag``)."""
    from berth.sim.evictions import default_evictor
    from berth.sim.fleets import load_fleet_or_sizing
    from berth.sim.policies import resolve, resolve_all, with_admission
    from berth.sim.replay import ReplayOptions, Simulation
    from berth.sim.report import write_report

    # options first: fail before reading a trace
    defrag = _defrag_action(defrag_every, defrag_budget, defrag_flavors, defrag_concurrent)
    trace = load_trace(trace_spec, seed, azure_dir, days)
    if limit is not None:
        trace = trace.head(limit)
    chosen = resolve_all(policies.split(","))
    if admit_migrations is not None:
        chosen = [with_admission(p, admit_migrations) for p in chosen]
    spec = fleet_spec or DEFAULT_FLEETS.get(trace_spec)
    if spec is None:
        raise BerthError("--fleet is required for a trace file (a fleet file or a sizing spec)")
    fleet, fleet_desc = load_fleet_or_sizing(spec, trace)
    evictor = default_evictor() if preemption else None
    options = ReplayOptions(
        seed=seed,
        sample_every=sample_every,
        track_flavors=track or None,
        evictor=evictor,
        bound=bound,
        warmup=resolve(warmup) if warmup else None,
    )
    sim = Simulation(trace, fleet, options)
    unknown = [f for f in (defrag.flavors if defrag else ()) if f not in sim.base.flavors]
    if unknown:
        raise BerthError(f"--defrag-flavor: unknown flavor {unknown[0]!r}")
    # (policy, periodic actions, run name): each policy as it is, then with defragmentation
    plan: list[tuple[Policy, list[PeriodicDefrag], str]] = []
    for policy in chosen:
        plan.append((policy, [], policy.name))
        if defrag is not None:
            plan.append((policy, [defrag], policy.name + "+defrag"))
    runs = _replay_all(sim, plan, show_progress)
    opts = {
        "seed": seed,
        "limit": limit,
        "sample_every_s": sim.sample_every,
        "full_fraction": options.full_fraction,
        "preemption": evictor.name if evictor else "off",
        "warmup": warmup or "each policy",
        "admission_migrations": {p.name: p.admission_migrations for p in chosen},
        "defrag": (
            {
                "every_s": defrag.interval,
                "budget": defrag_budget,
                "max_concurrent": defrag.max_concurrent,
                "flavors": list(defrag.flavors) or sim.tracked,
            }
            if defrag
            else None
        ),
    }
    return write_report(out_dir, sim, runs, fleet_desc, command, opts, plots)


def _defrag_action(
    every: str | None, budget: str, flavors: list[str] | None, concurrent: int
) -> PeriodicDefrag | None:
    """The --defrag-* options as a periodic action (None without --defrag-every)."""
    from berth.sim.defrag import PeriodicDefrag, parse_budget, parse_interval

    if every is None:
        return None
    share, count = parse_budget(budget)
    return PeriodicDefrag(
        interval=parse_interval(every),
        share=share,
        migrations=count,
        max_concurrent=concurrent,
        flavors=tuple(flavors or ()),
    )


def _replay_all(
    sim: Simulation, plan: list[tuple[Policy, list[PeriodicDefrag], str]], show_progress: bool
) -> list[PolicyRun]:
    """Every run of the plan in order, with a progress bar per run on stderr when asked."""
    if not show_progress:
        return [sim.run(policy, periodic, name) for policy, periodic, name in plan]
    runs: list[PolicyRun] = []
    with Progress(
        TextColumn("[bold]{task.description:<12}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} events"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as bar:
        for policy, periodic, name in plan:
            task = bar.add_task(name, total=int(sim.ev_time.size))

            def tick(done: int, total: int, task: Any = task) -> None:
                bar.update(task, completed=done)

            sim.options.progress = tick
            runs.append(sim.run(policy, periodic, name))
    sim.options.progress = None
    return runs


def _summary_table(metrics: dict[str, Any]) -> Table:
    tracked = metrics["trace"]["tracked_flavors"]
    big = tracked[0] if tracked else None
    grid = Table(title=f"{metrics['trace']['name']} on {metrics['fleet']}")
    grid.add_column("policy", no_wrap=True)
    migrate = any(s.get("defrag") or s.get("admission") for s in metrics["policies"])
    columns = ["acc%", "evict", "cpu%", "mem%", "empty", "frag%", "bnd+%", "p50µs", "ev/s"]
    if migrate:
        columns.insert(2, "migr")
    for col in columns:
        grid.add_column(col, justify="right")

    def pct(x: float | None, digits: int = 1) -> str:
        return "–" if x is None else f"{100 * x:.{digits}f}"

    for s in metrics["policies"]:
        util = s["utilisation"]
        lat = s["latency_us"]
        cells = [
            s["policy"],
            pct(s["acceptance"]["overall"], 2),
            f"{s['evictions']['total']:,}",
            pct(util["cpu_used_hosts"]),
            pct(util["memory_used_hosts"]),
            f"{s['hosts']['empty_mean'] or 0:.0f}",
            pct(s["fragmentation"][big]["mean"]) if big else "–",
            pct(s["bound"]["distance"]),
            f"{lat['p50']:.0f}" if lat else "–",
            f"{s['performance']['events_per_s'] / 1000:.1f}k",
        ]
        if migrate:
            moved = [s[k]["migrations"] for k in ("admission", "defrag") if s.get(k)]
            cells.insert(3, f"{sum(moved):,}" if moved else "–")
        grid.add_row(*cells)
    grid.caption = (
        "acc%: in-window requests placed; migr: live migrations (admission and periodic "
        "defragmentation); "
        "cpu%/mem%: utilisation of used hosts; "
        f"frag%: free CPU that cannot hold {big}; bnd+%: hosts used / lower bound - 1"
    )
    return grid


TraceOption = Annotated[
    str,
    typer.Option(
        "--trace",
        help="azure (the Protean/CoSpot sample), synthetic (a 360-like day) or a trace "
        "file (CSV/JSONL, see docs/simulator.md).",
    ),
]
OutOption = Annotated[Path, typer.Option("--out", "-o", help="Output directory.")]
FleetOption = Annotated[
    str | None,
    typer.Option(
        "--fleet",
        "-f",
        help="Fleet snapshot file, sizing file, or sizing spec like 560xazure-1 or "
        "90xstd-2s+11xssd-2s (hosts per cluster). Default: 560xazure-1 for azure, "
        f"{DEFAULT_SIZING} for synthetic.",
    ),
]
PolicyOption = Annotated[
    str,
    typer.Option(
        "--policy",
        "-p",
        help="Comma-separated profiles (nova, first_fit, best_fit, worst_fit, berth, "
        "spread, pack, ...) or scheduler configuration files.",
    ),
]
SeedOption = Annotated[int, typer.Option(help="Seed for the generator and tie-breaking.")]
LimitOption = Annotated[int | None, typer.Option(min=1, help="Replay only the first N requests.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print metrics.json's summary as JSON.")]
AzureDirOption = Annotated[
    Path | None,
    typer.Option(
        help="Directory of the Azure sample (default: $BERTH_AZURE_TRACE_DIR "
        "or the shared data directory)."
    ),
]
DaysOption = Annotated[float, typer.Option(min=0.01, help="Synthetic trace length.")]
FlavorOption = Annotated[
    list[str] | None,
    typer.Option("--flavor", help="Flavor to track fragmentation for (repeatable)."),
]
SampleEveryOption = Annotated[
    float | None, typer.Option(help="Seconds of trace time between samples.")
]
NoBoundOption = Annotated[bool, typer.Option("--no-bound", help="Skip the LP/MIP lower bound.")]
NoPreemptionOption = Annotated[
    bool, typer.Option("--no-preemption", help="Never evict preemptible instances.")
]
NoPlotsOption = Annotated[bool, typer.Option("--no-plots", help="Skip the PNG plots.")]
WarmupOption = Annotated[
    str | None,
    typer.Option(
        help="Policy that places the VMs already running when the window opens, for "
        "every policy alike (default: each policy places them itself)."
    ),
]
DefragEveryOption = Annotated[
    str | None,
    typer.Option(
        "--defrag-every",
        help="Also replay every policy with periodic defragmentation, every this much "
        "trace time (e.g. 1d, 12h, 3600); reported as POLICY+defrag.",
    ),
]
DefragBudgetOption = Annotated[
    str,
    typer.Option(
        "--defrag-budget",
        help="Migrations per defragmentation run: a share of the running VMs (3%) or "
        "a number (50).",
    ),
]
DefragFlavorOption = Annotated[
    list[str] | None,
    typer.Option(
        "--defrag-flavor",
        help="Flavor whose capacity defragmentation restores (repeatable; default: "
        "the tracked large flavors).",
    ),
]
DefragConcurrentOption = Annotated[
    int, typer.Option("--defrag-concurrent", min=1, help="Migrations per wave.")
]
AdmitMigrationsOption = Annotated[
    int | None,
    typer.Option(
        "--admit-migrations",
        min=0,
        max=MAX_ADMISSION,
        help="Live migrations every policy may make to admit a request that fits "
        "nowhere (0 = never; tried before any eviction). Default: each policy's own "
        "(berth: 1, others: 0). A policy whose setting changes is renamed, e.g. "
        "first_fit+admit1 or berth-noadmit.",
    ),
]


def simulate(
    trace: TraceOption,
    out_dir: OutOption,
    fleet: FleetOption = None,
    policy: PolicyOption = DEFAULT_POLICIES,
    seed: SeedOption = 0,
    limit: LimitOption = None,
    as_json: JsonOption = False,
    azure_dir: AzureDirOption = None,
    days: DaysOption = 1.0,
    flavor: FlavorOption = None,
    sample_every: SampleEveryOption = None,
    no_bound: NoBoundOption = False,
    no_preemption: NoPreemptionOption = False,
    no_plots: NoPlotsOption = False,
    warmup: WarmupOption = None,
    defrag_every: DefragEveryOption = None,
    defrag_budget: DefragBudgetOption = "3%",
    defrag_flavor: DefragFlavorOption = None,
    defrag_concurrent: DefragConcurrentOption = 1,
    admit_migrations: AdmitMigrationsOption = None,
) -> None:
    """Replay a VM trace against a fleet under several placement policies; write a report."""
    command = "berth " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    started = time.perf_counter()
    try:
        metrics = run_simulation(
            trace,
            fleet,
            policy,
            out_dir,
            seed=seed,
            limit=limit,
            azure_dir=azure_dir,
            days=days,
            track=flavor,
            sample_every=sample_every,
            bound=not no_bound,
            preemption=not no_preemption,
            plots=not no_plots,
            show_progress=not as_json,
            command=command,
            warmup=warmup,
            defrag_every=defrag_every,
            defrag_budget=defrag_budget,
            defrag_flavors=defrag_flavor,
            defrag_concurrent=defrag_concurrent,
            admit_migrations=admit_migrations,
        )
    except BerthError as exc:
        _fail(str(exc))
    if as_json:
        _print_json(out_dir, metrics)
        return
    out.print(_summary_table(metrics))
    if metrics["trace"]["citation"]:
        out.print(f"[dim]{metrics['trace']['citation']}[/]", soft_wrap=True)
    out.print(
        f"Report: {out_dir / 'report.md'}, metrics: {out_dir / 'metrics.json'} "
        f"({time.perf_counter() - started:.1f} s)"
    )


def _print_json(out_dir: Path, metrics: dict[str, Any]) -> None:
    """--json: metrics.json's trace, fleet and per-policy summaries (no windows) on stdout."""
    sys.stdout.write(
        json.dumps(
            {
                "out": str(out_dir),
                "trace": metrics["trace"],
                "fleet": metrics["fleet"],
                "policies": [
                    {k: v for k, v in s.items() if k != "windows"} for s in metrics["policies"]
                ],
            },
            indent=2,
        )
        + "\n"
    )


def register(app: typer.Typer) -> None:
    """Add `berth simulate` to the CLI."""
    app.command()(simulate)
