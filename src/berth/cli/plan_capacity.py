"""`berth plan-capacity`: how many servers to buy to meet an acceptance target on a trace.

    berth plan-capacity --trace synthetic --growth 1.3 --offer std-2s:9000 --offer ssd-2s:12000 \\
                        --offer dpdk-2s:15000 --target-acceptance 99.5% --out plan-out

Exit codes: 0 a purchase was found, 1 none meets the target, 2 bad input (one line naming it).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from berth.cli.names import DEFAULT_SIZING
from berth.cli.tables import print_table
from berth.core.errors import BerthError  # imports nothing heavy: a fast --help

if TYPE_CHECKING:  # the planner and the replay load when the command runs: a fast --help
    from berth.sim.capacity_exec import CapacityProblem
    from berth.sim.capacity_plan import Outcome

out = Console()
err = Console(stderr=True)

EXIT_NONE = 1
EXIT_BAD_INPUT = 2
DEFAULT_FLEETS = {"azure": "560xazure-1", "synthetic": DEFAULT_SIZING}


def parse_share(text: str, option: str) -> float:
    """``99.5%`` or ``0.995`` -> 0.995."""
    from berth.sim.capacity_plan import PlanError

    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise PlanError(
            f"{option}: {text!r} is not a share (0.995) or a percentage (99.5%)"
        ) from None
    if not raw.endswith("%") and value > 1:
        raise PlanError(
            f"{option}: {text!r} is above 1; give a share (0.995) or a percentage (99.5%)"
        )
    return value


def build_problem(
    trace_spec: str,
    fleet_spec: str | None,
    offers: list[str],
    *,
    policy: str,
    growth: float,
    seed: int,
    limit: int | None,
    days: float,
    azure_dir: Path | None,
    business: str,
    preemption: bool,
) -> tuple[CapacityProblem, list[Any], str]:
    """The planning problem from the options (offers first: they fail before any trace is
    read); returns it, the offers and the fleet's description."""
    from berth.cli.simulate import load_trace
    from berth.core.model import Fleet
    from berth.sim.capacity_exec import CapacityProblem
    from berth.sim.capacity_offers import parse_offers
    from berth.sim.capacity_plan import PlanError
    from berth.sim.fleets import load_fleet_or_sizing
    from berth.sim.growth import grow
    from berth.sim.policies import resolve
    from berth.sim.trace import Business

    offered, types = parse_offers(offers)
    try:
        codes = tuple(int(Business.parse(b)) for b in business.split(",") if b.strip())
    except ValueError as exc:
        raise PlanError(f"--target-business: {exc}") from None
    if not codes:
        raise PlanError("--target-business: name at least one business type (on-demand)")
    chosen = resolve(policy)
    trace = load_trace(trace_spec, seed, azure_dir, days)
    if limit is not None:
        trace = trace.head(limit)
    trace = grow(trace, growth, seed)
    spec = fleet_spec or DEFAULT_FLEETS.get(trace_spec, "none")
    if spec == "none":
        fleet, desc = Fleet(hosts=[], now=0.0), "none (a green field)"
    else:
        fleet, desc = load_fleet_or_sizing(spec, trace)
    clusters = list(trace.clusters) or [("nova", "c1")]
    problem = CapacityProblem(
        trace, fleet, types, clusters, chosen, codes, seed=seed, preemption=preemption
    )
    return problem, offered, desc


@dataclass(frozen=True)
class Where:
    """Where the replays run: local processes, or the cluster at a Dask or Ray address."""

    workers: int = 1
    dask: str | None = None
    ray: str | None = None
    timeout: float = 20.0
    """Seconds to reach the cluster."""


def _runner(problem: CapacityProblem, where: Where, on_done: Any) -> Any:
    from berth.sim.capacity_exec import DaskRunner, ProcessRunner, RayRunner, SerialRunner

    if where.dask is not None and where.ray is not None:
        raise BerthError("--dask and --ray: give one cluster")
    if where.dask is not None:
        try:
            return DaskRunner(problem, where.dask, on_done=on_done, timeout=where.timeout)
        except (OSError, TimeoutError) as exc:
            raise BerthError(f"--dask {where.dask}: cannot reach the scheduler ({exc})") from None
    if where.ray is not None:
        try:
            return RayRunner(problem, where.ray, on_done=on_done, timeout=where.timeout)
        except ModuleNotFoundError as exc:
            if exc.name != "ray":
                raise
            raise BerthError(
                "--ray: Ray is not installed here; install Berth with its ray extra "
                "(pip install 'berth[ray]')"
            ) from None
        except BerthError as exc:
            raise BerthError(f"--ray {where.ray}: {exc}") from None
        except (OSError, TimeoutError) as exc:
            raise BerthError(f"--ray {where.ray}: cannot reach the Ray cluster ({exc})") from None
    if where.workers <= 1:
        return SerialRunner(problem, on_done=on_done)
    return ProcessRunner(problem, where.workers, on_done=on_done)


def run_plan(
    problem: CapacityProblem,
    offers: list[Any],
    acceptance: float,
    evictions: float | None,
    *,
    workers: int = 1,
    dask: str | None = None,
    dask_timeout: float = 20.0,
    ray: str | None = None,
    ray_timeout: float = 20.0,
    max_replays: int = 80,
    show_progress: bool = False,
) -> Any:
    """Bound, search and replays; the `PlanResult`."""
    from berth.sim.capacity_bound import cover_bound
    from berth.sim.capacity_plan import Target, plan

    target = Target(acceptance, evictions)
    bound = cover_bound(
        problem.trace, problem.fleet, problem.offered, acceptance, problem.target, problem.clusters
    )
    progress = (
        Progress(
            TextColumn("[bold]replays"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=err,
        )
        if show_progress
        else None
    )
    task = progress.add_task("", total=max_replays) if progress is not None else None

    def done(o: Outcome) -> None:
        if progress is not None and task is not None:
            ok = "meets" if o.meets(target) else "fails"
            progress.update(task, advance=1, description=f"{list(o.purchase)} {ok}")

    where = Where(workers, dask, ray, ray_timeout if ray is not None else dask_timeout)
    runner = _runner(problem, where, done)
    try:
        if progress is not None:
            progress.start()
        return plan(
            bound,
            offers,
            target,
            runner,
            clusters=len(problem.clusters),
            width=runner.workers,
            max_replays=max_replays,
        )
    finally:
        if progress is not None:
            progress.stop()
        runner.close()


def _context(
    problem: CapacityProblem, fleet: str, policy: str, growth: float, command: str
) -> dict[str, Any]:
    from berth.sim.trace import BUSINESS_LABELS

    tr = problem.trace
    return {
        "command": command,
        "trace": tr.name,
        "requests": len(tr),
        "growth": growth,
        "fleet": fleet,
        "policy": policy,
        "target_business": [BUSINESS_LABELS[b] for b in problem.target_business],
        "offered_types": problem.offered,
        "citation": tr.citation,
    }


def _curve_table(data: dict[str, Any]) -> Table:
    from berth.sim.capacity_report import money

    grid = Table(title=f"Acceptance curve ({data['replays']} replays)")
    for col in (
        "purchase per cluster",
        "cost",
        "hosts",
        "acc% window",
        "acc% warm-up",
        "evict%",
        "verdict",
    ):
        grid.add_column(
            col, justify="left" if col in ("purchase per cluster", "verdict") else "right"
        )

    def pct(x: float | None) -> str:
        return "–" if x is None else f"{100 * x:.2f}"

    for r in data["curve"]:
        grid.add_row(
            r["mix"],
            f"{money(r['cost'])}",
            str(r["hosts"] or "–"),
            pct(r["acceptance"]),
            pct(r["warmup_acceptance"]),
            pct(r["eviction_rate"]),
            r["verdict"],
        )
    mixes = grid.columns[0]
    mixes.no_wrap = True
    mixes.min_width = max([len(r["mix"]) for r in data["curve"]] + [len("purchase per cluster")])
    return grid


OfferOption = Annotated[
    list[str],
    typer.Option(
        "--offer",
        help="Host type on offer, TYPE:PRICE (repeatable; e.g. std-2s:9000), or an offers "
        "YAML file (docs/plan-capacity.md). Types: the built-in ones of berth simulate.",
    ),
]
TraceOption = Annotated[
    str, typer.Option("--trace", help="azure, synthetic, or a trace file (CSV/JSONL).")
]
FleetOption = Annotated[
    str | None,
    typer.Option(
        "--fleet",
        "-f",
        help="The fleet as it is: fleet file, sizing file or spec (per cluster), or 'none' "
        "(a green field). Default: berth simulate's default for azure and synthetic.",
    ),
]
AcceptanceOption = Annotated[
    str, typer.Option(help="Least share of target requests accepted: 99.5% or 0.995.")
]
EvictionsOption = Annotated[
    str | None, typer.Option(help="Most share of preemptible placements evicted, e.g. 5%.")
]
BusinessOption = Annotated[
    str, typer.Option(help="Business types the acceptance target counts (comma-separated).")
]
GrowthOption = Annotated[
    float, typer.Option(help="Growth forecast: replay this many times the trace's requests.")
]
PolicyOption = Annotated[str, typer.Option("--policy", "-p", help="Placement policy (one).")]
WorkersOption = Annotated[
    int | None, typer.Option(min=1, help="Local replay processes. Default: the CPU count.")
]
DaskOption = Annotated[
    str | None, typer.Option(help="Run the replays on this Dask scheduler (tcp://host:8786).")
]
DaskTimeoutOption = Annotated[
    float, typer.Option(min=0.1, help="Seconds to wait for the Dask scheduler.")
]
RayOption = Annotated[
    str | None,
    typer.Option(
        help="Run the replays on this Ray cluster: ray://head:10001 (Ray Client), auto (the "
        "cluster of this machine) or a GCS address head:6379."
    ),
]
RayTimeoutOption = Annotated[
    float, typer.Option(min=0.1, help="Seconds to wait for the Ray cluster's address to answer.")
]
MaxReplaysOption = Annotated[int, typer.Option(min=1, help="Most replays the search may run.")]
SeedOption = Annotated[int, typer.Option(help="Seed (trace generator, growth, tie-breaking).")]
LimitOption = Annotated[int | None, typer.Option(min=1, help="Only the first N requests.")]
DaysOption = Annotated[float, typer.Option(min=0.01, help="Synthetic trace length.")]
AzureDirOption = Annotated[Path | None, typer.Option(help="Directory of the Azure sample.")]
NoPreemptionOption = Annotated[
    bool, typer.Option("--no-preemption", help="Never evict preemptible instances.")
]
OutOption = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Write report.md, plan.json and the curve's PNG here."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print plan.json's content.")]


def plan_capacity(
    offer: OfferOption,
    trace: TraceOption = "synthetic",
    fleet: FleetOption = None,
    target_acceptance: AcceptanceOption = "99.5%",
    target_evictions: EvictionsOption = None,
    target_business: BusinessOption = "on-demand",
    growth: GrowthOption = 1.0,
    policy: PolicyOption = "berth-placement",
    workers: WorkersOption = None,
    dask: DaskOption = None,
    dask_timeout: DaskTimeoutOption = 20.0,
    ray: RayOption = None,
    ray_timeout: RayTimeoutOption = 20.0,
    max_replays: MaxReplaysOption = 80,
    seed: SeedOption = 0,
    limit: LimitOption = None,
    days: DaysOption = 1.0,
    azure_dir: AzureDirOption = None,
    no_preemption: NoPreemptionOption = False,
    out_dir: OutOption = None,
    as_json: JsonOption = False,
) -> None:
    """How many servers to buy: the cheapest purchase of the offered host types that meets the
    acceptance target on a trace, found by bounds and replays; with its acceptance curve.

    Purchases are counted per cluster, like sizing specs. Exit code 1 when no purchase meets
    the target, 2 on bad input."""
    from berth.sim.capacity_plan import Target
    from berth.sim.capacity_report import plan_data, write_plan

    command = "berth " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    started = time.perf_counter()
    try:
        acceptance = parse_share(target_acceptance, "--target-acceptance")
        evictions = (
            parse_share(target_evictions, "--target-evictions") if target_evictions else None
        )
        Target(acceptance, evictions)  # out of range: fail before reading the trace
        problem, offers, fleet_desc = build_problem(
            trace,
            fleet,
            offer,
            policy=policy,
            growth=growth,
            seed=seed,
            limit=limit,
            days=days,
            azure_dir=azure_dir,
            business=target_business,
            preemption=not no_preemption,
        )
        result = run_plan(
            problem,
            offers,
            acceptance,
            evictions,
            workers=workers or os.cpu_count() or 1,
            dask=dask,
            dask_timeout=dask_timeout,
            ray=ray,
            ray_timeout=ray_timeout,
            max_replays=max_replays,
            show_progress=not as_json,
        )
    except BerthError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    data = plan_data(result, _context(problem, fleet_desc, policy, growth, command))
    data["elapsed_s"] = time.perf_counter() - started
    if out_dir is not None:
        write_plan(out_dir, data)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        _print_answer(data, out_dir)
    if data["answer"] is None:
        raise typer.Exit(EXIT_NONE)


def _print_answer(data: dict[str, Any], out_dir: Path | None) -> None:
    from berth.sim.capacity_report import CLAIMS, money

    print_table(out, _curve_table(data))
    answer = data["answer"]
    if answer is None:
        out.print("[bold red]No purchase found:[/] " + " ".join(data["notes"]), soft_wrap=True)
    else:
        out.print(
            f"[bold]Buy {answer['mix']} per cluster[/] ({answer['bought_hosts']} hosts, cost "
            f"{money(answer['cost'])}); it is {CLAIMS[data['claim']]}.",
            soft_wrap=True,
        )
    if data.get("citation"):
        out.print(f"[dim]{data['citation']}[/]", soft_wrap=True)
    where = f"; report: {out_dir / 'report.md'}" if out_dir is not None else ""
    out.print(f"{data['replays']} replays in {data['elapsed_s']:.1f} s{where}")


def register(app: typer.Typer) -> None:
    """Add `berth plan-capacity` to the CLI."""
    app.command("plan-capacity")(plan_capacity)
