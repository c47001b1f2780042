"""`berth api defrag ...`: the defragmentation plans of a running service, step by step."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from berth.cli.api_client import JsonOpt, TokenOpt, UrlOpt, api_error, call, emit_json
from berth.cli.service_options import out
from berth.cli.tables import print_table

defrag_app = typer.Typer(
    help="Defragmentation plans of a running service (live migrations, step by step).",
    no_args_is_help=True,
)

PlanArg = Annotated[str, typer.Argument(help="Plan id (dp-...).")]


def _plan_call(
    method: str, url: str, path: str, token: str | None, ok: int = 200, **kw: Any
) -> Any:
    status, data = call(method, url, path, token, **kw)
    if status != ok:
        api_error(status, data)
    return data


def _show_plan(plan: dict[str, Any]) -> None:
    before, after = plan["before"], plan["after"]
    achieved = plan.get("achieved") or {}
    head = Table(title=f"defrag plan {plan['id']} ({plan['cluster']}): {plan['state']}")
    for col in ("figure", "before", "planned after", "achieved"):
        head.add_column(col, justify="right" if col != "figure" else "left")
    got = achieved.get("capacity", {})
    rows: list[tuple[str, Any, Any, Any]] = [
        (f"capacity {f}", n, after["capacity"].get(f), got.get(f))
        for f, n in before["capacity"].items()
    ]
    for key, label in (("empty_hosts", "empty hosts"), ("drained_left", "left on drained hosts")):
        rows.append((label, before[key], after[key], achieved.get(key)))
    for name, b, a, d in rows:
        head.add_row(name, str(b), str(a), "-" if d is None else str(d))
    out.print(head)
    counts = ", ".join(f"{n} {state}" for state, n in sorted(plan["steps_by_state"].items()))
    out.print(f"{plan['migrations']} migrations: {counts or 'none'}")
    if plan.get("steps"):
        grid = Table()
        for col in ("step", "wave", "instance", "flavor", "source", "target", "state", "reason"):
            grid.add_column(col)
        for st in plan["steps"]:
            target = st["target"]
            if st["target"] != st["planned_target"]:
                target += f" (planned {st['planned_target']})"
            grid.add_row(
                str(st["step"]),
                str(st["wave"]),
                st["instance_id"],
                st["flavor"],
                st["source"],
                target,
                st["state"],
                st["reason"] or "",
            )
        print_table(out, grid)


def _emit_plan(plan: Any, as_json: bool) -> None:
    if as_json:
        emit_json(plan)
    else:
        _show_plan(plan)


@defrag_app.command("create")
def defrag_create(
    cluster: Annotated[str, typer.Option(help="The cluster to defragment.")],
    flavor: Annotated[
        list[str] | None, typer.Option("--flavor", help="Flavor whose capacity to restore.")
    ] = None,
    objective: Annotated[
        str, typer.Option("--target", "--objective", help="capacity or empty-hosts.")
    ] = "capacity",
    drain: Annotated[list[str] | None, typer.Option("--drain", help="Host to empty.")] = None,
    max_migrations: Annotated[
        int,
        typer.Option("--budget", "--max-migrations", min=0, help="Most migrations in the plan."),
    ] = 10,
    max_per_host: Annotated[
        int | None,
        typer.Option("--per-host", "--max-per-host", min=1, help="Most moves touching one host."),
    ] = None,
    max_concurrent: Annotated[
        int,
        typer.Option("--concurrent", "--max-concurrent", min=1, help="Moves in flight at once."),
    ] = 1,
    seed: Annotated[int, typer.Option(min=0)] = 0,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan live migrations for CLUSTER and store the plan (it runs only when executed)."""
    budget: dict[str, Any] = {"max_migrations": max_migrations, "max_concurrent": max_concurrent}
    if max_per_host is not None:
        budget["max_per_host"] = max_per_host
    body = {
        "cluster": cluster,
        "target": {"objective": objective, "flavors": flavor or [], "drain": drain or []},
        "budget": budget,
        "seed": seed,
    }
    _emit_plan(_plan_call("POST", url, "/v1/defrag/plans", token, ok=201, json=body), as_json)


@defrag_app.command("admit")
def defrag_admit(
    cluster: Annotated[str, typer.Option(help="The cluster the instance should go to.")],
    flavor: Annotated[str, typer.Option("--flavor", help="The flavor of the instance.")],
    zone: Annotated[
        str | None, typer.Option("--zone", help="Availability zone of the instance.")
    ] = None,
    max_migrations: Annotated[
        int,
        typer.Option(
            "--migrations", "--max-migrations", min=1, help="Most live migrations to make room."
        ),
    ] = 1,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan the few live migrations after which one FLAVOR instance fits in CLUSTER, and store
    them as a plan (execute it, then place the instance)."""
    body: dict[str, Any] = {"cluster": cluster, "flavor": flavor, "max_migrations": max_migrations}
    if zone is not None:
        body["availability_zone"] = zone
    plan = _plan_call("POST", url, "/v1/defrag/admissions", token, ok=201, json=body)
    _emit_plan(plan, as_json)


@defrag_app.command("list")
def defrag_list(
    cluster: Annotated[str | None, typer.Option(help="Only this cluster.")] = None,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stored plans, oldest first."""
    params = {"cluster": cluster} if cluster else None
    data = _plan_call("GET", url, "/v1/defrag/plans", token, params=params)
    if as_json:
        emit_json(data)
        return
    grid = Table(title=f"{len(data)} defrag plans")
    for col in ("plan", "cluster", "state", "migrations", "steps", "by"):
        grid.add_column(col)
    for p in data:
        steps = ", ".join(f"{n} {st}" for st, n in sorted(p["steps_by_state"].items()))
        grid.add_row(
            p["id"], p["cluster"], p["state"], str(p["migrations"]), steps, p["created_by"]
        )
    print_table(out, grid)


@defrag_app.command("show")
def defrag_show(
    plan_id: PlanArg,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A plan with its figures and every step."""
    _emit_plan(_plan_call("GET", url, f"/v1/defrag/plans/{plan_id}", token), as_json)


@defrag_app.command("execute")
def defrag_execute(
    plan_id: PlanArg,
    auto_confirm: Annotated[
        bool,
        typer.Option("--auto-confirm", help="The service confirms each step itself (no adapter)."),
    ] = False,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start carrying out a planned plan."""
    body = {"auto_confirm": auto_confirm}
    path = f"/v1/defrag/plans/{plan_id}/execute"
    _emit_plan(_plan_call("POST", url, path, token, json=body), as_json)


def _plan_action(action: str) -> Any:
    def command(
        plan_id: PlanArg,
        url: UrlOpt = "http://127.0.0.1:8080",
        token: TokenOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        path = f"/v1/defrag/plans/{plan_id}/{action}"
        _emit_plan(_plan_call("POST", url, path, token), as_json)

    return command


defrag_app.command("pause", help="No new steps start (steps in flight finish).")(
    _plan_action("pause")
)
defrag_app.command("resume", help="Resume a paused plan.")(_plan_action("resume"))
defrag_app.command(
    "cancel", help="No new steps; steps in flight are aborted (their target claims released)."
)(_plan_action("cancel"))


@defrag_app.command("confirm")
def defrag_confirm(
    plan_id: PlanArg,
    step: Annotated[int, typer.Argument(min=0, help="Step number.")],
    abort: Annotated[
        str | None, typer.Option("--abort", help="Abort the step instead, with this reason.")
    ] = None,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
) -> None:
    """Report a step's live migration finished (or, with --abort, failed)."""
    base = f"/v1/defrag/plans/{plan_id}/steps/{step}"
    if abort is None:
        data = _plan_call("POST", url, base + "/confirm", token)
    else:
        data = _plan_call("POST", url, base + "/abort", token, json={"reason": abort})
    out.print(f"step {data['step']} of {plan_id}: {data['state']}")


@defrag_app.command("drain")
def defrag_drain(
    host: Annotated[str, typer.Argument(help="Host name.")],
    undo: Annotated[bool, typer.Option("--undo", help="Take placements again.")] = False,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
) -> None:
    """Mark HOST for drain: no new placements, never a migration target; plans empty it."""
    data = _plan_call("DELETE" if undo else "PUT", url, f"/v1/hosts/{host}/drain", token)
    out.print(f"{data['name']}: {'draining' if data['draining'] else 'not draining'}")
