"""Elastic pools (docs/elastic.md, "API and CLI"): groups and quotas, the global cap, VMs and
their history, the command log, hook runs, host power, the loop's last decision.

Reads take any role but tenant; changes take operator or admin. A group-admin token sees and
changes only its own group: lists are filtered to it, and anything of another group is 403.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from berth.elastic.accounting import Rates, Transition, UsageRow, VmInfo, rows_to_csv, usage
from berth.elastic.commands import CommandKind, CommandState
from berth.elastic.model import TERMINAL, VmState
from berth.service import schemas_elastic as e
from berth.service.auth import Principal, require, require_group
from berth.service.deps import Elastic, ReplicaDep, StoreDep
from berth.service.errors import ApiError
from berth.service.schemas import Ident
from berth.store.elastic_rows import ElasticLimits
from berth.store.repo import Store

router = APIRouter(prefix="/v1/elastic", tags=["elastic"])
LIVE = [s for s in VmState if s not in TERMINAL]


def _scope(p: Principal, group: str | None) -> str | None:
    """The group a read is limited to: a group-admin token's own, else what was asked."""
    if p.role == "group-admin":
        require_group(p, group)
        return p.elastic_group
    return group


def _live_counts(store: Store) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for vm in store.list_vms(states=LIVE):
        by = out.setdefault(vm.group, {})
        by[vm.state.value] = by.get(vm.state.value, 0) + 1
    return out


# ---------------------------------------------------------------------------- groups
@router.get("/groups", response_model=list[e.GroupOut])
def list_groups(p: Elastic, store: StoreDep) -> list[e.GroupOut]:
    only = _scope(p, None)
    counts = _live_counts(store)
    return [
        e.GroupOut.of(g, counts.get(g.name, {}))
        for g in store.list_elastic_groups()
        if only is None or g.name == only
    ]


@router.get("/groups/{group}", response_model=e.GroupOut)
def get_group(group: Ident, p: Elastic, store: StoreDep) -> e.GroupOut:
    require_group(p, group)
    return e.GroupOut.of(store.get_elastic_group(group), _live_counts(store).get(group, {}))


@router.put("/groups/{group}", response_model=e.GroupOut)
def put_group(group: Ident, body: e.GroupIn, p: Elastic, store: StoreDep) -> e.GroupOut:
    """Create or replace a group (quotas apply from the next cycle; its VMs keep running). A
    group-admin token may change its own group only."""
    require_group(p, group, write=True)
    if p.role == "group-admin":
        store.get_elastic_group(group)  # it may not create groups
    row = store.put_elastic_group(body.to_spec(group), cluster=body.cluster)
    return e.GroupOut.of(row, _live_counts(store).get(group, {}))


@router.delete("/groups/{group}", status_code=204)
def delete_group(group: Ident, p: Elastic, store: StoreDep) -> Response:
    """Remove a group with no live VM (409 `in_use` otherwise)."""
    require(p, write=True)
    store.delete_elastic_group(group)
    return Response(status_code=204)


@router.get("/limits", response_model=e.LimitsOut)
def get_limits(_p: Elastic, store: StoreDep) -> e.LimitsOut:
    lim = store.elastic_limits()
    return e.LimitsOut(max_vms=lim.max_vms, max_cores=lim.max_cores)


@router.put("/limits", response_model=e.LimitsOut)
def put_limits(body: e.LimitsIn, p: Elastic, store: StoreDep) -> e.LimitsOut:
    """The global cap over every group (null: none)."""
    require(p, write=True)
    lim = store.set_elastic_limits(ElasticLimits(body.max_vms, body.max_cores))
    return e.LimitsOut(max_vms=lim.max_vms, max_cores=lim.max_cores)


# ---------------------------------------------------------------------------- VMs
@router.get("/vms", response_model=list[e.VmOut])
def list_vms(
    p: Elastic,
    store: StoreDep,
    group: Ident | None = None,
    state: Annotated[list[VmState] | None, Query(max_length=10)] = None,
    live: bool = False,
) -> list[e.VmOut]:
    """VMs, oldest request first; `live` keeps those not retired, failed or lost."""
    states = state if state else (LIVE if live else None)
    return [e.VmOut.of(v) for v in store.list_vms(_scope(p, group), states)]


@router.get("/vms/{name}", response_model=e.VmOut)
def get_vm(name: Ident, p: Elastic, store: StoreDep) -> e.VmOut:
    vm = store.get_vm(name)
    require_group(p, vm.group)
    return e.VmOut.of(vm)


@router.get("/vms/{name}/history", response_model=list[e.StateChangeOut])
def vm_history(name: Ident, p: Elastic, store: StoreDep) -> list[e.StateChangeOut]:
    require_group(p, store.get_vm(name).group)
    return [e.StateChangeOut.of(c) for c in store.vm_history(vm=name)]


@router.post("/vms/{name}/commands", status_code=201, response_model=e.CommandOut)
def issue_command(
    name: Ident, body: e.CommandIn, p: Elastic, store: StoreDep, replica: ReplicaDep
) -> e.CommandOut:
    """Issue a command to the VM's agent (an open one of the same kind is returned instead).
    `leave` moves a joined VM to draining at once; a finished VM takes none (409 `vm_state`)."""
    require_group(p, store.get_vm(name).group, write=True)
    cmd = store.issue_command(
        name, CommandKind(body.kind), replica.clock(), args=dict(body.args), by=p.name
    )
    return e.CommandOut.of(cmd)


# ---------------------------------------------------------------------------- logs
@router.get("/commands", response_model=list[e.CommandOut])
def list_commands(
    p: Elastic,
    store: StoreDep,
    vm: Ident | None = None,
    group: Ident | None = None,
    state: Annotated[list[CommandState] | None, Query(max_length=4)] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[e.CommandOut]:
    """The command log, oldest first (the latest `limit`)."""
    group = _scope(p, group)
    if vm is not None and p.role == "group-admin":
        require_group(p, store.get_vm(vm).group)
    rows = store.list_commands(vm=vm, group=group, states=state, limit=limit)
    return [e.CommandOut.of(c) for c in rows]


@router.get("/hooks", response_model=list[e.HookRunOut])
def hook_runs(
    p: Elastic,
    store: StoreDep,
    vm: Ident | None = None,
    event: Annotated[str | None, Query(pattern="^(join|leave)$")] = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[e.HookRunOut]:
    """Join and leave hook runs with their outcome and output tail (the latest `limit`)."""
    if p.role == "group-admin":
        if vm is None:
            raise ApiError(
                422, "invalid_input", "vm: a group-admin token must name a VM", field="vm"
            )
        require_group(p, store.get_vm(vm).group)
    return [e.HookRunOut(**vars(r)) for r in store.hook_runs(vm=vm, event=event, limit=limit)]


@router.get("/accounting", response_model=None)
def accounting(
    p: Elastic,
    store: StoreDep,
    replica: ReplicaDep,
    group: Ident | None = None,
    since: Annotated[float | None, Query(ge=0, le=1e11)] = None,
    until: Annotated[float | None, Query(ge=0, le=1e11)] = None,
    per_vm_hour: Annotated[float, Query(ge=0, le=1e6)] = 0.0,
    per_core_hour: Annotated[float, Query(ge=0, le=1e6)] = 1.0,
    per_gb_hour: Annotated[float, Query(ge=0, le=1e6)] = 0.0,
    format: Annotated[str, Query(pattern="^(json|csv)$")] = "json",
) -> Any:
    """VM-hours, CPU-hours, memory GB-hours and points per day and group from the state
    history (`berth.elastic.accounting`): a VM counts from booting until it is retired, failed
    or lost; a live one up to `until` (default: now). Rows of days before `since` are left out.
    `format=csv` answers text/csv."""
    group = _scope(p, group)
    end = replica.clock() if until is None else until
    rows = usage_rows(store, replica, group, end, Rates(per_vm_hour, per_core_hour, per_gb_hour))
    if since is not None:
        first = datetime.fromtimestamp(since, UTC).date().isoformat()
        rows = [r for r in rows if r.day >= first]
    if format == "csv":
        return Response(rows_to_csv(rows), media_type="text/csv")
    return [r.as_dict() for r in rows]


def usage_rows(
    store: Store, replica: Any, group: str | None, until: float, rates: Rates
) -> list[UsageRow]:
    history = store.vm_history(until=until, group=group)
    flavors = {g.name: g.spec.flavor for g in store.list_elastic_groups()}
    infos: dict[str, VmInfo] = {}
    for c in history:
        if c.vm not in infos:
            flavor = flavors.get(c.group, "")
            known = replica.flavors.get(flavor)
            memory = 0 if known is None else int(known.memory_mb)
            infos[c.vm] = VmInfo(c.vm, c.group, c.cores, memory, flavor)
    moves = [Transition(c.vm, c.state, c.at) for c in history]
    return usage(moves, infos, rates, until=until)


@router.get("/power", response_model=list[e.PowerOut])
def host_power(p: Elastic, store: StoreDep) -> list[e.PowerOut]:
    """Hosts whose power Berth changed (tidal management); any host not listed is on."""
    require(p)
    return [e.PowerOut(**vars(r)) for r in store.host_power_states()]


@router.get("/decision")
def last_decision(p: Elastic, request: Request) -> dict[str, Any]:
    """The control loop's last decision on this replica: actions with reasons, and per group
    what it needed, got, and which rule held the rest back (404 without a running loop)."""
    loop = getattr(request.app.state, "elastic", None)
    if loop is None or loop.last is None:
        raise ApiError(404, "not_found", "no elastic control loop has decided on this replica")
    only = _scope(p, None)
    return decision_json(loop.last, only)


def decision_json(decision: Any, only: str | None) -> dict[str, Any]:
    actions = []
    for a in decision.actions:
        if only is not None and a.group != only:
            continue
        item = {k: v for k, v in vars(a).items() if k != "reason"}
        item["action"] = type(a).__name__.lower()
        item["reason"] = {"code": a.reason.code.value, "message": a.reason.message}
        actions.append({k: (v.value if hasattr(v, "value") else v) for k, v in item.items()})
    groups = [
        {
            **{k: v for k, v in vars(r).items() if k != "notes"},
            "notes": [{"code": n.code.value, "message": n.message, "vms": n.vms} for n in r.notes],
        }
        for r in decision.groups
        if only is None or r.group == only
    ]
    return {"now": decision.now, "actions": actions, "groups": groups}
