"""Instances (list, read, release) and evictions (an operator's release with a reason)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from berth.service import schemas as s
from berth.service.bodies import instance_out
from berth.service.deps import CloudsDep, Operator, ReplicaDep, StoreDep, Who, deny_reader
from berth.service.errors import not_found

router = APIRouter(prefix="/v1", tags=["placement"])


@router.get("/instances", response_model=list[s.InstanceOut])
def list_instances(
    p: Who,
    store: StoreDep,
    host: s.Ident | None = None,
    cluster: s.Ident | None = None,
    project: s.Ident | None = None,
    deployment_set: s.Ident | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    after: s.Ident | None = None,
) -> list[s.InstanceOut]:
    """Instances, by id; page with `after` (the last id seen). Tenants see their own only."""
    visible = p.visible_project()
    if visible is not None:
        if project is not None and project != visible:
            return []
        project = visible
    rows = store.list_instances(
        project=project,
        host=host,
        cluster=cluster,
        server_group=deployment_set,
        limit=limit,
        after=after,
    )
    servers = {r.instance_id: r for r in store.list_servers(instance_ids=[r.id for r in rows])}
    return [instance_out(r, servers.get(r.id)) for r in rows]


@router.get("/instances/{instance_id}", response_model=s.InstanceOut)
def get_instance(instance_id: s.Ident, p: Who, store: StoreDep) -> s.InstanceOut:
    row = store.get_instance(instance_id)
    visible = p.visible_project()
    if visible is not None and row.project != visible:
        raise not_found("instance", instance_id)
    return instance_out(row, store.find_server(row.id))


@router.delete("/instances/{instance_id}", status_code=204)
def delete_instance(
    instance_id: s.Ident, p: Who, replica: ReplicaDep, store: StoreDep, clouds: CloudsDep
) -> Response:
    """Release the instance's claim (its host's generation moves on); in a cluster Berth
    drives, its server is deleted first."""
    deny_reader(p, "delete instances")
    record = store.find_server(instance_id)
    if record is not None and clouds.drives(record.cluster):
        clouds.delete(instance_id, project=p.visible_project())
    else:
        replica.release(instance_id, project=p.visible_project())
    return Response(status_code=204)


@router.get("/evictions", response_model=list[s.EvictionOut])
def list_evictions(
    p: Who, store: StoreDep, limit: Annotated[int, Query(ge=1, le=10_000)] = 1000
) -> list[s.EvictionOut]:
    return [s.EvictionOut(**e) for e in store.list_evictions(p.visible_project(), limit)]


@router.post("/evictions", status_code=201, response_model=s.EvictionOut)
def evict(body: s.EvictionIn, _p: Operator, store: StoreDep, replica: ReplicaDep) -> s.EvictionOut:
    """Evict (release) an instance and record why, so its owner can be told."""
    replica.release(body.instance_id, reason=body.reason)
    found = [e for e in store.list_evictions() if e["instance_id"] == body.instance_id]
    return s.EvictionOut(**found[-1])
