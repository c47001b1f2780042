"""`berth serve`, `berth db ...`, `berth admin ...` and `berth api ...` (the REST client).

The client commands live under `berth api` so that they never clash with the local commands
(`berth place`, `berth capacity` work on a fleet file; `berth api place` asks a running service).
They read `--url` / `BERTH_URL` and `--token` / `BERTH_TOKEN`.

Exit codes follow the local commands: 0 success, 1 no valid host (the diagnosis is printed),
2 bad input or an API error, 3 the service cannot be reached.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from berth.core.config import PROFILES, SchedulerConfig, profile

out = Console()
err = Console(stderr=True)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="BERTH_DB",
        help="Database URL (sqlite:///FILE or postgresql://...). Default: SQLite in --data-dir.",
    ),
]
DataDirOpt = Annotated[
    Path,
    typer.Option("--data-dir", envvar="BERTH_DATA_DIR", help="Where the SQLite file lives."),
]
UrlOpt = Annotated[
    str, typer.Option("--url", envvar="BERTH_URL", help="The Berth service's base URL.")
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="BERTH_TOKEN", help="Bearer token.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
DEFAULT_DATA_DIR = Path("berth-data")


def _fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _db_url(db: str | None, data_dir: Path) -> str:
    from berth.store.db import sqlite_url

    return db if db else sqlite_url(data_dir)


# ---------------------------------------------------------------------------- serve
def serve(
    db: DbOpt = None,
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    replica_id: Annotated[
        str | None, typer.Option("--replica-id", help="Name of this replica (metrics, events).")
    ] = None,
    profile_name: Annotated[
        str, typer.Option("--profile", help=f"Weigher profile: {', '.join(PROFILES)}.")
    ] = "berth",
    config: Annotated[
        Path | None, typer.Option("--config", help="Scheduler configuration file (YAML).")
    ] = None,
    service_down_time: Annotated[
        float, typer.Option(help="Seconds without heartbeat after which a host gets nothing.")
    ] = 60.0,
    poll_interval: Annotated[float, typer.Option(help="Event-log polling interval (s).")] = 0.5,
    host_subset_size: Annotated[
        int,
        typer.Option(
            min=1,
            help="Pick each host at random among the N best (fewer races between replicas).",
        ),
    ] = 1,
    replica_spread: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Weight of a per-replica host preference (0: off); replicas race less.",
        ),
    ] = 0.0,
    policy_file: Annotated[
        Path | None,
        typer.Option("--policy", help="Multi-cloud policy file (YAML): enables POST /v1/schedule."),
    ] = None,
    load_demo: Annotated[
        bool, typer.Option("--load-demo", help="Load the demo topology if the database is empty.")
    ] = False,
    simulate_agents: Annotated[
        bool,
        typer.Option(
            "--simulate-agents",
            help="Heartbeat every live host from inside the service (demo stand-in for agents).",
        ),
    ] = False,
    print_admin_token: Annotated[
        bool, typer.Option("--print-admin-token", help="Create an admin token and print it.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Run the Berth service (REST API on uvicorn)."""
    import socket

    import uvicorn

    from berth.service.app import create_app
    from berth.service.config import ServiceConfig
    from berth.service.demo import load_demo as _load_demo
    from berth.store.repo import Store

    url = _db_url(db, data_dir)
    scheduler = profile(profile_name) if config is None else _read_config(config)
    if host_subset_size != 1:
        scheduler = scheduler.model_copy(update={"host_subset_size": host_subset_size})
    rid = replica_id or f"{socket.gethostname()}:{port}"
    try:
        store = Store.open(url, replica=rid)
    except Exception as exc:  # unreachable server, bad credentials, unwritable directory
        from sqlalchemy.engine import make_url

        shown = make_url(url).render_as_string(hide_password=True)
        _fail(f"cannot open the database {shown}: {str(exc).splitlines()[0]}")
    policy = None
    if policy_file is not None:
        from berth.core.errors import BerthError
        from berth.policy.loader import load_policy
        from berth.service.policy_topology import ensure_catalogue

        try:
            policy = load_policy(policy_file)
        except BerthError as exc:
            _fail(str(exc))
        added = ensure_catalogue(store, policy)
        if added:
            out.print(f"recorded {added} flavors of the policy's catalogue")
    if load_demo and store.is_empty():
        counts = _load_demo(store)
        out.print(f"loaded the demo topology: {counts}")
    cfg = ServiceConfig(
        db_url=url,
        replica_id=rid,
        scheduler=scheduler,
        service_down_time=service_down_time,
        poll_interval=poll_interval,
        policy=policy,
        replica_spread=replica_spread,
    )
    app = create_app(cfg, store=store, simulate_heartbeats=simulate_agents)
    shown = "localhost" if host in ("0.0.0.0", "127.0.0.1") else host
    out.print(f"Berth replica {rid} on {store.engine.url.render_as_string(hide_password=True)}")
    out.print(f"URL: http://{shown}:{port}   (API docs: http://{shown}:{port}/docs)")
    if print_admin_token:
        _, secret = store.create_token("serve-admin", "admin")
        out.print(f"admin token: {secret}", soft_wrap=True, highlight=False)
        out.print(
            f"try: BERTH_URL=http://{shown}:{port} BERTH_TOKEN={secret} berth api capacity",
            soft_wrap=True,
            highlight=False,
        )
    sys.stdout.flush()
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


def _read_config(path: Path) -> SchedulerConfig:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return SchedulerConfig.model_validate(raw)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        _fail(f"{path}: {exc}")


# ---------------------------------------------------------------------------- db & admin
db_app = typer.Typer(help="Database: schema upgrades and the demo topology.", no_args_is_help=True)
admin_app = typer.Typer(help="Administration: tokens.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None, data_dir: DataDirOpt = DEFAULT_DATA_DIR) -> None:
    """Create or upgrade the schema (Alembic migrations) to the latest revision."""
    from berth.store.db import current_revision, make_engine, upgrade

    engine = make_engine(_db_url(db, data_dir))
    upgrade(engine)
    out.print(f"schema at revision {current_revision(engine)}")


@db_app.command("load-demo")
def db_load_demo(db: DbOpt = None, data_dir: DataDirOpt = DEFAULT_DATA_DIR) -> None:
    """Load the demo topology (2 IDCs, 3 clusters, 5 pools, 270 hosts, 500 instances)."""
    from berth.service.demo import load_demo
    from berth.store.repo import Store

    store = Store.open(_db_url(db, data_dir))
    if not store.is_empty():
        _fail("the database already holds hosts; load the demo into an empty one")
    out.print(f"loaded: {load_demo(store)}")


@db_app.command("load-topology")
def db_load_topology(
    policy_file: Annotated[
        Path | None, typer.Option("--policy", help="Policy file. Default: the demo policy.")
    ] = None,
    topology_file: Annotated[
        Path | None,
        typer.Option("--topology", help="Topology file. Default: the demo topology."),
    ] = None,
    db: DbOpt = None,
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
) -> None:
    """Load a multi-cloud topology (regions, IDCs, clusters, networks, instances) and the
    policy's flavor catalogue into an empty database; serve it with `--policy`."""
    import time

    from berth.core.errors import BerthError
    from berth.policy.demo import shipped_path
    from berth.policy.loader import load_policy, load_topology
    from berth.service.policy_topology import load_topology_into
    from berth.store.repo import Store

    store = Store.open(_db_url(db, data_dir))
    if not store.is_empty():
        _fail("the database already holds hosts; load the topology into an empty one")
    try:
        policy = load_policy(policy_file or shipped_path("demo-policy.yaml"))
        spec = load_topology(topology_file or shipped_path("demo-topology.yaml"))
        load_topology_into(store, policy, spec, now=time.time())
    except BerthError as exc:
        _fail(str(exc))
    out.print(f"loaded: {store.counts()}")


@admin_app.command("create-token")
def create_token(
    role: Annotated[str, typer.Option(help="admin, operator, tenant or reader.")] = "admin",
    name: Annotated[str, typer.Option(help="A label for the token.")] = "cli",
    project: Annotated[str | None, typer.Option(help="Project (tenant tokens).")] = None,
    db: DbOpt = None,
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
) -> None:
    """Create a bearer token and print it (only its hash is stored)."""
    from berth.core.errors import BerthError
    from berth.store.repo import Store

    store = Store.open(_db_url(db, data_dir))
    try:
        row, secret = store.create_token(name, role, project)
    except BerthError as exc:
        _fail(str(exc))
    sys.stdout.write(secret + "\n")
    err.print(f"token {row.id} ({row.role}{', ' + row.project if row.project else ''})")


# ---------------------------------------------------------------------------- api client
api_app = typer.Typer(
    help="Client commands that call a running Berth service.", no_args_is_help=True
)


def _call(method: str, url: str, path: str, token: str | None, **kwargs: Any) -> tuple[int, Any]:
    import httpx

    headers = dict(kwargs.pop("headers", {}) or {})
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        resp = httpx.request(method, url.rstrip("/") + path, headers=headers, timeout=30, **kwargs)
    except httpx.HTTPError as exc:
        _fail(f"cannot reach {url}: {exc}", 3)
    try:
        body = resp.json()
    except ValueError:
        body = resp.text
    return resp.status_code, body


def _api_error(status: int, body: Any) -> NoReturn:
    if isinstance(body, dict) and "error" in body:
        e = body["error"]
        _fail(f"{e.get('code')}: {e.get('message')}", 1 if e.get("code") == "no_valid_host" else 2)
    _fail(f"HTTP {status}: {body}")


def _emit(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


@api_app.command("place")
def api_place(
    flavor: Annotated[str, typer.Option("--flavor", help="Flavor name.")],
    count: Annotated[int, typer.Option("--count", "-n", min=1)] = 1,
    project: Annotated[str | None, typer.Option(help="Project (default: the token's).")] = None,
    cluster: Annotated[str | None, typer.Option(help="Only this cluster.")] = None,
    region: Annotated[str | None, typer.Option(help="Only this region (IDC).")] = None,
    pool: Annotated[str | None, typer.Option(help="Only this pool.")] = None,
    deployment_set: Annotated[str | None, typer.Option("--deployment-set")] = None,
    business_type: Annotated[str, typer.Option("--business-type")] = "on-demand",
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Place COUNT instances of FLAVOR through the service and claim them."""
    body = {
        k: v
        for k, v in {
            "flavor": flavor,
            "count": count,
            "project": project,
            "cluster": cluster,
            "region": region,
            "pool": pool,
            "deployment_set": deployment_set,
            "business_type": business_type,
        }.items()
        if v is not None
    }
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    status, data = _call("POST", url, "/v1/placements", token, json=body, headers=headers)
    if status != 201:
        if as_json:
            _emit(data)
        _api_error(status, data)
    if as_json:
        _emit(data)
        return
    grid = Table(title=f"placement {data['id']}: {len(data['instances'])} x {flavor}")
    for col in ("instance", "host", "cluster", "cells (CPUs / MB)"):
        grid.add_column(col)
    for inst in data["instances"]:
        cells = ", ".join(
            f"{c['cell']}: {c['vcpus'] + c['pcpus']} / {c['memory_mb'] + c['hugepages_mb']}"
            for c in inst["cells"]
        )
        grid.add_row(inst["id"], inst["host"], inst["cluster"], cells or "floating")
    out.print(grid)


@api_app.command("capacity")
def api_capacity(
    flavor: Annotated[list[str] | None, typer.Option("--flavor", help="Repeatable.")] = None,
    by: Annotated[str, typer.Option(help="fleet, region, cluster, pool or host.")] = "cluster",
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """How many more instances of each flavor fit, grouped by region/cluster/pool/host."""
    params: list[tuple[str, str]] = [("by", by)] + [("flavor", f) for f in flavor or []]
    status, data = _call("GET", url, "/v1/capacity", token, params=params)
    if status != 200:
        _api_error(status, data)
    if as_json:
        _emit(data)
        return
    groups = data["counts"]
    grid = Table(title=f"Remaining capacity by {by} ({data['hosts']} hosts)")
    grid.add_column("flavor")
    for g in groups:
        grid.add_column(g, justify="right")
    for f in data["flavors"]:
        grid.add_row(f, *(str(groups[g].get(f, 0)) for g in groups))
    out.print(grid)


@api_app.command("hosts")
def api_hosts(
    cluster: Annotated[str | None, typer.Option(help="Only this cluster.")] = None,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hosts with their state, generation and use."""
    status, data = _call(
        "GET", url, "/v1/hosts", token, params={"cluster": cluster} if cluster else None
    )
    if status != 200:
        _api_error(status, data)
    if as_json:
        _emit(data)
        return
    grid = Table(title=f"{len(data)} hosts")
    for col in ("host", "cluster", "pool", "enabled", "gen", "instances", "pinned", "memory MB"):
        grid.add_column(col)
    for h in data:
        u = h.get("usage") or {}
        grid.add_row(
            h["name"],
            h["cluster"],
            h["pool"] or "-",
            "yes" if h["enabled"] else "no",
            str(h["generation"]),
            str(u.get("instances", "-")),
            f"{u.get('pinned_cpus_used', '-')}/{u.get('pinned_cpus', '-')}",
            f"{u.get('memory_mb_used', '-')}/{u.get('memory_mb', '-')}",
        )
    out.print(grid)


@api_app.command("instances")
def api_instances(
    project: Annotated[str | None, typer.Option(help="Only this project.")] = None,
    host: Annotated[str | None, typer.Option(help="Only this host.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 1000,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Instances the service knows (a tenant token sees its own project only)."""
    params: dict[str, Any] = {"limit": limit}
    if project:
        params["project"] = project
    if host:
        params["host"] = host
    status, data = _call("GET", url, "/v1/instances", token, params=params)
    if status != 200:
        _api_error(status, data)
    if as_json:
        _emit(data)
        return
    grid = Table(title=f"{len(data)} instances")
    for col in ("instance", "project", "flavor", "host", "cluster", "set"):
        grid.add_column(col)
    for i in data:
        grid.add_row(
            i["id"], i["project"], i["flavor"], i["host"], i["cluster"], i["deployment_set"] or "-"
        )
    out.print(grid)


@api_app.command("delete")
def api_delete(
    instance_id: Annotated[str, typer.Argument(help="Instance to release.")],
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
) -> None:
    """Release an instance (DELETE /v1/instances/ID)."""
    status, data = _call("DELETE", url, f"/v1/instances/{instance_id}", token)
    if status != 204:
        _api_error(status, data)
    out.print(f"released {instance_id}")


# ---------------------------------------------------------------------------- api defrag
defrag_app = typer.Typer(
    help="Defragmentation plans of a running service (live migrations, step by step).",
    no_args_is_help=True,
)
api_app.add_typer(defrag_app, name="defrag")

PlanArg = Annotated[str, typer.Argument(help="Plan id (dp-...).")]


def _plan_call(
    method: str, url: str, path: str, token: str | None, ok: int = 200, **kw: Any
) -> Any:
    status, data = _call(method, url, path, token, **kw)
    if status != ok:
        _api_error(status, data)
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
        out.print(grid)


def _emit_plan(plan: Any, as_json: bool) -> None:
    if as_json:
        _emit(plan)
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
        _emit(data)
        return
    grid = Table(title=f"{len(data)} defrag plans")
    for col in ("plan", "cluster", "state", "migrations", "steps", "by"):
        grid.add_column(col)
    for p in data:
        steps = ", ".join(f"{n} {st}" for st, n in sorted(p["steps_by_state"].items()))
        grid.add_row(
            p["id"], p["cluster"], p["state"], str(p["migrations"]), steps, p["created_by"]
        )
    out.print(grid)


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


def register(app: typer.Typer) -> None:
    """Add the service commands to the `berth` command."""
    app.command("serve")(serve)
    app.add_typer(db_app, name="db")
    app.add_typer(admin_app, name="admin")
    app.add_typer(api_app, name="api")
