"""Reading one cluster through openstacksdk: Placement's providers and Nova's listings.

Listings go through the SDK's service proxies (keystoneauth sessions with the microversion
pinned), kept as the API's JSON so that the pure mapping (`fleet`, `servers`) can be tested on
recorded answers. Placement has no call that returns providers with their inventories, so each
provider costs four GETs; they run on a small thread pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from openstack.connection import Connection

from berth.cloud.openstack.config import COMPUTE_MICROVERSION, PLACEMENT_MICROVERSION
from berth.cloud.openstack.errors import calling
from berth.cloud.openstack.fleet import NovaHost, Provider

PAGE = 1000
PLACEMENT_THREADS = 8


def compute_get(conn: Connection, path: str, **params: Any) -> Any:
    with calling(f"GET {path}"):
        resp = conn.compute.get(path, params=params or None, microversion=COMPUTE_MICROVERSION)
        resp.raise_for_status()
        return resp.json()


def placement_get(conn: Connection, path: str, **params: Any) -> Any:
    with calling(f"GET {path}"):
        resp = conn.placement.get(path, params=params or None, microversion=PLACEMENT_MICROVERSION)
        resp.raise_for_status()
        return resp.json()


def paged(conn: Connection, path: str, key: str, **params: Any) -> Iterator[Mapping[str, Any]]:
    """Every item of a Nova listing, page by page (`limit` and `marker`)."""
    marker: str | None = None
    while True:
        query = dict(params, limit=PAGE)
        if marker:
            query["marker"] = marker
        items = compute_get(conn, path, **query)[key]
        yield from items
        if len(items) < PAGE:
            return
        marker = items[-1]["id"]


def providers(conn: Connection, threads: int = PLACEMENT_THREADS) -> list[Provider]:
    listed = placement_get(conn, "/resource_providers")["resource_providers"]

    def one(rp: Mapping[str, Any]) -> Provider:
        base = f"/resource_providers/{rp['uuid']}"
        allocations = placement_get(conn, f"{base}/allocations")["allocations"]
        return Provider(
            uuid=rp["uuid"],
            name=rp["name"],
            root=rp.get("root_provider_uuid") or rp["uuid"],
            parent=rp.get("parent_provider_uuid"),
            inventories=placement_get(conn, f"{base}/inventories")["inventories"],
            traits=placement_get(conn, f"{base}/traits")["traits"],
            aggregates=placement_get(conn, f"{base}/aggregates")["aggregates"],
            allocations={c: dict(a["resources"]) for c, a in allocations.items()},
        )

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        return list(pool.map(one, listed))


def nova_hosts(conn: Connection) -> list[NovaHost]:
    """Compute services with their nodes (one node per service with every virt driver but
    Ironic's; an Ironic service's nodes all carry its host name)."""
    services = {
        s["host"]: s for s in compute_get(conn, "/os-services", binary="nova-compute")["services"]
    }
    out = []
    for h in paged(conn, "/os-hypervisors/detail", "hypervisors"):
        host = (h.get("service") or {}).get("host")
        svc = services.get(host or "")
        if svc is None:
            continue
        out.append(
            NovaHost(
                host=host or h["hypervisor_hostname"],
                node_uuid=h["id"],
                enabled=svc["status"] == "enabled",
                up=svc["state"] == "up" and not svc.get("forced_down", False),
                hypervisor_type=h.get("hypervisor_type") or "kvm",
            )
        )
    return out


def servers(conn: Connection, **filters: Any) -> list[Mapping[str, Any]]:
    return list(paged(conn, "/servers/detail", "servers", all_tenants=1, **filters))


def compute_services(conn: Connection) -> list[Mapping[str, Any]]:
    return list(compute_get(conn, "/os-services", binary="nova-compute")["services"])


def server_groups(conn: Connection) -> list[Mapping[str, Any]]:
    return list(compute_get(conn, "/os-server-groups", all_projects=True)["server_groups"])


def members_of(groups: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Server id -> its server group's id."""
    return {m: g["id"] for g in groups for m in g.get("members") or []}


def group_members(conn: Connection) -> dict[str, str]:
    return members_of(server_groups(conn))


def catalogue(conn: Connection) -> dict[str, list[Mapping[str, Any]]]:
    return {
        "aggregates": compute_get(conn, "/os-aggregates")["aggregates"],
        "flavors": list(paged(conn, "/flavors/detail", "flavors", is_public="None")),
        "groups": server_groups(conn),
    }
