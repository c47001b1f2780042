"""Regions, clusters (join, leave) and pools."""

from __future__ import annotations

from fastapi import APIRouter

from berth.service import schemas as s
from berth.service.deps import Operator, Reader, ReplicaDep, StoreDep
from berth.service.errors import not_found
from berth.service.replica import Replica
from berth.store.repo import PoolRow, Store

router = APIRouter(prefix="/v1", tags=["topology"])


@router.get("/regions", response_model=list[s.Region])
def list_regions(_p: Reader, store: StoreDep) -> list[s.Region]:
    return [s.Region(**r) for r in store.list_regions()]


@router.post("/regions", status_code=201, response_model=s.Region)
def add_region(body: s.RegionIn, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.Region:
    store.add_region(body.name, body.description)
    replica.sync()
    return s.Region(name=body.name, description=body.description)


def _clusters(store: Store, replica: Replica) -> list[s.Cluster]:
    counts = replica.cluster_hosts()
    return [
        s.Cluster(name=c.name, region=c.region, state=c.state, hosts=counts.get(c.name, 0))
        for c in store.list_clusters()
    ]


@router.get("/clusters", response_model=list[s.Cluster])
def list_clusters(_p: Reader, store: StoreDep, replica: ReplicaDep) -> list[s.Cluster]:
    return _clusters(store, replica)


@router.post("/clusters", status_code=201, response_model=s.Cluster)
def join_cluster(
    body: s.ClusterIn, _p: Operator, store: StoreDep, replica: ReplicaDep
) -> s.Cluster:
    """A new cluster joins at run time (then add its pools and hosts)."""
    store.add_cluster(body.name, body.region)
    replica.sync()
    return s.Cluster(name=body.name, region=body.region, state="active", hosts=0)


def _cluster_state(store: Store, replica: Replica, name: str, state: str) -> s.Cluster:
    store.set_cluster_state(name, state)
    replica.sync()
    for c in _clusters(store, replica):
        if c.name == name:
            return c
    raise not_found("cluster", name)  # pragma: no cover - just set


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
