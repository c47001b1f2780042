"""Reading one cluster through openstacksdk: Placement's providers and Nova's listings.

Listings go through the SDK's service proxies (keystoneauth sessions with the microversion
pinned), kept as the API's JSON so that the pure mapping (`fleet`, `servers`) can be tested on
recorded answers. Placement has no call that returns providers with their inventories, so each
provider costs two GETs (inventories, allocations); traits and aggregates are listed per trait
and per aggregate; they all run on a small thread pool.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from openstack.connection import Connection

from berth.cloud.openstack.config import COMPUTE_MICROVERSION, PLACEMENT_MICROVERSION
from berth.cloud.openstack.errors import calling
from berth.cloud.openstack.fleet import NovaHost, Provider

PAGE = 1000
PLACEMENT_THREADS = 8
GET_RETRIES = 2
"""A GET whose connection fails is sent again (a keep-alive connection the server closed
just as it was reused resets; a GET changes nothing, so sending it again is safe)."""


def compute_get(conn: Connection, path: str, **params: Any) -> Any:
    with calling(f"GET {path}"):
        resp = conn.compute.get(
            path,
            params=params or None,
            microversion=COMPUTE_MICROVERSION,
            connect_retries=GET_RETRIES,
        )
        resp.raise_for_status()
        return resp.json()


def placement_get(conn: Connection, path: str, **params: Any) -> Any:
    with calling(f"GET {path}"):
        resp = conn.placement.get(
            path,
            params=params or None,
            microversion=PLACEMENT_MICROVERSION,
            connect_retries=GET_RETRIES,
        )
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


def providers(
    conn: Connection,
    aggregates: Sequence[str] | None = None,
    threads: int = PLACEMENT_THREADS,
    known: Mapping[str, Provider] | None = None,
) -> list[Provider]:
    """Every resource provider with its inventories, allocations, traits and aggregates.

    Placement has no call that lists inventories or allocations of many providers, so each
    provider costs those two GETs (on a thread pool). Traits and aggregates are read the other
    way round when that takes fewer calls: the providers having each trait in use
    (`GET /traits?associated=true`, then `GET /resource_providers?required=T`), and the members
    of each aggregate Nova knows (`aggregates`: their UUIDs; `?member_of=A`). An aggregate only
    Placement knows (not one of Nova's host aggregates) is then not seen: Nova does not
    schedule by it either (docs/openstack.md). `aggregates=None`: each provider's own.

    `known`: providers read before; one whose generation has not moved is not read again
    (Placement moves a provider's generation with every change of its inventories, traits,
    aggregates or allocations).
    """
    listed = placement_get(conn, "/resource_providers")["resource_providers"]
    known = known or {}
    same = {
        rp["uuid"]: old
        for rp in listed
        if (old := known.get(rp["uuid"])) is not None
        and old.generation is not None
        and old.generation == rp.get("generation")
    }
    stale = [rp["uuid"] for rp in listed if rp["uuid"] not in same]

    def get(path: str, key: str, **params: Any) -> Any:
        return placement_get(conn, path, **params)[key]

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        inventories = {
            u: pool.submit(get, f"/resource_providers/{u}/inventories", "inventories")
            for u in stale
        }
        allocations = {
            u: pool.submit(get, f"/resource_providers/{u}/allocations", "allocations")
            for u in stale
        }
        in_use = get("/traits", "traits", associated="true") if stale else []
        traits = _members(pool, get, stale, "traits", "required", in_use)
        aggs = _members(pool, get, stale, "aggregates", "member_of", aggregates)
        out = []
        for rp in listed:
            u = rp["uuid"]
            old = same.get(u)
            out.append(
                Provider(
                    uuid=u,
                    name=rp["name"],
                    root=rp.get("root_provider_uuid") or u,
                    parent=rp.get("parent_provider_uuid"),
                    inventories=old.inventories if old else inventories[u].result(),
                    traits=old.traits if old else sorted(traits[u]),
                    aggregates=old.aggregates if old else sorted(aggs[u]),
                    allocations=old.allocations
                    if old
                    else {c: dict(a["resources"]) for c, a in allocations[u].result().items()},
                    generation=rp.get("generation"),
                )
            )
        return out


def _members(
    pool: ThreadPoolExecutor,
    get: Callable[..., Any],
    uuids: Sequence[str],
    what: str,
    query: str,
    names: Sequence[str] | None,
) -> dict[str, list[str]]:
    """Provider uuid -> its traits or aggregates: one listing per name when there are fewer
    names than providers, else one GET per provider."""
    if not uuids:
        return {}
    if names is None or len(names) >= len(uuids):
        per = [pool.submit(get, f"/resource_providers/{u}/{what}", what) for u in uuids]
        return {u: list(f.result()) for u, f in zip(uuids, per, strict=True)}
    out: dict[str, list[str]] = {u: [] for u in uuids}
    having = [
        pool.submit(get, "/resource_providers", "resource_providers", **{query: n}) for n in names
    ]
    for name, f in zip(names, having, strict=True):
        for rp in f.result():
            if rp["uuid"] in out:  # one made since the first listing is left for the next import
                out[rp["uuid"]].append(name)
    return out


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
