"""`berth cluster add|list|remove`: clusters Berth drives, joining and leaving a running service.

`add --openstack` joins an OpenStack cluster (its endpoints and a credential reference; the
token or password stays in the environment or a file, docs/openstack.md); `add --simulated`
joins an in-process simulated cloud made from a fleet file (demos). Joining imports the
cluster's hosts and running servers; `remove` makes it leave (no more placements; its servers
keep running). Admin token required for add and remove.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from berth.cli.api_client import JsonOpt, TokenOpt, UrlOpt, api_error, call, emit_json
from berth.cli.service_options import fail, out
from berth.cli.tables import print_table

cluster_app = typer.Typer(
    help="Clusters Berth drives (OpenStack or simulated): join, list, leave.",
    no_args_is_help=True,
)

NameArg = Annotated[str, typer.Argument(help="The cluster's name in Berth.")]


def _show(clusters: list[dict[str, Any]]) -> None:
    grid = Table()
    for col in ("cluster", "region", "state", "hosts", "driver", "driver state", "endpoint"):
        grid.add_column(col)
    for c in clusters:
        d = c.get("driver") or {}
        cfg = d.get("config") or {}
        grid.add_row(
            c["name"],
            c["region"],
            c["state"],
            str(c["hosts"]),
            d.get("kind", "-"),
            d.get("state", "-"),
            str(cfg.get("compute") or cfg.get("cloud") or "-"),
        )
    print_table(out, grid)


def _config(
    openstack: bool,
    simulated: Path | None,
    compute: str | None,
    placement: str | None,
    image: str | None,
    credential_ref: str | None,
    transport_url: str | None,
    boot_image: str | None,
    cloud: str | None,
) -> tuple[str, dict[str, Any]]:
    if openstack == (simulated is not None):
        fail("give exactly one of --openstack and --simulated FLEET")
    if simulated is not None:
        from berth.fleet.io import load_fleet

        fleet = load_fleet(simulated)
        return "simulated", {
            "cloud": cloud or simulated.stem,
            "fleet": fleet.model_dump(mode="json"),
        }
    if compute is None or placement is None:
        fail("--openstack needs --compute and --placement")
    config: dict[str, Any] = {"compute": compute, "placement": placement, "auth": {}}
    if compute:
        config["auth"] = {"endpoint": compute}
    for key, value in (
        ("image", image),
        ("credential_ref", credential_ref),
        ("transport_url", transport_url),
        ("boot_image", boot_image),
    ):
        if value is not None:
            config[key] = value
    return "openstack", config


@cluster_app.command("add")
def cluster_add(
    name: NameArg,
    region: Annotated[str, typer.Option(help="The region or IDC the cluster joins.")],
    openstack: Annotated[bool, typer.Option("--openstack", help="An OpenStack cluster.")] = False,
    compute: Annotated[str | None, typer.Option(help="Nova's endpoint (…/v2.1).")] = None,
    placement: Annotated[str | None, typer.Option(help="Placement's endpoint.")] = None,
    image: Annotated[str | None, typer.Option(help="Glance's endpoint.")] = None,
    credential_ref: Annotated[
        str | None,
        typer.Option(help="Where the token is: env:NAME or file:PATH (never the token)."),
    ] = None,
    transport_url: Annotated[
        str | None, typer.Option(help="RabbitMQ URL of Nova's notifications (else polling).")
    ] = None,
    boot_image: Annotated[
        str | None, typer.Option(help="Image id booted when a request names none.")
    ] = None,
    simulated: Annotated[
        Path | None, typer.Option(help="A simulated cloud over this fleet file.")
    ] = None,
    cloud: Annotated[str | None, typer.Option(help="The simulated cloud's name.")] = None,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Join a cluster: Berth imports its hosts and servers and drives it from now on."""
    kind, config = _config(
        openstack,
        simulated,
        compute,
        placement,
        image,
        credential_ref,
        transport_url,
        boot_image,
        cloud,
    )
    body = {"name": name, "region": region, "driver": {"kind": kind, "config": config}}
    status, data = call("POST", url, "/v1/clusters", token, json=body)
    if status != 201:
        api_error(status, data)
    if as_json:
        emit_json(data)
    else:
        _show([data])


@cluster_app.command("list")
def cluster_list(
    url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """Every cluster, with its driver (kind, state, endpoint) when Berth drives it."""
    status, data = call("GET", url, "/v1/clusters", token)
    if status != 200:
        api_error(status, data)
    if as_json:
        emit_json(data)
    else:
        _show(data)


@cluster_app.command("remove")
def cluster_remove(
    name: NameArg,
    url: UrlOpt = "http://127.0.0.1:8080",
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Leave: no more placements in the cluster; its servers keep running."""
    status, data = call("DELETE", url, f"/v1/clusters/{name}", token)
    if status != 200:
        api_error(status, data)
    if as_json:
        emit_json(data)
    else:
        _show([data])


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")
