"""`berth agent`: run the elastic VM agent (`berth.elastic.agent`) on this VM."""

from __future__ import annotations

import importlib
import logging
import signal
import threading
from typing import Annotated, Any

import typer

from berth.cli.service_options import fail


def _worker(path: str, options: list[str]) -> Any:
    module, _, name = path.partition(":")
    if not module or not name:
        fail(f"--worker: {path!r} is not 'package.module:Class'")
    kwargs: dict[str, str] = {}
    for opt in options:
        key, sep, value = opt.partition("=")
        if not sep or not key:
            fail(f"--worker-opt: {opt!r} is not key=value")
        kwargs[key] = value
    try:
        cls = getattr(importlib.import_module(module), name)
        return cls(**kwargs)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        fail(f"--worker: cannot make {path} with {kwargs}: {exc}")


def agent(
    vm: Annotated[str, typer.Option("--vm", envvar="BERTH_VM", help="This VM's name.")],
    worker: Annotated[
        str,
        typer.Option(
            "--worker",
            help="The BatchWorker class, 'package.module:Class' "
            "(e.g. berth.elastic.workers.htcondor:HTCondorWorkers).",
        ),
    ],
    worker_opt: Annotated[
        list[str] | None,
        typer.Option("--worker-opt", help="key=value passed to the worker class; repeatable."),
    ] = None,
    url: Annotated[
        str, typer.Option("--url", envvar="BERTH_URL", help="The Berth service's base URL.")
    ] = "http://127.0.0.1:8080",
    token: Annotated[
        str | None, typer.Option("--token", envvar="BERTH_TOKEN", help="This VM's token.")
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between heartbeats.", min=0.1)] = 5.0,
    cpus: Annotated[
        int | None, typer.Option(help="Start the batch worker with this many CPUs first.", min=1)
    ] = None,
) -> None:
    """Run this VM's agent: heartbeat, fetch commands, apply them to the batch worker."""
    from berth.elastic.agent import Agent, AgentConfig

    if not token:
        fail("--token (or BERTH_TOKEN): the VM's token is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    config = AgentConfig(url=url, vm=vm, token=token, interval=interval, cpus=cpus)
    Agent(config, _worker(worker, worker_opt or [])).run(stop)


def register(app: typer.Typer) -> None:
    app.command("agent")(agent)
