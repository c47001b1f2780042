"""`berth api ...`: the REST client commands (place, capacity, hosts, instances, delete).

They live under `berth api` so that they never clash with the local commands (`berth place`,
`berth capacity` work on a fleet file; `berth api place` asks a running service). Calls and exit
codes: `berth.cli.api_client`; the plan commands `berth api defrag ...`: `berth.cli.api_defrag`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from berth.cli.api_client import JsonOpt, TokenOpt, UrlOpt, api_error, call, emit_json
from berth.cli.api_defrag import defrag_app
from berth.cli.service_options import out
from berth.cli.tables import print_table

api_app = typer.Typer(
    help="Client commands that call a running Berth service.", no_args_is_help=True
)


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
    status, data = call("POST", url, "/v1/placements", token, json=body, headers=headers)
    if status != 201:
        if as_json:
            emit_json(data)
        api_error(status, data)
    if as_json:
        emit_json(data)
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
    print_table(out, grid)


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
    status, data = call("GET", url, "/v1/capacity", token, params=params)
    if status != 200:
        api_error(status, data)
    if as_json:
        emit_json(data)
        return
    groups = data["counts"]
    grid = Table(title=f"Remaining capacity by {by} ({data['hosts']} hosts)")
    grid.add_column("flavor")
    for g in groups:
        grid.add_column(g, justify="right")
    for f in data["flavors"]:
        grid.add_row(f, *(str(groups[g].get(f, 0)) for g in groups))
    print_table(out, grid)


@api_app.command("hosts")
def api_hosts(
    cluster: Annotated[str | None, typer.Option(help="Only this cluster.")] = None,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hosts with their state, generation and use."""
    status, data = call(
        "GET", url, "/v1/hosts", token, params={"cluster": cluster} if cluster else None
    )
    if status != 200:
        api_error(status, data)
    if as_json:
        emit_json(data)
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
    print_table(out, grid)


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
    status, data = call("GET", url, "/v1/instances", token, params=params)
    if status != 200:
        api_error(status, data)
    if as_json:
        emit_json(data)
        return
    grid = Table(title=f"{len(data)} instances")
    for col in ("instance", "project", "flavor", "host", "cluster", "set"):
        grid.add_column(col)
    for i in data:
        grid.add_row(
            i["id"], i["project"], i["flavor"], i["host"], i["cluster"], i["deployment_set"] or "-"
        )
    print_table(out, grid)


@api_app.command("delete")
def api_delete(
    instance_id: Annotated[str, typer.Argument(help="Instance to release.")],
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
) -> None:
    """Release an instance (DELETE /v1/instances/ID)."""
    status, data = call("DELETE", url, f"/v1/instances/{instance_id}", token)
    if status != 204:
        api_error(status, data)
    out.print(f"released {instance_id}")


api_app.add_typer(defrag_app, name="defrag")


def register(app: typer.Typer) -> None:
    """Add `berth api`."""
    app.add_typer(api_app, name="api")
