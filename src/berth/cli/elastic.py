"""`berth elastic ...`: the elastic pools through a running service (docs/elastic.md).

    berth elastic groups list | set NAME --flavor ... | delete NAME
    berth elastic limits [--max-vms N] [--max-cores N]
    berth elastic vms [--group G] [--live]        berth elastic history VM
    berth elastic commands [--vm V] [--group G]   berth elastic command VM KIND
    berth elastic accounting [--group G] [--csv]  berth elastic hooks [--vm V]
    berth elastic power                           berth elastic decision

Every command takes `--url`/`BERTH_URL`, `--token`/`BERTH_TOKEN` and `--json`; HTTP goes
through `berth.cli.api_client` (imported lazily by the calls, like every client command).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from berth.cli.api_client import JsonOpt, TokenOpt, UrlOpt, api_error, call, emit_json
from berth.cli.service_options import out
from berth.cli.tables import print_table

elastic_app = typer.Typer(help="Elastic worker pools driven by batch queues.", no_args_is_help=True)
groups_app = typer.Typer(help="Groups and their quotas.", no_args_is_help=True)
elastic_app.add_typer(groups_app, name="groups")
URL = "http://127.0.0.1:8080"


def _get(url: str, path: str, token: str | None, **params: Any) -> Any:
    query = [(k, str(v)) for k, v in params.items() if v is not None and v is not False]
    status, data = call("GET", url, path, token, params=query)
    if status != 200:
        api_error(status, data)
    return data


def _grid(title: str, columns: tuple[str, ...], rows: list[list[Any]]) -> None:
    grid = Table(title=title)
    for col in columns:
        grid.add_column(col)
    for row in rows:
        grid.add_row(*("-" if v is None else str(v) for v in row))
    print_table(out, grid)


@groups_app.command("list")
def groups_list(url: UrlOpt = URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Groups with their quotas and live VMs by state."""
    data = _get(url, "/v1/elastic/groups", token)
    if as_json:
        emit_json(data)
        return
    cols = (
        "group",
        "flavor",
        "cores/VM",
        "slots/VM",
        "min",
        "max",
        "max cores",
        "share",
        "queue",
        "VMs",
    )
    rows = [
        [
            g["name"],
            g["flavor"],
            g["cores_per_vm"],
            g["slots_per_vm"],
            g["min_vms"],
            g["max_vms"],
            g["max_cores"],
            g["share"],
            " ".join(f"{k}={v}" for k, v in g["queue"].items()),
            " ".join(f"{k}:{v}" for k, v in sorted(g["vms"].items())) or "0",
        ]
        for g in data
    ]
    _grid(f"{len(data)} elastic groups", cols, rows)


@groups_app.command("set")
def groups_set(
    name: Annotated[str, typer.Argument(help="The group.")],
    flavor: Annotated[str, typer.Option(help="The VMs' flavor.")],
    system: Annotated[str, typer.Option(help="htcondor or slurm.")],
    cores_per_vm: Annotated[int, typer.Option("--cores-per-vm", min=1)] = 1,
    slots_per_vm: Annotated[int, typer.Option("--slots-per-vm", min=1)] = 1,
    min_vms: Annotated[int, typer.Option("--min-vms", min=0)] = 0,
    max_vms: Annotated[int, typer.Option("--max-vms", min=0)] = 0,
    max_cores: Annotated[int | None, typer.Option("--max-cores", min=0)] = None,
    share: Annotated[float, typer.Option(help="Fair-share weight.")] = 1.0,
    image: Annotated[str | None, typer.Option()] = None,
    cluster: Annotated[str | None, typer.Option(help="Only this cluster.")] = None,
    accounting_group: Annotated[str | None, typer.Option("--accounting-group")] = None,
    requirements: Annotated[str | None, typer.Option()] = None,
    partition: Annotated[str | None, typer.Option()] = None,
    account: Annotated[str | None, typer.Option()] = None,
    url: UrlOpt = URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create or replace a group: its VM shape, quota and the queue it serves."""
    queue = {
        "system": system,
        "accounting_group": accounting_group,
        "requirements": requirements,
        "partition": partition,
        "account": account,
    }
    body = {
        "flavor": flavor,
        "cores_per_vm": cores_per_vm,
        "slots_per_vm": slots_per_vm,
        "min_vms": min_vms,
        "max_vms": max_vms,
        "max_cores": max_cores,
        "share": share,
        "image": image,
        "cluster": cluster,
        "queue": {k: v for k, v in queue.items() if v is not None},
    }
    status, data = call("PUT", url, f"/v1/elastic/groups/{name}", token, json=body)
    if status != 200:
        api_error(status, data)
    if as_json:
        emit_json(data)
        return
    out.print(f"group {data['name']}: {data['min_vms']}-{data['max_vms']} VMs of {data['flavor']}")


@groups_app.command("delete")
def groups_delete(name: str, url: UrlOpt = URL, token: TokenOpt = None) -> None:
    """Remove a group with no live VM."""
    status, data = call("DELETE", url, f"/v1/elastic/groups/{name}", token)
    if status != 204:
        api_error(status, data)
    out.print(f"group {name} removed")


@elastic_app.command("limits")
def limits(
    max_vms: Annotated[int | None, typer.Option("--max-vms", min=0, help="Set the cap.")] = None,
    max_cores: Annotated[int | None, typer.Option("--max-cores", min=0)] = None,
    url: UrlOpt = URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the global cap over every group, or set it (the options given, others unset)."""
    if max_vms is None and max_cores is None:
        data = _get(url, "/v1/elastic/limits", token)
    else:
        body = {"max_vms": max_vms, "max_cores": max_cores}
        status, data = call("PUT", url, "/v1/elastic/limits", token, json=body)
        if status != 200:
            api_error(status, data)
    if as_json:
        emit_json(data)
        return
    out.print(f"global cap: {data['max_vms'] or 'no'} VMs, {data['max_cores'] or 'no'} cores")


@elastic_app.command("vms")
def vms(
    group: Annotated[str | None, typer.Option(help="Only this group.")] = None,
    live: Annotated[bool, typer.Option("--live", help="Only VMs not finished.")] = False,
    url: UrlOpt = URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """VMs with their state, place, heartbeat and running jobs."""
    data = _get(url, "/v1/elastic/vms", token, group=group, live="true" if live else None)
    if as_json:
        emit_json(data)
        return
    cols = ("vm", "group", "state", "since", "host", "cluster", "heartbeat", "jobs", "reason")
    rows = [
        [
            v["name"],
            v["group"],
            v["state"],
            f"{v['since']:.0f}",
            v["host"],
            v["cluster"],
            None if v["heartbeat"] is None else f"{v['heartbeat']:.0f}",
            v["running_jobs"],
            v["reason"],
        ]
        for v in data
    ]
    _grid(f"{len(data)} VMs", cols, rows)


@elastic_app.command("history")
def history(vm: str, url: UrlOpt = URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """A VM's every state change."""
    data = _get(url, f"/v1/elastic/vms/{vm}/history", token)
    if as_json:
        emit_json(data)
        return
    _grid(
        f"{vm}",
        ("state", "at", "reason"),
        [[c["state"], f"{c['at']:.3f}", c["reason"]] for c in data],
    )


@elastic_app.command("commands")
def commands(
    vm: Annotated[str | None, typer.Option(help="Only this VM.")] = None,
    group: Annotated[str | None, typer.Option(help="Only this group.")] = None,
    url: UrlOpt = URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The command log: issued, delivered, done or failed, with results."""
    data = _get(url, "/v1/elastic/commands", token, vm=vm, group=group)
    if as_json:
        emit_json(data)
        return
    cols = ("id", "vm", "kind", "state", "issued", "by", "result")
    rows = [
        [
            c["id"],
            c["vm"],
            c["kind"],
            c["state"],
            f"{c['issued_at']:.0f}",
            c["issued_by"],
            c["result"],
        ]
        for c in data
    ]
    _grid(f"{len(data)} commands", cols, rows)


@elastic_app.command("command")
def command(
    vm: str,
    kind: Annotated[str, typer.Argument(help="join, leave, reconfigure or shutdown.")],
    url: UrlOpt = URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Issue a command to a VM's agent."""
    status, data = call("POST", url, f"/v1/elastic/vms/{vm}/commands", token, json={"kind": kind})
    if status != 201:
        api_error(status, data)
    if as_json:
        emit_json(data)
        return
    out.print(f"command {data['id']}: {data['kind']} to {vm} ({data['state']})")


@elastic_app.command("accounting")
def accounting(
    group: Annotated[str | None, typer.Option(help="Only this group.")] = None,
    since: Annotated[float | None, typer.Option(help="From this Unix time's day.")] = None,
    until: Annotated[
        float | None, typer.Option(help="Up to this Unix time (default: now).")
    ] = None,
    per_core_hour: Annotated[float, typer.Option("--per-core-hour")] = 1.0,
    per_vm_hour: Annotated[float, typer.Option("--per-vm-hour")] = 0.0,
    per_gb_hour: Annotated[float, typer.Option("--per-gb-hour")] = 0.0,
    csv: Annotated[bool, typer.Option("--csv", help="Print CSV.")] = False,
    url: UrlOpt = URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """VM-hours, CPU-hours and points per day and group."""
    params = {
        "group": group,
        "since": since,
        "until": until,
        "per_core_hour": per_core_hour,
        "per_vm_hour": per_vm_hour,
        "per_gb_hour": per_gb_hour,
        "format": "csv" if csv else None,
    }
    data = _get(url, "/v1/elastic/accounting", token, **params)
    if csv:
        sys.stdout.write(str(data))
        return
    if as_json:
        emit_json(data)
        return
    cols = ("day", "group", "VMs", "VM-hours", "CPU-hours", "GB-hours", "points")
    rows = [
        [
            r["day"],
            r["group"],
            r["vms"],
            r["vm_hours"],
            r["cpu_hours"],
            r["memory_gb_hours"],
            r["points"],
        ]
        for r in data
    ]
    _grid("elastic accounting", cols, rows)


@elastic_app.command("hooks")
def hooks(
    vm: Annotated[str | None, typer.Option(help="Only this VM.")] = None,
    url: UrlOpt = URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Join and leave hook runs with their outcome."""
    data = _get(url, "/v1/elastic/hooks", token, vm=vm)
    if as_json:
        emit_json(data)
        return
    cols = ("vm", "event", "hook", "attempt", "outcome", "exit", "next retry", "output")
    rows = [
        [
            r["vm"],
            r["event"],
            r["hook"],
            r["attempt"],
            r["outcome"],
            r["exit_code"],
            r["next_retry"],
            r["output"][-60:].strip(),
        ]
        for r in data
    ]
    _grid(f"{len(data)} hook runs", cols, rows)


@elastic_app.command("power")
def power(url: UrlOpt = URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """Hosts Berth powered off or on (any other host is on)."""
    data = _get(url, "/v1/elastic/power", token)
    if as_json:
        emit_json(data)
        return
    rows = [
        [p["host"], p["power"], f"{p['since']:.0f}", p["changed_by"], p["reason"]] for p in data
    ]
    _grid("host power", ("host", "power", "since", "by", "reason"), rows)


@elastic_app.command("decision")
def decision(url: UrlOpt = URL, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """The control loop's last decision: actions with reasons, and per group what held it back."""
    data = _get(url, "/v1/elastic/decision", token)
    if as_json:
        emit_json(data)
        return
    _grid(
        "actions",
        ("action", "group", "vm / count", "reason"),
        [
            [a["action"], a["group"], a.get("vm", a.get("count")), a["reason"]["message"]]
            for a in data["actions"]
        ],
    )
    _grid(
        "groups",
        ("group", "idle jobs", "free slots", "active", "draining", "wanted", "started", "notes"),
        [
            [
                g["group"],
                g["idle_jobs"],
                g["free_slots"],
                g["active_vms"],
                g["draining_vms"],
                g["wanted"],
                g["started"],
                "; ".join(n["message"] for n in g["notes"]),
            ]
            for g in data["groups"]
        ],
    )


def register(app: typer.Typer) -> None:
    app.add_typer(elastic_app, name="elastic")
