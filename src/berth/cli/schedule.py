"""`berth schedule` and `berth capacity --topology`: the multi-cloud pipeline from the shell.

Both read a topology and a policy file (default: the bundled demo), decide without writing
anything back, and print the answer. Exit codes as everywhere in `berth`: 0 placed, 1 the
request cannot be placed (the explanation is printed), 2 bad input (one line naming it).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from berth.cli.names import BusinessChoice
from berth.cli.tables import print_table

if TYPE_CHECKING:  # the policy layer loads when a command runs: a fast --help
    from berth.core.why import InstanceWhy
    from berth.policy.outcome import Failure, Placement
    from berth.policy.pipeline import PolicyEngine

out = Console()
err = Console(stderr=True)

EXIT_NO_HOST = 1
EXIT_BAD_INPUT = 2
CAPACITY_BY = ("idc", "region", "cluster", "pool", "host", "flavor")

TopologyOpt = Annotated[
    Path | None,
    typer.Option("--topology", "-t", help="Topology file (YAML/JSON). Default: the demo."),
]
PolicyOpt = Annotated[
    Path | None, typer.Option("--policy", help="Policy file (YAML/JSON). Default: the demo.")
]
WhyOpt = Annotated[
    bool,
    typer.Option(
        "--why",
        help="Also say why each host won in its pool: every weigher's part of the winner's and "
        "the next candidates' scores, the weigher that decided, and ties drawn by the seed.",
    ),
]
TopOpt = Annotated[
    int, typer.Option(min=2, max=50, help="Candidates shown per instance with --why.")
]


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def load_engine(topology: Path | None, policy: Path | None) -> tuple[PolicyEngine, float | None]:
    """Read both files and build the engine; bad input raises `BerthError` naming the field."""
    from berth.policy.demo import POLICY_FILE, TOPOLOGY_FILE, shipped_path
    from berth.policy.loader import load_policy, load_topology
    from berth.policy.pipeline import PolicyEngine

    pol = load_policy(policy if policy is not None else shipped_path(POLICY_FILE))
    topo = load_topology(topology if topology is not None else shipped_path(TOPOLOGY_FILE))
    return PolicyEngine(pol, topo), topo.now


def _now(given: float | None, topo_now: float | None) -> float:
    if given is not None:
        return given
    return topo_now if topo_now is not None else time.time()


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


# ---------------------------------------------------------------------------- schedule
def _print_placement(engine: PolicyEngine, p: Placement, elapsed_ms: float) -> None:
    req = p.request
    order = " > ".join(c.variant for c in p.candidates.items)
    out.print(
        f"[bold green]placed[/] {req.count} x {req.flavor} ({req.business.value}, user "
        f"{req.user}) in {elapsed_ms:.1f} ms",
        highlight=False,
    )
    out.print(
        f"region {p.region} · IDC {p.idc} · cluster [bold]{p.cluster}[/] · pool [bold]{p.pool}"
        f"[/] · variant [bold]{p.variant}[/] → flavor {p.flavor} · network {p.network}",
        highlight=False,
    )
    out.print(f"candidates ({p.candidates.rule}): {order}", highlight=False)
    table = engine.topology.clusters[p.cluster].table
    d = table.demand(p.flavor)
    grid = Table()
    for col in ("instance", "host", "rack", "NUMA cells (CPUs / MB)", "alternates"):
        grid.add_column(col)
    for s in p.decision.selections:
        row = table.index[s.host]
        cells = [f"{c}: {v} / {m}" for c, v, m in d.cells_used(s.cell_use)]
        grid.add_row(
            s.instance_id,
            s.host,
            table.racks.words[table.rack[row]],
            ", ".join(cells) or "floating",
            ", ".join(s.alternates) or "-",
        )
    print_table(out, grid)
    if p.plan is None or not p.plan.evictions:
        out.print("evictions: none")
        return
    ev = Table(title=f"evictions ({p.plan.search} search)")
    for col in ("instance", "host", "flavor", "created at"):
        ev.add_column(col)
    for v in p.plan.victims:
        ev.add_row(v.instance_id, v.host, v.flavor, f"{v.created_at:.0f}" if v.created_at else "-")
    print_table(out, ev)


def _print_why(whys: list[InstanceWhy] | None) -> None:
    if whys is None:
        out.print("why: the least-damage eviction plan chose the hosts, not the weighers")
        return
    from berth.cli.why import print_why

    print_why(out, whys)


def _print_failure(f: Failure) -> None:
    err.print(
        f"[bold red]not placed[/] ({f.step}: {f.code}): {f.message}",
        highlight=False,
        soft_wrap=True,
    )
    if f.candidates is not None and f.candidates.items:
        order = " > ".join(c.variant for c in f.candidates.items)
        err.print(f"candidates ({f.candidates.rule}): {order}", highlight=False)
    for r in f.rejections:
        err.print(f"  {r.cluster} ({r.idc}): {r.step} {r.code}: {r.message}", highlight=False)
    for a in f.attempts:
        line = f"  {a.cluster} / {a.variant} ({a.flavor}, pool {a.pool}): {a.outcome}"
        if a.diagnosis is not None:
            line += f": {a.diagnosis}"
        elif a.message:
            line += f": {a.message}"
        err.print(line, highlight=False, soft_wrap=True)


def schedule(
    region: Annotated[str, typer.Option("--region", "-r", help="Region, or one IDC by name.")],
    flavor: Annotated[str, typer.Option("--flavor", help="Base flavor, e.g. v.c3.large.")],
    count: Annotated[int, typer.Option("--count", "-n", min=1, max=1000)] = 1,
    business: Annotated[
        BusinessChoice,
        typer.Option("--business", "-b", help="on-demand, auto-scaling, preemptible, elastic."),
    ] = BusinessChoice.ON_DEMAND,
    deployment_set: Annotated[
        str | None, typer.Option("--deployment-set", "-d", help="Deployment set name.")
    ] = None,
    user: Annotated[str, typer.Option("--user", "-u", help="User (special rules).")] = "default",
    image: Annotated[str | None, typer.Option("--image", help="Image name (pre-check).")] = None,
    network: Annotated[str | None, typer.Option("--network", help="Network name.")] = None,
    seed: Annotated[int, typer.Option(help="Tie-breaking seed.")] = 0,
    topology: TopologyOpt = None,
    policy: PolicyOpt = None,
    now: Annotated[
        float | None, typer.Option(help="Reference time (epoch s). Default: the topology's now.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    why: WhyOpt = False,
    top: TopOpt = 3,
) -> None:
    """Place COUNT x FLAVOR in REGION for a business type: cluster, pool, variant, hosts and
    evictions, or the explained failure (exit 1). Nothing is written back. With --why, each
    instance's choice in its pool is explained (docs/why.md); not for a placement that evicts
    (the least-damage plan chose its hosts)."""
    from pydantic import ValidationError

    from berth.core.errors import BerthError
    from berth.fleet.io import describe_validation_error
    from berth.policy.model import Business
    from berth.policy.outcome import Failure, Placement, ScheduleRequest
    from berth.policy.placing import WhyRecorders

    try:
        engine, topo_now = load_engine(topology, policy)
        request = ScheduleRequest(
            region=region,
            flavor=flavor,
            count=count,
            business=Business(business.value),
            user=user,
            deployment_set=deployment_set,
            image=image,
            network=network,
            seed=seed,
        )
        recorders = WhyRecorders(top) if why else None
        started = time.perf_counter()
        outcome = engine.decide(request, _now(now, topo_now), recorders)
        elapsed_ms = (time.perf_counter() - started) * 1e3
    except ValidationError as exc:
        _fail(describe_validation_error(exc))
    except BerthError as exc:
        _fail(str(exc))
    whys = None
    if recorders is not None and isinstance(outcome, Placement):
        whys = recorders.explained(outcome)
    if as_json:
        body = {**outcome.to_dict(), "elapsed_ms": round(elapsed_ms, 3)}
        if recorders is not None and isinstance(outcome, Placement):
            body["why"] = None if whys is None else [w.to_dict() for w in whys]
        _emit(body)
    elif isinstance(outcome, Placement):
        _print_placement(engine, outcome, elapsed_ms)
        if recorders is not None:
            _print_why(whys)
    else:
        _print_failure(outcome)
    if isinstance(outcome, Failure):
        raise typer.Exit(EXIT_NO_HOST)


# ---------------------------------------------------------------------------- capacity
def capacity_by_topology(
    topology: Path | None,
    policy: Path | None,
    by: str,
    flavors: list[str] | None,
    now: float | None,
    as_json: bool,
) -> None:
    """`berth capacity --topology`: remaining instances per (flavor, variant), grouped."""
    from berth.core.errors import BerthError

    if by not in CAPACITY_BY:
        _fail(f"--by: with --topology must be one of {', '.join(CAPACITY_BY)}, not {by!r}")
    try:
        engine, topo_now = load_engine(topology, policy)
        when = _now(now, topo_now)
        engine.capacity(when, flavors)  # warm the per-flavor caches, as a live service is
        started = time.perf_counter()
        report = engine.capacity(when, flavors)
        elapsed_ms = (time.perf_counter() - started) * 1e3
    except BerthError as exc:
        _fail(str(exc))
    data = report.to_dict(by)
    hosts = sum(len(c.hosts) for c in report.clusters)
    if as_json:
        _emit({**data, "hosts": hosts, "elapsed_ms": round(elapsed_ms, 3)})
        return
    groups: dict[str, dict[str, int]] = data["counts"]
    grid = Table(
        title=f"Remaining capacity by {by} ({hosts} hosts, {len(report.entries)} flavor "
        f"variants, {elapsed_ms:.1f} ms)"
    )
    if by == "flavor":
        variants = list(dict.fromkeys(e.variant for e in report.entries))
        grid.add_column("flavor")
        for v in variants:
            grid.add_column(v, justify="right")
        for base, per in groups.items():
            grid.add_row(base, *(str(per[v]) if v in per else "-" for v in variants))
        out.print(grid)
        return
    if by in ("host", "pool"):  # many groups: one row per (group, flavor) with room
        for col in (by, "flavor", "variant", "fit"):
            grid.add_column(col, justify="right" if col == "fit" else "left")
        variant_of = {e.flavor: e.variant for e in report.entries}
        for name, per in groups.items():
            for flv, n in per.items():
                if n:
                    grid.add_row(name, flv, variant_of[flv], str(n))
        out.print(grid)
        return
    grid.add_column("flavor")
    grid.add_column("variant")
    names = list(groups)
    for name in names:
        grid.add_column(name, justify="right")
    for e in report.entries:
        cells = [str(groups[g][e.flavor]) if e.flavor in groups[g] else "-" for g in names]
        grid.add_row(e.flavor, e.variant, *cells)
    out.print(grid)


def register(app: typer.Typer) -> None:
    app.command("schedule")(schedule)
