"""`berth db ...` (schema, demo and topology loads) and `berth admin ...` (tokens)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from berth.cli.service_options import (
    DEFAULT_DATA_DIR,
    DataDirOpt,
    DbOpt,
    db_url,
    err,
    fail,
    out,
)

db_app = typer.Typer(help="Database: schema upgrades and the demo topology.", no_args_is_help=True)
admin_app = typer.Typer(help="Administration: tokens.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None, data_dir: DataDirOpt = DEFAULT_DATA_DIR) -> None:
    """Create or upgrade the schema (Alembic migrations) to the latest revision."""
    from berth.store.db import current_revision, make_engine, upgrade

    engine = make_engine(db_url(db, data_dir))
    upgrade(engine)
    out.print(f"schema at revision {current_revision(engine)}")


@db_app.command("load-demo")
def db_load_demo(db: DbOpt = None, data_dir: DataDirOpt = DEFAULT_DATA_DIR) -> None:
    """Load the demo topology (2 IDCs, 3 clusters, 5 pools, 270 hosts, 500 instances)."""
    from berth.service.demo import load_demo
    from berth.store.repo import Store

    store = Store.open(db_url(db, data_dir))
    if not store.is_empty():
        fail("the database already holds hosts; load the demo into an empty one")
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

    store = Store.open(db_url(db, data_dir))
    if not store.is_empty():
        fail("the database already holds hosts; load the topology into an empty one")
    try:
        policy = load_policy(policy_file or shipped_path("demo-policy.yaml"))
        spec = load_topology(topology_file or shipped_path("demo-topology.yaml"))
        load_topology_into(store, policy, spec, now=time.time())
    except BerthError as exc:
        fail(str(exc))
    out.print(f"loaded: {store.counts()}")


@admin_app.command("create-token")
def create_token(
    role: Annotated[
        str, typer.Option(help="admin, operator, tenant, reader, agent, vm or group-admin.")
    ] = "admin",
    name: Annotated[str, typer.Option(help="A label for the token.")] = "cli",
    project: Annotated[str | None, typer.Option(help="Project (tenant tokens).")] = None,
    ttl: Annotated[
        str | None,
        typer.Option(help="Expire after this long: seconds, or 30m, 12h, 30d. Default: never."),
    ] = None,
    host: Annotated[
        list[str] | None,
        typer.Option("--host", help="A host an agent token reports for (repeat for more)."),
    ] = None,
    elastic_group: Annotated[
        str | None, typer.Option("--elastic-group", help="A group-admin token's elastic group.")
    ] = None,
    db: DbOpt = None,
    data_dir: DataDirOpt = DEFAULT_DATA_DIR,
) -> None:
    """Create a bearer token and print it (only its hash is stored)."""
    from berth.core.errors import BerthError
    from berth.store.repo import Store

    store = Store.open(db_url(db, data_dir))
    try:
        row, secret = store.create_token(
            name,
            role,
            project,
            ttl=parse_ttl(ttl),
            hosts=tuple(host or ()),
            elastic_group=elastic_group,
        )
    except BerthError as exc:
        fail(str(exc))
    sys.stdout.write(secret + "\n")
    scope = row.project or row.elastic_group or ", ".join(row.hosts)
    expiry = f", expires in {ttl}" if ttl else ""
    err.print(f"token {row.id} ({row.role}{', ' + scope if scope else ''}{expiry})")


_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str | None) -> float | None:
    """`--ttl`: a positive number of seconds, or one with a unit (s, m, h, d); exit 2 else."""
    import re

    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d{1,9})\s*([smhd]?)\s*", text)
    if match is None or int(match.group(1)) == 0:
        fail(f"--ttl: {text!r} is not a positive duration (seconds, or 30m, 12h, 30d)")
    return float(int(match.group(1)) * _UNITS[match.group(2)])


def register(app: typer.Typer) -> None:
    """Add `berth db` and `berth admin`."""
    app.add_typer(db_app, name="db")
    app.add_typer(admin_app, name="admin")
