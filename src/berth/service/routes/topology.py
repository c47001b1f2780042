"""Regions, clusters (join, leave) and pools."""

from __future__ import annotations

from fastapi import APIRouter

from berth.service import schemas as s
from berth.service.bodies import server_out
from berth.service.clouds.registry import redacted
from berth.service.clouds.service import CloudService
from berth.service.deps import Admin, CloudsDep, Operator, Reader, ReplicaDep, StoreDep
from berth.service.errors import ApiError, not_found
from berth.service.replica import Replica
from berth.store.repo import CloudClusterRow, PoolRow, Store

router = APIRouter(prefix="/v1", tags=["topology"])


@router.get("/regions", response_model=list[s.Region])
def list_regions(_p: Reader, store: StoreDep) -> list[s.Region]:
    return [s.Region(**r) for r in store.list_regions()]


@router.post("/regions", status_code=201, response_model=s.Region)
def add_region(body: s.RegionIn, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.Region:
    store.add_region(body.name, body.description)
    replica.sync()
    return s.Region(name=body.name, description=body.description)


def _driver_out(row: CloudClusterRow | None) -> s.DriverOut | None:
    if row is None:
        return None
    return s.DriverOut(
        kind=row.kind,
        state=row.state,
        config=redacted(row.config),
        reconciled_at=row.reconciled_at,
    )


def _clusters(store: Store, replica: Replica) -> list[s.Cluster]:
    counts = replica.cluster_hosts()
    clouds = {c.name: c for c in store.list_clouds()}
    return [
        s.Cluster(
            name=c.name,
            region=c.region,
            state=c.state,
            hosts=counts.get(c.name, 0),
            driver=_driver_out(clouds.get(c.name)),
        )
        for c in store.list_clusters()
    ]


def _one(store: Store, replica: Replica, name: str) -> s.Cluster:
    for c in _clusters(store, replica):
        if c.name == name:
            return c
    raise not_found("cluster", name)


@router.get("/clusters", response_model=list[s.Cluster])
def list_clusters(_p: Reader, store: StoreDep, replica: ReplicaDep) -> list[s.Cluster]:
    return _clusters(store, replica)


@router.get("/clusters/{name}", response_model=s.Cluster)
def get_cluster(name: s.Ident, _p: Reader, store: StoreDep, replica: ReplicaDep) -> s.Cluster:
    return _one(store, replica, name)


@router.post("/clusters", status_code=201, response_model=s.Cluster)
def join_cluster(
    body: s.ClusterIn, p: Operator, store: StoreDep, replica: ReplicaDep, clouds: CloudsDep
) -> s.Cluster:
    """A new cluster joins at run time. Without `driver`, add its pools and hosts next; with
    one (admin only), Berth imports the cloud's inventory and drives it (docs/openstack.md)."""
    if body.driver is None:
        store.add_cluster(body.name, body.region)
        replica.sync()
        return s.Cluster(name=body.name, region=body.region, state="active", hosts=0)
    if p.role != "admin":
        raise ApiError(403, "forbidden", f"role {p.role!r} cannot join a cloud cluster")
    clouds.join(body.name, body.region, body.driver.kind, body.driver.config)
    return _one(store, replica, body.name)


@router.delete("/clusters/{name}", response_model=s.Cluster)
def remove_cluster(
    name: s.Ident, _p: Admin, store: StoreDep, replica: ReplicaDep, clouds: CloudsDep
) -> s.Cluster:
    """The cluster leaves: no more placements there, its driver and change feed stop; the
    servers it runs and Berth's records of them stay untouched."""
    _leave(store, clouds, name)
    replica.sync()
    return _one(store, replica, name)


def _leave(store: Store, clouds: CloudService, name: str) -> None:
    if clouds.cloud_of(name) is not None:
        clouds.leave(name)
    else:
        store.set_cluster_state(name, "left")


@router.get("/clusters/{name}/servers", response_model=list[s.ServerOut])
def list_servers(
    name: s.Ident,
    _p: Reader,
    store: StoreDep,
    state: s.Ident | None = None,
) -> list[s.ServerOut]:
    """The servers Berth booted or adopted in a cluster it drives, with their state."""
    store.get_cloud(name)
    return [server_out(r) for r in store.list_servers(name, None if state is None else [state])]


def _cluster_state(store: Store, replica: Replica, name: str, state: str) -> s.Cluster:
    store.set_cluster_state(name, state)
    replica.sync()
    return _one(store, replica, name)


@router.post("/clusters/{name}/leave", response_model=s.Cluster)
def leave_cluster(name: s.Ident, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.Cluster:
    """The cluster gets no more placements; its running instances are untouched."""
    return _cluster_state(store, replica, name, "left")


@router.post("/clusters/{name}/join", response_model=s.Cluster)
def rejoin_cluster(name: s.Ident, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.Cluster:
    return _cluster_state(store, replica, name, "active")


@router.get("/pools", response_model=list[s.Pool])
def list_pools(_p: Reader, store: StoreDep, cluster: s.Ident | None = None) -> list[s.Pool]:
    return [
        s.Pool(cluster=p.cluster, name=p.name, trait=p.trait, description=p.description)
        for p in store.list_pools(cluster)
    ]


@router.post("/pools", status_code=201, response_model=s.Pool)
def add_pool(body: s.PoolIn, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.Pool:
    store.add_pool(PoolRow(body.cluster, body.name, body.trait, body.description))
    replica.sync()
    return s.Pool(**body.model_dump())
