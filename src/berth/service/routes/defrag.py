"""Defrag plan, admission and host drain routes; `berth.service.defrag` carries plans out.

A plan is created, executed, paused, resumed or cancelled; each step is confirmed or aborted by
the cloud's adapter (docs/service.md, "Defragmentation plans and host drain").
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from pydantic import Field

from berth.service.bodies import cell_dicts
from berth.service.defrag import DefragService
from berth.service.deps import CloudsDep, DefragDep, Operator, Reader
from berth.service.errors import ApiError
from berth.service.schemas import (
    AbortIn,
    AdmissionIn,
    DrainOut,
    ExecuteIn,
    Ident,
    PlanIn,
    PlanOut,
    StepOut,
)
from berth.store.defrag import PlanRow, StepRow
from berth.store.repo import EventRow

router = APIRouter(prefix="/v1", tags=["defrag"])

StepNo = Annotated[int, Field(ge=0, le=1_000_000)]


def _step_out(s: StepRow) -> StepOut:
    fp = s.footprint
    return StepOut(
        step=s.step,
        wave=s.wave,
        instance_id=s.instance_id,
        flavor=s.flavor,
        source=s.source,
        target=s.target,
        planned_target=s.planned_target,
        state=s.state,
        reason=s.reason,
        replans=s.replans,
        cells=cell_dicts(fp),
        host_use=fp["host"],
    )


def plan_out(p: PlanRow, steps: list[StepRow], *, with_steps: bool = True) -> PlanOut:
    by_state: dict[str, int] = {}
    for s in steps:
        by_state[s.state] = by_state.get(s.state, 0) + 1
    return PlanOut(
        id=p.id,
        cluster=p.cluster,
        state=p.state,
        target=p.target,
        budget=p.budget,
        before=p.before,
        after=p.after,
        achieved=p.achieved,
        auto_confirm=p.auto_confirm,
        owner=p.owner,
        reason=p.reason,
        created_by=p.created_by,
        created_at=p.created_at,
        updated_at=p.updated_at,
        migrations=len(steps),
        steps_by_state=by_state,
        steps=[_step_out(s) for s in steps] if with_steps else None,
    )


def _full(service: DefragService, plan: PlanRow) -> PlanOut:
    return plan_out(plan, service.store.steps(plan.id))


@router.post("/defrag/plans", status_code=201, response_model=PlanOut)
def create_plan(body: PlanIn, p: Operator, service: DefragDep) -> PlanOut:
    """Plan live migrations for a cluster (on this replica's current table) and store the plan
    (state `planned`); the answer carries every step and the before/after figures."""
    return _full(service, service.create(body, p.name))


@router.post("/defrag/admissions", status_code=201, response_model=PlanOut)
def create_admission(body: AdmissionIn, p: Operator, service: DefragDep) -> PlanOut:
    """Admission by migration: the fewest live migrations (at most `max_migrations`) after which
    one instance of `flavor` fits on one host of the cluster, stored as a plan (state `planned`;
    execute it like any plan, then place the instance). 409 `fits_already` when it fits as it
    is, 409 `no_admission` when no such migrations exist."""
    return _full(service, service.admit(body, p.name))


@router.get("/defrag/plans", response_model=list[PlanOut])
def list_plans(
    _p: Reader,
    service: DefragDep,
    cluster: Ident | None = None,
    state: Literal["planned", "running", "paused", "cancelled", "done", "failed"] | None = None,
) -> list[PlanOut]:
    """Plans, oldest first, without their steps (`GET /v1/defrag/plans/{id}` has them)."""
    plans = service.store.list_plans(cluster=cluster, states=None if state is None else (state,))
    return [plan_out(pl, service.store.steps(pl.id), with_steps=False) for pl in plans]


@router.get("/defrag/plans/{plan_id}", response_model=PlanOut)
def get_plan(plan_id: Ident, _p: Reader, service: DefragDep) -> PlanOut:
    return _full(service, service.store.get_plan(plan_id))


@router.post("/defrag/plans/{plan_id}/execute", response_model=PlanOut)
def execute_plan(
    plan_id: Ident,
    _p: Operator,
    service: DefragDep,
    clouds: CloudsDep,
    body: ExecuteIn | None = None,
) -> PlanOut:
    """Start carrying out a planned plan (409 `plan_state` otherwise, or when the cluster
    already runs another plan). In a cluster Berth drives, each step is a live migration that
    the cloud confirms (docs/openstack.md): `auto_confirm` is refused there."""
    auto = body.auto_confirm if body is not None else False
    if auto and clouds.drives(service.store.get_plan(plan_id).cluster):
        raise ApiError(
            422,
            "invalid_input",
            "auto_confirm: the cluster is driven through its cloud, whose live migrations "
            "confirm the steps",
            field="auto_confirm",
        )
    return _full(service, service.execute(plan_id, auto))


@router.post("/defrag/plans/{plan_id}/pause", response_model=PlanOut)
def pause_plan(plan_id: Ident, _p: Operator, service: DefragDep) -> PlanOut:
    """No new steps start; steps in flight may still be confirmed or aborted."""
    return _full(service, service.pause(plan_id))


@router.post("/defrag/plans/{plan_id}/resume", response_model=PlanOut)
def resume_plan(plan_id: Ident, _p: Operator, service: DefragDep) -> PlanOut:
    return _full(service, service.resume(plan_id))


@router.post("/defrag/plans/{plan_id}/cancel", response_model=PlanOut)
def cancel_plan(plan_id: Ident, _p: Operator, service: DefragDep) -> PlanOut:
    """No new steps; steps in flight are aborted (their target claims released); steps already
    confirmed stay where they are."""
    return _full(service, service.cancel(plan_id, "cancelled"))


@router.post("/defrag/plans/{plan_id}/steps/{step}/confirm", response_model=StepOut)
def confirm_step(plan_id: Ident, step: StepNo, _p: Operator, service: DefragDep) -> StepOut:
    """The cloud's adapter reports the live migration finished: the instance moves to the target."""
    return _step_out(service.confirm(plan_id, step))


@router.post("/defrag/plans/{plan_id}/steps/{step}/abort", response_model=StepOut)
def abort_step(
    plan_id: Ident, step: StepNo, _p: Operator, service: DefragDep, body: AbortIn | None = None
) -> StepOut:
    """The live migration failed: the target claim is released, the instance stays."""
    reason = body.reason if body is not None else AbortIn().reason
    return _step_out(service.abort(plan_id, step, reason))


def _drain_out(name: str, ev: EventRow) -> DrainOut:
    return DrainOut(
        name=name,
        draining=bool(ev.payload["draining"]),
        enabled=bool(ev.payload["enabled"]),
        generation=int(ev.generation or 0),
    )


@router.put("/hosts/{name}/drain", response_model=DrainOut, tags=["hosts"])
def drain_host(name: Ident, _p: Operator, service: DefragDep) -> DrainOut:
    """Mark a host for drain: no new placements, never a migration target; defrag plans of its
    cluster empty it."""
    return _drain_out(name, service.drain(name, True))


@router.delete("/hosts/{name}/drain", response_model=DrainOut, tags=["hosts"])
def undrain_host(name: Ident, _p: Operator, service: DefragDep) -> DrainOut:
    """The host takes placements again (if enabled)."""
    return _drain_out(name, service.drain(name, False))


@router.get("/defrag/draining", response_model=list[str])
def draining_hosts(_p: Reader, service: DefragDep) -> list[str]:
    """Names of the hosts marked for drain."""
    return sorted(service.store.draining())
