"""Defrag plans and steps as records, their states, and the locked reads and generation bumps
that the plan and step transactions share (`berth.store.defrag`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, update

from berth.store import schema as t
from berth.store.db import Database
from berth.store.errors import NotFoundError, PlanRejectedError, StoreError
from berth.store.footprint import Footprint
from berth.store.records import InstanceRow, instance_row

PLAN_STATES = ("planned", "running", "paused", "cancelled", "done", "failed")
STEP_STATES = ("pending", "migrating", "done", "skipped", "replanned", "aborted")
OPEN_STEPS = ("pending", "replanned")
"""Steps that may still start (a replanned step waits, with its new target, like a pending one)."""
FINAL_STEPS = ("done", "skipped", "aborted")
ACTIVE_PLANS = ("running", "paused")
MIGRATING = "@migrating"


def migration_id(instance_id: str) -> str:
    """The id of the migration allocation that holds `instance_id`'s footprint on its target."""
    return instance_id + MIGRATING


def is_migration(instance_id: str) -> bool:
    return instance_id.endswith(MIGRATING)


def migrating_instance(row_id: str) -> str | None:
    """For a migration allocation's row id, the instance it moves; None for an instance."""
    return row_id.removesuffix(MIGRATING) if is_migration(row_id) else None


class PlanStateError(StoreError):
    """The plan is not in a state that allows this (e.g. executing a cancelled plan)."""

    code = "plan_state"


class StepStateError(StoreError):
    """The step is not in a state that allows this (e.g. confirming a step not migrating)."""

    code = "step_state"


class StepSkippedError(StoreError):
    """The step cannot start for a reason re-planning cannot cure (instance gone or moved)."""

    code = "step_skipped"


class MigrationAllocationError(StoreError):
    """A migration allocation is released by confirming or aborting its step, not directly."""

    code = "migration_allocation"


@dataclass(frozen=True)
class NewStep:
    step: int
    wave: int
    instance_id: str
    flavor: str
    source: str
    target: str
    footprint: Footprint


@dataclass(frozen=True)
class StepRow:
    plan_id: str
    step: int
    wave: int
    instance_id: str
    flavor: str
    source: str
    target: str
    planned_target: str
    footprint: Footprint
    state: str
    reason: str | None
    replans: int
    updated_at: float


@dataclass(frozen=True)
class PlanRow:
    id: str
    cluster: str
    state: str
    target: dict[str, Any]
    budget: dict[str, Any]
    before: dict[str, Any]
    after: dict[str, Any]
    achieved: dict[str, Any] | None
    generations: dict[str, int]
    auto_confirm: bool
    owner: str | None
    lease_until: float | None
    reason: str | None
    created_by: str
    created_at: float
    updated_at: float


def plan_row(r: Any) -> PlanRow:
    return PlanRow(
        id=r.id,
        cluster=r.cluster,
        state=r.state,
        target=r.target,
        budget=r.budget,
        before=r.before,
        after=r.after,
        achieved=r.achieved,
        generations=r.generations,
        auto_confirm=bool(r.auto_confirm),
        owner=r.owner,
        lease_until=None if r.lease_until is None else float(r.lease_until),
        reason=r.reason,
        created_by=r.created_by,
        created_at=float(r.created_at),
        updated_at=float(r.updated_at),
    )


def step_row(r: Any) -> StepRow:
    return StepRow(
        plan_id=r.plan_id,
        step=int(r.step),
        wave=int(r.wave),
        instance_id=r.instance_id,
        flavor=r.flavor,
        source=r.source,
        target=r.target,
        planned_target=r.planned_target,
        footprint=r.footprint,
        state=r.state,
        reason=r.reason,
        replans=int(r.replans),
        updated_at=float(r.updated_at),
    )


class DefragTables:
    """The shared part of the defrag store: the `Database` it writes to, locked reads of plans,
    steps and instances, generation bumps, and the plain reads of plans and steps."""

    def __init__(self, store: Database) -> None:
        self.store = store

    def _locked(self, q: Any) -> Any:
        return q if self.store.sqlite else q.with_for_update()

    def _plan_locked(self, conn: Connection, plan_id: str) -> PlanRow:
        row = conn.execute(
            self._locked(select(t.defrag_plans).where(t.defrag_plans.c.id == plan_id))
        ).first()
        if row is None:
            raise NotFoundError("defrag plan", plan_id)
        return plan_row(row)

    def _step_locked(self, conn: Connection, plan_id: str, step: int) -> StepRow:
        row = conn.execute(
            self._locked(
                select(t.defrag_steps).where(
                    t.defrag_steps.c.plan_id == plan_id, t.defrag_steps.c.step == step
                )
            )
        ).first()
        if row is None:
            raise NotFoundError("step", f"{plan_id}/{step}")
        return step_row(row)

    def _set_step(self, conn: Connection, s: StepRow, **values: Any) -> None:
        conn.execute(
            update(t.defrag_steps)
            .where(t.defrag_steps.c.plan_id == s.plan_id, t.defrag_steps.c.step == s.step)
            .values(updated_at=time.time(), **values)
        )

    def _bump_hosts(self, conn: Connection, bumps: dict[str, int]) -> dict[str, int]:
        """Bump each host's generation by its count, in name order; the generations after."""
        out: dict[str, int] = {}
        for host in sorted(bumps):
            gen = conn.execute(
                update(t.hosts)
                .where(t.hosts.c.name == host)
                .values(generation=t.hosts.c.generation + bumps[host])
                .returning(t.hosts.c.generation)
            ).scalar()
            if gen is None:
                raise PlanRejectedError(f"host {host!r} no longer exists")
            out[host] = int(gen)
        return out

    def _instance(self, conn: Connection, instance_id: str) -> InstanceRow | None:
        row = conn.execute(
            self._locked(select(t.instances).where(t.instances.c.id == instance_id))
        ).first()
        return None if row is None else instance_row(row)

    def get_plan(self, plan_id: str) -> PlanRow:
        with self.store._read() as conn:
            row = conn.execute(select(t.defrag_plans).where(t.defrag_plans.c.id == plan_id)).first()
        if row is None:
            raise NotFoundError("defrag plan", plan_id)
        return plan_row(row)

    def steps(self, plan_id: str) -> list[StepRow]:
        with self.store._read() as conn:
            rows = conn.execute(
                select(t.defrag_steps)
                .where(t.defrag_steps.c.plan_id == plan_id)
                .order_by(t.defrag_steps.c.step)
            )
            return [step_row(r) for r in rows]

    def _get_step(self, plan_id: str, step: int) -> StepRow:
        for s in self.steps(plan_id):
            if s.step == step:
                return s
        raise NotFoundError("step", f"{plan_id}/{step}")

    @staticmethod
    def _row_after(s: StepRow, state: str, reason: str | None) -> StepRow:
        return StepRow(
            s.plan_id,
            s.step,
            s.wave,
            s.instance_id,
            s.flavor,
            s.source,
            s.target,
            s.planned_target,
            s.footprint,
            state,
            reason,
            s.replans,
            time.time(),
        )
