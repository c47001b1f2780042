"""Deployment sets (server groups): affinity and anti-affinity rules a placement names."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from berth.service import schemas as s
from berth.service.auth import Principal
from berth.service.deps import ReplicaDep, StoreDep, Who, deny_reader
from berth.service.errors import not_found
from berth.service.replica import Replica
from berth.store.repo import GroupRow, Store

router = APIRouter(prefix="/v1", tags=["placement"])


def _set_out(replica: Replica, g: GroupRow) -> s.DeploymentSetOut:
    return s.DeploymentSetOut(
        id=g.id,
        project=g.project,
        policy=g.policy,
        max_per_host=g.max_per_host,
        max_size=g.max_size,
        members=replica.group_members(g.id),
    )


def _visible_set(store: Store, p: Principal, gid: str) -> GroupRow:
    for g in store.list_groups(p.visible_project()):
        if g.id == gid:
            return g
    raise not_found("deployment set", gid)


@router.get("/deployment-sets", response_model=list[s.DeploymentSetOut])
def list_sets(p: Who, store: StoreDep, replica: ReplicaDep) -> list[s.DeploymentSetOut]:
    return [_set_out(replica, g) for g in store.list_groups(p.visible_project())]


@router.post("/deployment-sets", status_code=201, response_model=s.DeploymentSetOut)
def add_set(
    body: s.DeploymentSetIn, p: Who, store: StoreDep, replica: ReplicaDep
) -> s.DeploymentSetOut:
    deny_reader(p, "create deployment sets")
    project = p.project_for(body.project)
    row = GroupRow(body.id, project, body.policy.value, body.max_per_host, body.max_size, 0)
    store.add_group(row)
    replica.sync()
    return _set_out(replica, row)


@router.get("/deployment-sets/{set_id}", response_model=s.DeploymentSetOut)
def get_set(set_id: s.Ident, p: Who, store: StoreDep, replica: ReplicaDep) -> s.DeploymentSetOut:
    return _set_out(replica, _visible_set(store, p, set_id))


@router.delete("/deployment-sets/{set_id}", status_code=204)
def delete_set(set_id: s.Ident, p: Who, store: StoreDep, replica: ReplicaDep) -> Response:
    deny_reader(p, "delete deployment sets")
    _visible_set(store, p, set_id)
    store.delete_group(set_id)
    replica.sync()
    return Response(status_code=204)
