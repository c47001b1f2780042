"""`berth defrag plan`: an offline defragmentation plan for a fleet snapshot (docs/defrag.md).

Reads the fleet, plans live migrations towards the target within the budget with the core's
heuristic (optionally also solving the exact optimum for the gap), and prints the moves and the
before/after figures, or the plan as JSON. Nothing is written back to the fleet. Exit codes as
everywhere in `berth`: 0 done, 2 bad input (one line naming the option or field).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from berth.cli.names import MAX_ADMISSION, PROFILES
from berth.cli.tables import print_table

if TYPE_CHECKING:  # the commands import the core inside: `berth --help` loads no numpy
    from berth.core.defrag import Budget, Move, Plan, Target
    from berth.core.defrag.admit import Admission
    from berth.core.engine import FilterScheduler
    from berth.core.model import Fleet
    from berth.core.table import HostTable

out = Console()
err = Console(stderr=True)

EXIT_BAD_INPUT = 2


def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_BAD_INPUT)


FleetOpt = Annotated[
    Path | None,
    typer.Option("--fleet", "-f", help="Fleet snapshot (YAML/JSON). Default: the demo fleet."),
]
KeepTraitOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--keep-trait",
        help="A trait migrations may neither gain nor lose, e.g. a pool's (repeat).",
    ),
]
ProfileOpt = Annotated[
    str, typer.Option("--profile", "-p", help=f"Scheduler profile: {', '.join(PROFILES)}.")
]
NowOpt = Annotated[
    float | None,
    typer.Option(help="Reference time for heartbeats (epoch s). Default: fleet's `now`."),
]


ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Scheduler configuration file (YAML); overrides --profile."
    ),
]


def _load(
    fleet: Path | None, profile_name: str, config: Path | None = None
) -> tuple[Fleet, HostTable, FilterScheduler]:
    """The fleet snapshot (default: the demo fleet), its table, and the scheduler (the
    configuration file when given, else the named profile)."""
    from berth.cli.scheduler_options import load_scheduler
    from berth.core.errors import BerthError
    from berth.core.table import HostTable
    from berth.fleet.demo import demo_fleet_path
    from berth.fleet.io import load_fleet

    try:
        snapshot = load_fleet(fleet if fleet is not None else demo_fleet_path())
        table = HostTable.from_fleet(snapshot)
        scheduler = load_scheduler(profile_name, config)
    except BerthError as exc:
        _fail(str(exc))
    return snapshot, table, scheduler


def _warn_unavailable(scheduler: FilterScheduler, table: HostTable, when: float) -> None:
    """Say why hosts count for nothing (disabled, down, never reported a heartbeat)."""
    from berth.core.host_state import unavailable_hosts

    for note in unavailable_hosts(scheduler, table, when):
        err.print(f"note: {note.line(len(table))}", highlight=False, soft_wrap=True)


def _target(
    table: HostTable,
    objective: str,
    flavors: list[str],
    weights: list[float],
    drain: list[str],
    keep_traits: list[str],
) -> Target:
    from pydantic import ValidationError

    from berth.core.defrag import Objective, Target
    from berth.fleet.io import describe_validation_error

    try:
        kind = Objective(objective)
    except ValueError:
        _fail(f"--target: {objective!r} is not one of {', '.join(o.value for o in Objective)}")
    for name in flavors:
        if name not in table.flavors:
            _fail(f"--flavor: unknown flavor {name!r}")
    for name in drain:
        if name not in table.index:
            _fail(f"--drain: unknown host {name!r}")
    if kind is Objective.EMPTY_HOSTS and flavors:
        _fail("--flavor: the empty-hosts target takes no flavors")
    if kind is Objective.FRAGMENT_RATE and len(flavors) != 1:
        _fail("--flavor: the fragment-rate target takes exactly one reference flavor")
    if kind is Objective.FRAGMENT_RATE and weights:
        _fail("--weight: the fragment-rate target takes no weights")
    if weights and len(weights) != len(flavors):
        _fail("--weight: give one weight per --flavor")
    try:
        return Target(
            objective=kind,
            flavors=tuple(flavors),
            weights=tuple(weights) if weights else None,
            drain=tuple(drain),
            keep_traits=tuple(keep_traits),
        )
    except ValidationError as exc:
        _fail(describe_validation_error(exc).replace("flavors:", "--flavor:"))


def _budget(budget: int, per_host: int | None, concurrent: int) -> Budget:
    from pydantic import ValidationError

    from berth.core.defrag import Budget

    try:
        return Budget(max_migrations=budget, max_per_host=per_host, max_concurrent=concurrent)
    except ValidationError as exc:
        names = {"max_migrations": "--budget", "max_per_host": "--per-host"}
        names["max_concurrent"] = "--concurrent"
        loc = str(exc.errors()[0]["loc"][0])
        _fail(f"{names.get(loc, loc)}: {exc.errors()[0]['msg']}")


def _print_moves(plan: Plan, table: HostTable) -> None:
    if not plan.moves:
        out.print("no migration improves the target within the budget", highlight=False)
        return
    _moves_table(plan.moves, table)


def _moves_table(planned: Sequence[Move], table: HostTable) -> None:
    import numpy as np

    moves = Table(title=f"{len(planned)} live migrations in {planned[-1].wave + 1} waves")
    for column in ("step", "wave", "instance", "flavor", "from", "to", "cells"):
        moves.add_column(column, justify="right" if column in ("step", "wave") else "left")
    for m in planned:
        d = table.demand(m.flavor)
        cells = d.cells_used(np.array(m.cell_use, dtype=np.int64))
        where = ", ".join(f"{c}: {v} CPU {mb} MB" for c, v, mb in cells) or "-"
        moves.add_row(str(m.step), str(m.wave), m.instance_id, m.flavor, m.source, m.target, where)
    print_table(out, moves)


def _print_figures(plan: Plan, exact: dict[str, Any] | None) -> None:
    figures = Table(title="before and after")
    for column in ("figure", "before", "after"):
        figures.add_column(column, justify="left" if column == "figure" else "right")
    b, a = plan.before, plan.after
    for flavor in plan.target.flavors:
        figures.add_row(f"capacity {flavor}", str(b.capacity[flavor]), str(a.capacity[flavor]))
    for flavor in plan.target.flavors:
        figures.add_row(
            f"fragmentation {flavor}",
            f"{b.fragmentation[flavor]:.1%}",
            f"{a.fragmentation[flavor]:.1%}",
        )
    figures.add_row("empty hosts", str(b.empty_hosts), str(a.empty_hosts))
    if plan.target.drain:
        figures.add_row("instances left on drain hosts", str(b.drained_left), str(a.drained_left))
    figures.add_row("migrations", "", f"{plan.migrations} of {plan.budget.max_migrations}")
    if exact is not None:
        state = "optimal" if exact["optimal"] else "best found"
        figures.add_row(f"exact objective ({state})", "", f"{exact['value']:g}")
        bound = exact["bound"]
        figures.add_row("upper bound", "", "unknown" if bound is None else f"{bound:g}")
        figures.add_row("heuristic objective", "", f"{exact['heuristic']:g}")
        gap = exact["gap"]
        figures.add_row("gap to the bound", "", "unknown" if gap is None else f"{gap:.1%}")
    out.print(figures)


def plan_command(
    budget: Annotated[int, typer.Option("--budget", help="Most migrations in the plan.")],
    fleet: FleetOpt = None,
    target: Annotated[
        str,
        typer.Option(
            "--target",
            help="capacity (of --flavor ...), fragment-rate (of one reference --flavor) or "
            "empty-hosts.",
        ),
    ] = "capacity",
    flavor: Annotated[
        list[str] | None,
        typer.Option("--flavor", help="A flavor whose capacity to restore (repeat)."),
    ] = None,
    weight: Annotated[
        list[float] | None,
        typer.Option("--weight", help="One weight per --flavor (default 1 each)."),
    ] = None,
    drain: Annotated[
        list[str] | None,
        typer.Option("--drain", help="A host to empty and never target (repeat)."),
    ] = None,
    keep_trait: KeepTraitOpt = None,
    per_host: Annotated[
        int | None, typer.Option("--per-host", help="Most moves touching one host.")
    ] = None,
    concurrent: Annotated[
        int, typer.Option("--concurrent", help="Moves in flight at once (wave size).")
    ] = 1,
    profile_name: ProfileOpt = "berth",
    config: ConfigOpt = None,
    exact: Annotated[
        bool, typer.Option("--exact", help="Also solve the exact optimum (small fleets).")
    ] = False,
    time_limit: Annotated[
        float, typer.Option("--time-limit", help="Seconds for the exact solver.")
    ] = 60.0,
    seed: Annotated[int, typer.Option("--seed", help="Tie-breaking seed.")] = 0,
    search_seconds: Annotated[
        float | None,
        typer.Option(
            "--search-seconds",
            min=0.0,
            help="Stop improving the plan after this many seconds (default: when no move "
            "or pair of moves gains); the plan found by then is returned.",
        ),
    ] = None,
    now: NowOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    out_path: Annotated[
        Path | None, typer.Option("--out", "-o", help="Also write the plan JSON here.")
    ] = None,
) -> None:
    """Plan live migrations that restore large-flavor capacity or empty hosts."""
    from berth.core import jit
    from berth.core.defrag import plan_defrag
    from berth.core.errors import BerthError

    snapshot, table, scheduler = _load(fleet, profile_name, config)
    goal = _target(table, target, flavor or [], weight or [], drain or [], keep_trait or [])
    limits = _budget(budget, per_host, concurrent)
    when = now if now is not None else snapshot.now if snapshot.now is not None else time.time()
    _warn_unavailable(scheduler, table, when)
    try:
        jit.prepare()  # compiled (or loaded from the cache) before the search's clock starts
        started = time.perf_counter()
        stop = None
        if search_seconds is not None:
            deadline = started + search_seconds
            stop = lambda: time.perf_counter() >= deadline  # noqa: E731  (the edge owns the clock)
        result = plan_defrag(
            table, goal, limits, scheduler=scheduler, now=when, seed=seed, should_stop=stop
        )
        elapsed = time.perf_counter() - started
        exact_info = (
            _exact(table, goal, limits, scheduler, when, time_limit, result) if exact else None
        )
    except BerthError as exc:
        _fail(str(exc))
    data = result.model_dump(mode="json")
    if out_path is not None:
        _write_plan(out_path, data)
    if as_json:
        payload = data if exact_info is None else {"plan": data, "exact": exact_info}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    _print_moves(result, table)
    _print_figures(result, exact_info)
    out.print(f"planned in {elapsed * 1000:.0f} ms", highlight=False)


def _exact(
    table: HostTable,
    goal: Target,
    limits: Budget,
    scheduler: FilterScheduler,
    when: float,
    time_limit: float,
    result: Plan,
) -> dict[str, Any]:
    """The exact optimum and the heuristic plan's gap to it (`--exact`; needs SciPy)."""
    from berth.solvers.defrag_exact import exact_optimum, heuristic_gap, plan_value

    best = exact_optimum(table, goal, limits, scheduler=scheduler, now=when, time_limit=time_limit)
    return {
        "value": best.value,
        "bound": best.bound,
        "optimal": best.optimal,
        "moved": best.moved,
        "heuristic": plan_value(result),
        "gap": heuristic_gap(best, plan_value(result)),
    }


def _write_plan(path: Path, data: Any) -> None:
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        _fail(f"--out: cannot write {path} ({exc.strerror})")


def admit_command(
    flavor: Annotated[str, typer.Option("--flavor", help="The flavor of the request.")],
    fleet: FleetOpt = None,
    migrations: Annotated[
        int,
        typer.Option(
            "--migrations",
            min=1,
            max=MAX_ADMISSION,
            help="Most live migrations to make room (the simulator's Berth default: 1).",
        ),
    ] = 1,
    max_hosts: Annotated[int, typer.Option("--max-hosts", min=1, help="Closest hosts to try.")] = 8,
    zone: Annotated[
        str | None, typer.Option("--zone", help="Availability zone of the request.")
    ] = None,
    keep_trait: KeepTraitOpt = None,
    profile_name: ProfileOpt = "berth",
    config: ConfigOpt = None,
    now: NowOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Which live migrations would let one instance of FLAVOR fit (docs/simulator.md,
    "Admission by migration"); nothing is changed."""
    import numpy as np

    from berth.core.defrag.admit import fitting, plan_admission
    from berth.core.errors import BerthError
    from berth.core.request import RequestSpec

    snapshot, table, scheduler = _load(fleet, profile_name, config)
    if flavor not in table.flavors:
        _fail(f"--flavor: unknown flavor {flavor!r}")
    when = now if now is not None else snapshot.now if snapshot.now is not None else time.time()
    request = RequestSpec(flavor=flavor, availability_zone=zone)
    try:
        hosts = [table.names[r] for r in np.flatnonzero(fitting(table, request, scheduler, when))]
    except BerthError as exc:
        _fail(str(exc))
    found = None
    if not hosts:
        found = plan_admission(
            table,
            request,
            scheduler=scheduler,
            now=when,
            max_migrations=migrations,
            max_hosts=max_hosts,
            keep_traits=keep_trait or (),
        )
    _print_admission(flavor, migrations, hosts, found, table, as_json)


def _print_admission(
    flavor: str,
    migrations: int,
    hosts: list[str],
    found: Admission | None,
    table: HostTable,
    as_json: bool,
) -> None:
    """Where the flavor fits now, or the migrations that make room, or that none do."""
    if as_json:
        payload: dict[str, Any] = {"flavor": flavor, "fits_on": hosts, "admission": None}
        if found is not None:
            payload["admission"] = {
                "host": found.host,
                "moves": [m.model_dump(mode="json") for m in found.moves],
            }
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        return
    if hosts:
        out.print(
            f"{flavor} fits without migrations on {len(hosts)} host(s), e.g. {hosts[0]}",
            highlight=False,
        )
    elif found is None:
        out.print(
            f"{flavor} fits nowhere, and no {migrations} migration(s) make room for it",
            highlight=False,
        )
    else:
        _moves_table(found.moves, table)
        out.print(f"then {flavor} fits on {found.host}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add `berth defrag plan` and `berth defrag admit` to the CLI."""
    defrag_app = typer.Typer(help="Defragmentation: plan live migrations (docs/defrag.md).")
    app.add_typer(defrag_app, name="defrag")
    defrag_app.command("plan")(plan_command)
    defrag_app.command("admit")(admit_command)
