"""`berth serve`: run the Berth service (REST API on uvicorn) on a database."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from berth.cli.names import PROFILES
from berth.cli.service_options import DEFAULT_DATA_DIR, DataDirOpt, DbOpt, db_url, fail, out

if TYPE_CHECKING:  # the service and store load only when `serve` runs (a fast `berth --help`)
    from collections.abc import Callable

    from fastapi import FastAPI

    from berth.core.config import SchedulerConfig
    from berth.policy.model import Policy
    from berth.service.clouds.service import CloudService
    from berth.service.config import ServiceConfig
    from berth.service.elastic.loop import ElasticLoop
    from berth.service.elastic.metrics import ElasticMetrics
    from berth.service.elastic.settings import ElasticSettings
    from berth.service.replica import Replica
    from berth.store.repo import Store

MAX_PORT = 65535

WhyAllOpt = Annotated[
    bool,
    typer.Option(
        "--why-all",
        help="Record why this host with every placement's outcome, for the dashboard's "
        "decision stream (docs/why.md).",
    ),
]
PrintTokenOpt = Annotated[
    bool,
    typer.Option(
        "--print-admin-token",
        help="Print an admin token, kept in DATA_DIR/admin-token and reused at each start.",
    ),
]


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
    elastic_file: Annotated[
        Path | None,
        typer.Option("--elastic", help="Run the elastic pools' control loop (YAML config)."),
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
    max_body_bytes: Annotated[
        int, typer.Option(min=1024, help="Largest request body accepted (413 above it).")
    ] = 4 << 20,
    max_clock_skew: Annotated[
        float,
        typer.Option(min=0.0, help="Seconds a host report may be ahead of this clock (422)."),
    ] = 300.0,
    why_all: WhyAllOpt = False,
    print_admin_token: PrintTokenOpt = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Run the Berth service (REST API on uvicorn)."""
    if not 1 <= port <= MAX_PORT:  # uvicorn would listen on `port` modulo 65536
        fail(f"--port: {port} is not a TCP port (1-{MAX_PORT})")
    _ensure_port_free(host, port)  # before any heavy import or output
    import socket

    import uvicorn

    from berth.service.config import ServiceConfig
    from berth.service.demo import load_demo as _load_demo

    elastic = None if elastic_file is None else _load_elastic(elastic_file)  # before any file
    url = db_url(db, data_dir)
    scheduler = _scheduler(profile_name, config, host_subset_size)
    rid = replica_id or f"{socket.gethostname()}:{port}"
    store = _open_store(url, rid)
    policy = None if policy_file is None else _load_policy(policy_file, store)
    if load_demo and store.is_empty():
        out.print(f"loaded the demo topology: {_load_demo(store)}")
    cfg = ServiceConfig(
        db_url=url,
        replica_id=rid,
        scheduler=scheduler,
        service_down_time=service_down_time,
        poll_interval=poll_interval,
        policy=policy,
        replica_spread=replica_spread,
        max_body_bytes=max_body_bytes,
        max_clock_skew=max_clock_skew,
        why_all=why_all,
    )
    loop = None if elastic is None else _elastic_factory(elastic, _url(host, port))
    app = _app(cfg, store, simulate_agents, loop, elastic_file)
    _announce(store, rid, host, port, data_dir if print_admin_token else None)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


def _open_store(url: str, replica_id: str) -> Store:
    """The store, or exit 2 with the URL (password hidden) and the first line of the error."""
    from berth.store.repo import Store

    try:
        return Store.open(url, replica=replica_id)
    except Exception as exc:  # unreachable server, bad credentials, unwritable directory
        from sqlalchemy.engine import make_url

        shown = make_url(url).render_as_string(hide_password=True)
        fail(f"cannot open the database {shown}: {str(exc).splitlines()[0]}")


def _load_policy(path: Path, store: Store) -> Policy:
    """The multi-cloud policy, its flavor catalogue recorded in the store."""
    from berth.core.errors import BerthError
    from berth.policy.loader import load_policy
    from berth.service.policy_topology import ensure_catalogue

    try:
        policy = load_policy(path)
    except BerthError as exc:
        fail(str(exc))
    added = ensure_catalogue(store, policy)
    if added:
        out.print(f"recorded {added} flavors of the policy's catalogue")
    return policy


def _scheduler(profile_name: str, config: Path | None, host_subset_size: int) -> SchedulerConfig:
    from berth.core.config import profile

    scheduler = profile(profile_name) if config is None else _read_config(config)
    if host_subset_size != 1:
        scheduler = scheduler.model_copy(update={"host_subset_size": host_subset_size})
    return scheduler


def _url(host: str, port: int) -> str:
    shown = "localhost" if host in ("0.0.0.0", "127.0.0.1") else host
    return f"http://{shown}:{port}"


def _app(
    cfg: ServiceConfig,
    store: Store,
    simulate_agents: bool,
    loop: Callable[[Replica, ElasticMetrics, CloudService], ElasticLoop] | None,
    elastic_file: Path | None,
) -> FastAPI:
    from berth.service.app import create_app
    from berth.service.elastic.settings import ElasticConfigError

    try:
        return create_app(cfg, store=store, simulate_heartbeats=simulate_agents, elastic_loop=loop)
    except ElasticConfigError as exc:  # the elastic file names a cloud that cannot be driven
        fail(f"{elastic_file}: {exc}")


def _load_elastic(path: Path) -> ElasticSettings:
    from berth.service.elastic.settings import ElasticConfigError, load_elastic_settings

    try:
        return load_elastic_settings(path)
    except ElasticConfigError as exc:
        fail(str(exc))


def _elastic_factory(
    settings: ElasticSettings, agent_url: str
) -> Callable[[Replica, ElasticMetrics, CloudService], ElasticLoop]:
    from berth.service.elastic.build import build_loop

    def make(replica: Replica, metrics: ElasticMetrics, clouds: CloudService) -> ElasticLoop:
        return build_loop(settings, replica, metrics, clouds, agent_url)

    return make


def _ensure_port_free(host: str, port: int) -> None:
    """Exit 2 with one line, before anything is printed or loaded, when the port is taken (a
    second `make run`); uvicorn would only fail after the banner and the token."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            fail(f"--port: {host}:{port} is not available ({exc.strerror}); is Berth running?")


ADMIN_TOKEN_FILE = "admin-token"


def _admin_token(store: Store, data_dir: Path) -> str:
    """The admin token kept in DATA_DIR/admin-token (mode 0600), minted only when the file is
    missing or its token no longer authenticates: each start does not add another admin token."""
    import os

    path = data_dir / ADMIN_TOKEN_FILE
    if path.is_file():
        secret = path.read_text(encoding="utf-8").strip()
        row = store.lookup_token(secret) if secret else None
        if row is not None and row.role == "admin":
            return secret
    _, secret = store.create_token("serve-admin", "admin")
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secret + "\n")
    path.chmod(0o600)  # an existing file keeps its mode under O_CREAT
    return secret


def _announce(store: Store, replica_id: str, host: str, port: int, token_dir: Path | None) -> None:
    """Print where the replica serves (and the admin token when asked) before uvicorn starts."""
    shown = "localhost" if host in ("0.0.0.0", "127.0.0.1") else host
    where = store.engine.url.render_as_string(hide_password=True)
    out.print(f"Berth replica {replica_id} on {where}")
    out.print(f"URL: http://{shown}:{port}   (API docs: http://{shown}:{port}/docs)")
    out.print(f"dashboard: http://{shown}:{port}/dashboard/   (log in with a token)")
    if token_dir is not None:
        secret = _admin_token(store, token_dir)
        out.print(f"admin token: {secret}", soft_wrap=True, highlight=False)
        out.print(
            f"try: BERTH_URL=http://{shown}:{port} BERTH_TOKEN={secret} berth api capacity",
            soft_wrap=True,
            highlight=False,
        )
    sys.stdout.flush()


def _read_config(path: Path) -> SchedulerConfig:
    import yaml
    from pydantic import ValidationError

    from berth.core.config import SchedulerConfig

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return SchedulerConfig.model_validate(raw)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        fail(f"{path}: {exc}")


def register(app: typer.Typer) -> None:
    """Add `berth serve`."""
    app.command("serve")(serve)
