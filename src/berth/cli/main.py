"""The `berth` command.

Exit codes: 0 success, 1 the request could not be placed (the explanation is printed),
2 bad input (a file, flavor or option; one line naming what is wrong).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from berth.cli.names import PROFILES
from berth.cli.tables import print_table

if TYPE_CHECKING:  # the commands import the core inside: `berth --help` loads no numpy
    from berth.core.engine import Decision, FilterScheduler
    from berth.core.model import Fleet
    from berth.core.table import HostTable

app = typer.Typer(
    help="Berth: VM placement and capacity for private clouds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)

EXIT_NO_HOST = 1
EXIT_BAD_INPUT = 2

FleetOpt = Annotated[
    Path | None,
    typer.Option("--fleet", "-f", help="Fleet snapshot (YAML or JSON). Default: the demo fleet."),
]
ProfileOpt = Annotated[
    str, typer.Option("--profile", "-p", help=f"Weigher profile: {', '.join(PROFILES)}.")
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Scheduler configuration file (YAML); overrides --profile."
    ),
]
NowOpt = Annotated[
    float | None,
    typer.Option(
        help="Reference time for heartbeats (epoch s). Default: the fleet's `now`, else the clock."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def _clear_errors() -> Iterator[None]:
    """Bad input becomes one line on stderr and exit code 2, never a traceback."""
    from berth.core.errors import BerthError

    try:
        yield
    except BerthError as exc:
        _fail(str(exc))


def _load(fleet_path: Path | None) -> tuple[Fleet, HostTable]:
    from berth.core.table import HostTable
    from berth.fleet.demo import demo_fleet_path
    from berth.fleet.io import load_fleet

    fleet = load_fleet(fleet_path if fleet_path is not None else demo_fleet_path())
    return fleet, HostTable.from_fleet(fleet)


def _scheduler(profile_name: str, config_path: Path | None) -> FilterScheduler:
    from berth.cli.scheduler_options import load_scheduler
    from berth.core.errors import BerthError

    try:
        return load_scheduler(profile_name, config_path)
    except BerthError as exc:
        _fail(str(exc))


def _now(fleet: Fleet, now: float | None) -> float:
    if now is not None:
        return now
    return fleet.now if fleet.now is not None else time.time()


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


# ---------------------------------------------------------------------------- place
def _decision_json(decision: Decision) -> dict[str, Any]:
    return {
        "flavor": decision.request.flavor,
        "selections": [
            {
                "instance_id": s.instance_id,
                "host": s.host,
                "alternates": list(s.alternates),
                "cell_use": s.cell_use.tolist(),
                "host_use": s.host_use.tolist(),
            }
            for s in decision.selections
        ],
    }


def _print_decision(decision: Decision, table: HostTable) -> None:
    d = table.demand(decision.request.flavor)
    grid = Table(title=f"{len(decision.selections)} x {decision.request.flavor}")
    for col in ("instance", "host", "zone", "NUMA cells (CPUs / MB)", "alternates"):
        grid.add_column(col)
    for s in decision.selections:
        row = table.index[s.host]
        cells = [f"{c}: {v} / {m}" for c, v, m in d.cells_used(s.cell_use)]
        grid.add_row(
            s.instance_id,
            s.host,
            table.zones.words[table.zone[row]],
            ", ".join(cells) or "floating",
            ", ".join(s.alternates) or "-",
        )
    print_table(out, grid)


def _run_place(
    fleet_path: Path | None,
    flavor: str,
    count: int,
    seed: int,
    zone: str | None,
    group: str | None,
    profile_name: str,
    config: Path | None,
    now: float | None,
    as_json: bool,
    why: int = 0,
) -> None:
    """`why` > 0: also explain each choice, showing that many candidates (`core.why`)."""
    from pydantic import ValidationError

    from berth.core.explain import NoValidHost
    from berth.core.request import RequestSpec
    from berth.fleet.io import describe_validation_error

    with _clear_errors():
        fleet, table = _load(fleet_path)
        scheduler = _scheduler(profile_name, config)
        try:
            request = RequestSpec(
                flavor=flavor,
                num_instances=count,
                seed=seed,
                availability_zone=zone,
                server_group=group,
            )
        except ValidationError as exc:
            _fail(describe_validation_error(exc))
        table.demand(flavor)  # unknown flavor: one clear line
        try:
            if why:
                from berth.core.why import explain_placement

                decision, whys = explain_placement(scheduler, table, request, _now(fleet, now), why)
            else:
                decision = scheduler.select_destinations(table, request, _now(fleet, now))
        except NoValidHost as exc:
            if as_json:
                _emit_json({"error": "no_valid_host", **exc.diagnosis.to_dict()})
            else:
                err.print(f"[bold red]no valid host:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_NO_HOST) from None
    if as_json:
        body = _decision_json(decision)
        if why:
            body["why"] = [w.to_dict() for w in whys]
        _emit_json(body)
        return
    _print_decision(decision, table)
    if why:
        from berth.cli.why import print_why

        print_why(out, whys)


@app.command()
def place(
    flavor: Annotated[str, typer.Option("--flavor", help="Flavor name from the fleet file.")],
    fleet: FleetOpt = None,
    count: Annotated[
        int, typer.Option("--count", "-n", min=1, help="Instances, all or nothing.")
    ] = 1,
    seed: Annotated[int, typer.Option(help="Tie-breaking seed (same seed, same answer).")] = 0,
    zone: Annotated[str | None, typer.Option("--az", help="Availability zone.")] = None,
    group: Annotated[str | None, typer.Option("--group", help="Server group id.")] = None,
    profile_name: ProfileOpt = "berth",
    config: ConfigOpt = None,
    now: NowOpt = None,
    as_json: JsonOpt = False,
    why: Annotated[
        bool,
        typer.Option(
            "--why",
            help="Also say why each host won: every weigher's part of the winner's and the next "
            "candidates' scores, the weigher that decided, and ties drawn by the seed.",
        ),
    ] = False,
    top: Annotated[
        int, typer.Option(min=2, max=50, help="Candidates shown per instance with --why.")
    ] = 3,
) -> None:
    """Choose hosts for COUNT instances of FLAVOR; print hosts and alternates, or why none fit."""
    _run_place(
        fleet,
        flavor,
        count,
        seed,
        zone,
        group,
        profile_name,
        config,
        now,
        as_json,
        top if why else 0,
    )


# ---------------------------------------------------------------------------- capacity
@app.command()
def capacity(
    fleet: FleetOpt = None,
    flavor: Annotated[
        list[str] | None, typer.Option("--flavor", help="Only these flavors (repeatable).")
    ] = None,
    by: Annotated[
        str, typer.Option(help="Group counts by: flavor (fleet total), zone, aggregate or host.")
    ] = "flavor",
    profile_name: ProfileOpt = "berth",
    config: ConfigOpt = None,
    now: NowOpt = None,
    as_json: JsonOpt = False,
    topology: Annotated[
        Path | None,
        typer.Option(help="Topology file: count per idc, region, cluster, pool or host instead."),
    ] = None,
    policy: Annotated[Path | None, typer.Option(help="Policy file (with --topology).")] = None,
) -> None:
    """How many more instances of each flavor fit, NUMA-exactly."""
    from berth.cli.schedule import capacity_by_topology
    from berth.core.capacity import capacity_matrix, totals_by_aggregate, totals_by_zone

    if topology is not None or policy is not None:
        return capacity_by_topology(topology, policy, by, flavor, now, as_json)
    if by not in ("flavor", "zone", "aggregate", "host"):
        _fail(f"--by: must be flavor, zone, aggregate or host, not {by!r}")
    with _clear_errors():
        fleet_model, table = _load(fleet)
        names = list(flavor) if flavor else sorted(table.flavors)
        for name in names:
            table.demand(name)
        scheduler = _scheduler(profile_name, config)
        started = time.perf_counter()
        matrix = capacity_matrix(scheduler, table, names, _now(fleet_model, now))
        elapsed_ms = (time.perf_counter() - started) * 1e3
    groups: dict[str, dict[str, int]]
    if by == "flavor":
        groups = {"fleet": matrix.total()}
    elif by == "zone":
        groups = totals_by_zone(matrix, table)
    elif by == "aggregate":
        groups = totals_by_aggregate(matrix, table)
    else:
        groups = {
            host: {f: int(matrix.counts[i, h]) for i, f in enumerate(names)}
            for h, host in enumerate(table.names)
        }
    if as_json:
        _emit_json({"by": by, "counts": groups, "hosts": len(table), "elapsed_ms": elapsed_ms})
        return
    grid = Table(title=f"Remaining capacity ({len(table)} hosts, {elapsed_ms:.1f} ms)")
    grid.add_column("flavor")
    for group_name in groups:
        grid.add_column(group_name, justify="right")
    for name in names:
        grid.add_row(name, *(str(groups[g][name]) for g in groups))
    print_table(out, grid)


# ---------------------------------------------------------------------------- misc
@app.command()
def validate(fleet: Annotated[Path, typer.Argument(help="Fleet snapshot to check.")]) -> None:
    """Check a fleet file: schema, references, flavor specs, that every instance fits and that
    the instances keep their server groups' (anti-)affinity."""
    from berth.core.host_state import unavailable_hosts
    from berth.fleet.io import check_server_groups

    with _clear_errors():
        fleet_model, table = _load(fleet)
        check_server_groups(fleet_model, str(fleet))
        notes = unavailable_hosts(_scheduler("berth", None), table, _now(fleet_model, None))
    out.print(
        f"ok: {len(table)} hosts, {len(table.flavors)} flavors, "
        f"{len(fleet_model.instances)} instances, {len(table.groups)} server groups"
    )
    for note in notes:  # valid, but the default filters will count these hosts for nothing
        err.print(f"warning: {note.line(len(table))}", highlight=False, soft_wrap=True)


@app.command()
def plugins(as_json: JsonOpt = False) -> None:
    """List the filters and weighers available to a scheduler configuration."""
    from berth.core.registry import FILTERS, WEIGHERS

    def doc(cls: Callable[..., Any]) -> str:
        text = (sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        return (
            (cls.__doc__ or "").strip().splitlines()[0]
            if cls.__doc__
            else (text[0] if text else "")
        )

    if as_json:
        _emit_json({"filters": sorted(FILTERS), "weighers": sorted(WEIGHERS)})
        return
    grid = Table(title="Plugins")
    grid.add_column("kind")
    grid.add_column("name")
    grid.add_column("what it does")
    for name, f in sorted(FILTERS.items()):
        grid.add_row("filter", name, doc(f))
    for name, w in sorted(WEIGHERS.items()):
        grid.add_row("weigher", name, doc(w))
    out.print(grid)


demo_app = typer.Typer(
    help="The bundled demo. Without a subcommand: place on the demo fleet and print capacity.",
    invoke_without_command=True,
)
app.add_typer(demo_app, name="demo")


@demo_app.callback()
def demo(
    ctx: typer.Context,
    flavor: Annotated[str, typer.Option(help="Flavor to place.")] = "c3.4xlarge.numa1",
    count: Annotated[int, typer.Option("--count", "-n", min=1)] = 3,
) -> None:
    """Place on the bundled demo fleet and print the remaining capacity by zone."""
    if ctx.invoked_subcommand is not None:
        return
    from berth.fleet.demo import demo_fleet_path

    out.print(f"[bold]Demo fleet:[/] {demo_fleet_path()}")
    _run_place(None, flavor, count, 0, None, None, "berth", None, None, False)
    capacity(
        fleet=None,
        flavor=[
            "c3.large",
            "c3.4xlarge.numa1",
            "c3.8xlarge.numa2",
            "c3.8xlarge.flex",
            "m3.4xlarge",
            "n3.4xlarge.dpdk",
            "gn3.4xlarge",
            "i3.4xlarge",
        ],
        by="zone",
        profile_name="berth",
        config=None,
        now=None,
        as_json=False,
    )


# ---------------------------------------------------------------------------- subcommands
# Command groups that live in their own modules register themselves here, one line each.
from berth.cli.agent import register as _register_agent  # noqa: E402
from berth.cli.api import register as _register_api  # noqa: E402
from berth.cli.cluster import register as _register_cluster  # noqa: E402
from berth.cli.db import db_load_demo as _db_load_demo  # noqa: E402
from berth.cli.db import register as _register_db  # noqa: E402
from berth.cli.defrag import register as _register_defrag  # noqa: E402
from berth.cli.elastic import register as _register_elastic  # noqa: E402
from berth.cli.plan_capacity import register as _register_plan_capacity  # noqa: E402
from berth.cli.schedule import register as _register_schedule  # noqa: E402
from berth.cli.serve import register as _register_serve  # noqa: E402
from berth.cli.simulate import register as _register_simulate  # noqa: E402
from berth.cli.why import register as _register_why  # noqa: E402

_register_serve(app)
_register_db(app)
_register_api(app)
_register_schedule(app)
_register_simulate(app)
_register_plan_capacity(app)
_register_defrag(app)
_register_agent(app)
_register_elastic(app)
_register_cluster(app)
_register_why(app)
demo_app.command("load")(_db_load_demo)  # `berth demo load` = `berth db load-demo`


def main() -> None:  # pragma: no cover - console entry
    app()
