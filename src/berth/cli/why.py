"""`berth place --why` tables and `berth why-not` (docs/why.md, docs/why-not.md).

`print_why` prints, per instance, the winner's and the next candidates' score weigher by weigher
(`berth.core.why`); `why-not` prices and checks the ways out of a request that fits nowhere
(`berth.policy.why_not`). Both load the core inside their functions (`berth --help` stays
light).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from berth.cli.names import MAX_ADMISSION, PROFILES
from berth.cli.tables import print_table

if TYPE_CHECKING:
    from berth.core.why import InstanceWhy
    from berth.policy.why_not import WhyNot

out = Console()
err = Console(stderr=True)

EXIT_NO_HOST = 1
EXIT_BAD_INPUT = 2


def _num(x: float) -> str:
    return f"{x + 0.0:.6g}"  # + 0.0: no "-0" for a negative zero


def print_why(console: Console, whys: list[InstanceWhy]) -> None:
    """One table per instance: each shown candidate's parts, then its score; weighers whose
    values were equal on every candidate (they add nothing) are named below, not listed."""
    for why in whys:
        varying = [i for i, s in enumerate(why.scales) if not s.constant]
        grid = Table(title=why.summary(), title_justify="left")
        width = max([len(s.weigher) for s in why.scales] + [len("weigher")])
        for col in ("rank", "host", "weigher", "raw", "norm", "x mult", "= part"):
            left = col in ("host", "weigher")
            grid.add_column(
                col,
                justify="left" if left else "right",
                no_wrap=left,
                min_width=width if left else None,
            )
        for rank, cand in enumerate(why.ranked, start=1):
            for n, i in enumerate(varying):
                p = cand.parts[i]
                grid.add_row(
                    str(rank) if n == 0 else "",
                    cand.host if n == 0 else "",
                    p.weigher,
                    _num(p.raw),
                    _num(p.normalised),
                    _num(p.multiplier),
                    _num(p.contribution),
                )
            grid.add_row("", "" if varying else cand.host, "score", "", "", "", _num(cand.score))
            grid.add_section()
        print_table(console, grid)
        same = [s.weigher for s in why.scales if s.constant]
        if same:
            console.print(f"  equal on all {why.candidates} candidates: {', '.join(same)}")


# ---------------------------------------------------------------------------- why-not
def _fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def print_why_not(console: Console, answer: WhyNot) -> None:
    console.print(answer.headline(), highlight=False, soft_wrap=True)
    if not answer.options:
        return
    console.print("Ways out, least disruptive first (each applied to a copy and checked):")
    for rank, opt in enumerate(answer.options, start=1):
        console.print(
            f"  {rank}. {opt.kind} ({opt.price:g} {opt.unit}): {opt.summary}; "
            f"then fits on {opt.check_host}",
            highlight=False,
            soft_wrap=True,
        )
    for note in answer.notes:
        console.print(f"  {note}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    @app.command("why-not")
    def why_not(
        flavor: Annotated[str, typer.Option("--flavor", help="Flavor that does not fit.")],
        fleet: Annotated[
            Path | None,
            typer.Option(
                "--fleet", "-f", help="Fleet snapshot (YAML or JSON). Default: the demo fleet."
            ),
        ] = None,
        cluster: Annotated[
            str | None,
            typer.Option(
                help="Name the fleet's cluster (for the report; the fleet file is one cluster)."
            ),
        ] = None,
        zone: Annotated[str | None, typer.Option("--az", help="Availability zone.")] = None,
        preemptible: Annotated[
            list[str] | None,
            typer.Option(
                "--preemptible",
                help="Project whose instances may be evicted (repeat). Default: none, so "
                "evictions are not considered.",
            ),
        ] = None,
        max_moves: Annotated[
            int,
            typer.Option(min=1, max=MAX_ADMISSION, help="Most live migrations to consider."),
        ] = 3,
        profile_name: Annotated[
            str, typer.Option("--profile", "-p", help=f"Weigher profile: {', '.join(PROFILES)}.")
        ] = "berth",
        config: Annotated[
            Path | None, typer.Option("--config", "-c", help="Scheduler configuration (YAML).")
        ] = None,
        now: Annotated[
            float | None, typer.Option(help="Reference time (epoch s). Default: the fleet's.")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    ) -> None:
        """What would make FLAVOR fit: live migrations, evictions of preemptible instances,
        hosts to re-enable, a smaller flavor of its family; each priced and checked by planning
        it. Exit 0 when some way out exists (or it fits already), 1 when none does."""
        import time

        from berth.cli.scheduler_options import load_scheduler
        from berth.core.errors import BerthError
        from berth.core.table import HostTable
        from berth.fleet.demo import demo_fleet_path
        from berth.fleet.io import load_fleet
        from berth.policy.why_not import WhyNotOptions, why_not_fleet

        try:
            model = load_fleet(fleet if fleet is not None else demo_fleet_path())
            table = HostTable.from_fleet(model)
            table.demand(flavor)
            scheduler = load_scheduler(profile_name, config)
            when = now if now is not None else (model.now if model.now is not None else time.time())
            answer = why_not_fleet(
                scheduler,
                table,
                flavor,
                when,
                WhyNotOptions(
                    availability_zone=zone,
                    preemptible_projects=tuple(preemptible or ()),
                    max_moves=max_moves,
                    cluster=cluster,
                ),
            )
        except BerthError as exc:
            _fail(str(exc))
        if as_json:
            sys.stdout.write(json.dumps(answer.to_dict(), indent=2) + "\n")
        else:
            print_why_not(out, answer)
        if not answer.fits_now and not answer.options:
            raise typer.Exit(EXIT_NO_HOST)


def why_json(whys: list[InstanceWhy]) -> list[dict[str, Any]]:
    return [w.to_dict() for w in whys]
