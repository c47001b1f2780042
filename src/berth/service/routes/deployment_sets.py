"""Deployment sets (server groups): affinity and anti-affinity rules a placement names.

A set belongs to a project and is known by (project, id): projects A and B may each have a set
`web`, and they are two sets. To a tenant another project's set is exactly a missing one: the
same 404 on read and delete, and creating a set of an id another project uses just works.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from berth.service import schemas as s
from berth.service.auth import Principal
from berth.service.deps import ReplicaDep, StoreDep, Who, deny_reader
from berth.service.errors import ApiError, not_found
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
        members=replica.group_members(g.key),
    )


def _visible_set(store: Store, p: Principal, gid: str, project: str | None) -> GroupRow:
    """The set `gid` of `project` (a tenant: its own project; another one it names is a
    missing set). Without `project`, an operator gets the one set of that id; several
    projects having one is a 422 asking for `project`."""
    visible = p.visible_project()
    if visible is not None and project not in (None, visible):
        raise not_found("deployment set", gid)
    found = [g for g in store.list_groups(visible or project) if g.id == gid]
    if not found:
        raise not_found("deployment set", gid)
    if len(found) > 1:
        projects = ", ".join(sorted(g.project for g in found))
        raise ApiError(
            422,
            "invalid_input",
            f"project: deployment set {gid!r} exists in projects {projects}; name one",
            field="project",
        )
    return found[0]


@router.get("/deployment-sets", response_model=list[s.DeploymentSetOut])
def list_sets(
    p: Who, store: StoreDep, replica: ReplicaDep, project: s.Ident | None = None
) -> list[s.DeploymentSetOut]:
    """The sets the caller may see (a tenant: its project's), of `project` if named."""
    visible = p.visible_project()
    if visible is not None and project not in (None, visible):
        return []
    return [_set_out(replica, g) for g in store.list_groups(visible or project)]


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
def get_set(
    set_id: s.Ident, p: Who, store: StoreDep, replica: ReplicaDep, project: s.Ident | None = None
) -> s.DeploymentSetOut:
    return _set_out(replica, _visible_set(store, p, set_id, project))


@router.delete("/deployment-sets/{set_id}", status_code=204)
def delete_set(
    set_id: s.Ident, p: Who, store: StoreDep, replica: ReplicaDep, project: s.Ident | None = None
) -> Response:
    deny_reader(p, "delete deployment sets")
    g = _visible_set(store, p, set_id, project)
    store.delete_group(g.project, g.id)
    replica.sync()
    return Response(status_code=204)
