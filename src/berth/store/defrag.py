"""Stored defragmentation plans, host drain flags, and the two transactions of a live migration.

A plan (`defrag_plans`) holds the planner's target, budget and figures; each move is a row of
`defrag_steps`. Carrying out a step takes two transactions, each bumping the generations of the
hosts it changes and appending the usual events, so every replica's `HostTable` stays exact:

1. `start_step`: the instance's footprint is claimed on the target as a *migration allocation*,
   an instance row `<id>@migrating` (not migratable, not preemptible) while the instance stays on
   the source. Being an ordinary instance row, it is seen by every other claim's re-verification,
   by `audit`, by host decommissioning and by replicas (an `instance_claimed` event). The claim is
   re-verified against the target's rows (capacity, anti-affinity, drain flag); if it no longer
   fits, `PlanRejectedError` is raised and nothing is written (the caller re-plans the step).
2. `confirm_step` (the live migration finished): the source is released, the instance row moves
   to the target with its exact cells and the migration allocation is dropped, all in one
   transaction; or `abort_step`: the migration allocation is released, the instance stays.

A crash between the two leaves the instance held on both hosts: the honest state of a migration
in flight, which `abort_step` or `confirm_step` resolves later. Row locks (plan, then step, then
deployment set, then hosts in name order) serialise a confirm against an abort or a cancel.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from berth.store import schema as t
from berth.store.errors import NotFoundError, PlanRejectedError, StoreError
from berth.store.footprint import Footprint, sum_footprints
from berth.store.records import EventRow, HostCapacity, InstanceRow, instance_row
from berth.store.repo import Store

PLAN_STATES = ("planned", "running", "paused", "cancelled", "done", "failed")
STEP_STATES = ("pending", "migrating", "done", "skipped", "replanned", "aborted")
OPEN_STEPS = ("pending", "replanned")
"""Steps that may still start (a replanned step waits, with its new target, like a pending one)."""
FINAL_STEPS = ("done", "skipped", "aborted")
ACTIVE_PLANS = ("running", "paused")
MIGRATING = "@migrating"

Item = tuple[str, str | None, int | None, dict[str, Any]]


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


def _plan(r: Any) -> PlanRow:
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


def _step(r: Any) -> StepRow:
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


class DefragStore:
    """Plans, steps and drain flags on top of a `Store` (same engine, same event log)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ------------------------------------------------------------------ helpers
    def _locked(self, q: Any) -> Any:
        return q if self.store.sqlite else q.with_for_update()

    def _plan_locked(self, conn: Connection, plan_id: str) -> PlanRow:
        row = conn.execute(
            self._locked(select(t.defrag_plans).where(t.defrag_plans.c.id == plan_id))
        ).first()
        if row is None:
            raise NotFoundError("defrag plan", plan_id)
        return _plan(row)

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
        return _step(row)

    def _set_step(self, conn: Connection, s: StepRow, **values: Any) -> None:
        conn.execute(
            update(t.defrag_steps)
            .where(t.defrag_steps.c.plan_id == s.plan_id, t.defrag_steps.c.step == s.step)
            .values(updated_at=time.time(), **values)
        )

    def _bump_group(self, conn: Connection, gid: str | None) -> int | None:
        if gid is None:
            return None
        gen = conn.execute(
            update(t.deployment_sets)
            .where(t.deployment_sets.c.id == gid)
            .values(generation=t.deployment_sets.c.generation + 1)
            .returning(t.deployment_sets.c.generation)
        ).scalar()
        return None if gen is None else int(gen)

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

    # ------------------------------------------------------------------ drain
    def set_draining(self, host: str, draining: bool) -> EventRow:
        """Mark a host as draining (no new placements, never a migration target) or not.

        Bumps the host's generation, so a placement decided before the flag was seen fails its
        generation check and decides again; the `host_drain` event carries the flag and the
        host's enabled state, from which replicas derive whether the host takes placements.
        """
        with self.store._write() as conn:
            row = conn.execute(
                update(t.hosts)
                .where(t.hosts.c.name == host)
                .values(draining=draining, generation=t.hosts.c.generation + 1)
                .returning(t.hosts.c.generation, t.hosts.c.enabled)
            ).first()
            if row is None:
                raise NotFoundError("host", host)
            payload = {"draining": draining, "enabled": bool(row.enabled)}
            return self.store._append(conn, [("host_drain", host, int(row.generation), payload)])[0]

    def draining(self) -> set[str]:
        with self.store._read() as conn:
            rows = conn.execute(select(t.hosts.c.name).where(t.hosts.c.draining.is_(True)))
            return {r.name for r in rows}

    # ------------------------------------------------------------------ plans
    def create_plan(
        self,
        plan_id: str,
        cluster: str,
        *,
        target: dict[str, Any],
        budget: dict[str, Any],
        before: dict[str, Any],
        after: dict[str, Any],
        generations: dict[str, int],
        steps: Sequence[NewStep],
        created_by: str,
    ) -> PlanRow:
        now = time.time()
        with self.store._write() as conn:
            if not conn.execute(
                select(t.clusters.c.name).where(t.clusters.c.name == cluster)
            ).first():
                raise NotFoundError("cluster", cluster)
            conn.execute(
                insert(t.defrag_plans).values(
                    id=plan_id,
                    cluster=cluster,
                    state="planned",
                    target=target,
                    budget=budget,
                    before=before,
                    after=after,
                    achieved=None,
                    generations=generations,
                    auto_confirm=False,
                    owner=None,
                    lease_until=None,
                    reason=None,
                    created_by=created_by,
                    created_at=now,
                    updated_at=now,
                )
            )
            if steps:
                conn.execute(
                    insert(t.defrag_steps),
                    [
                        {
                            "plan_id": plan_id,
                            "step": s.step,
                            "wave": s.wave,
                            "instance_id": s.instance_id,
                            "flavor": s.flavor,
                            "source": s.source,
                            "target": s.target,
                            "planned_target": s.target,
                            "footprint": s.footprint,
                            "state": "pending",
                            "reason": None,
                            "replans": 0,
                            "updated_at": now,
                        }
                        for s in steps
                    ],
                )
        return self.get_plan(plan_id)

    def get_plan(self, plan_id: str) -> PlanRow:
        with self.store._read() as conn:
            row = conn.execute(select(t.defrag_plans).where(t.defrag_plans.c.id == plan_id)).first()
        if row is None:
            raise NotFoundError("defrag plan", plan_id)
        return _plan(row)

    def list_plans(
        self,
        *,
        cluster: str | None = None,
        states: Sequence[str] | None = None,
        limit: int = 1000,
    ) -> list[PlanRow]:
        q = select(t.defrag_plans).order_by(t.defrag_plans.c.created_at, t.defrag_plans.c.id)
        if cluster is not None:
            q = q.where(t.defrag_plans.c.cluster == cluster)
        if states is not None:
            q = q.where(t.defrag_plans.c.state.in_(list(states)))
        with self.store._read() as conn:
            return [_plan(r) for r in conn.execute(q.limit(limit))]

    def steps(self, plan_id: str) -> list[StepRow]:
        with self.store._read() as conn:
            rows = conn.execute(
                select(t.defrag_steps)
                .where(t.defrag_steps.c.plan_id == plan_id)
                .order_by(t.defrag_steps.c.step)
            )
            return [_step(r) for r in rows]

    def transition(
        self,
        plan_id: str,
        from_states: Sequence[str],
        to: str,
        *,
        reason: str | None = None,
        auto_confirm: bool | None = None,
        achieved: dict[str, Any] | None = None,
    ) -> PlanRow:
        """Move a plan from one of `from_states` to `to` (compare-and-set on the state)."""
        values: dict[str, Any] = {"state": to, "updated_at": time.time()}
        if reason is not None:
            values["reason"] = reason
        if auto_confirm is not None:
            values["auto_confirm"] = auto_confirm
        if achieved is not None:
            values["achieved"] = achieved
        if to not in ACTIVE_PLANS:
            values["owner"] = None
            values["lease_until"] = None
        with self.store._write() as conn:
            plan = self._plan_locked(conn, plan_id)
            if plan.state not in from_states:
                raise PlanStateError(
                    f"defrag plan {plan_id!r} is {plan.state}; this needs one of "
                    f"{', '.join(from_states)}"
                )
            if to == "running" and plan.state == "planned":
                busy = conn.execute(
                    select(t.defrag_plans.c.id).where(
                        t.defrag_plans.c.cluster == plan.cluster,
                        t.defrag_plans.c.state.in_(ACTIVE_PLANS),
                        t.defrag_plans.c.id != plan_id,
                    )
                ).first()
                if busy is not None:
                    raise PlanStateError(
                        f"cluster {plan.cluster!r} already runs defrag plan {busy.id!r}"
                    )
            conn.execute(
                update(t.defrag_plans).where(t.defrag_plans.c.id == plan_id).values(**values)
            )
        return self.get_plan(plan_id)

    def acquire(self, plan_id: str, owner: str, now: float, ttl: float) -> bool:
        """Take (or renew) the right to drive a running plan: free, ours, or lease expired."""
        with self.store._write() as conn:
            res = conn.execute(
                update(t.defrag_plans)
                .where(
                    t.defrag_plans.c.id == plan_id,
                    t.defrag_plans.c.state == "running",
                    (t.defrag_plans.c.owner.is_(None))
                    | (t.defrag_plans.c.owner == owner)
                    | (t.defrag_plans.c.lease_until < now),
                )
                .values(owner=owner, lease_until=now + ttl)
            )
            return int(res.rowcount) == 1

    # ------------------------------------------------------------------ steps
    def start_step(self, plan_id: str, step: int, capacity: HostCapacity) -> list[EventRow]:
        """Claim the instance's footprint on the step's target (transaction 1 of a move).

        Raises `PlanRejectedError` when the target no longer takes it (re-plan), and
        `StepSkippedError` when the instance is gone, has moved or is migrating already.
        """
        now = time.time()
        with self.store._write() as conn:
            plan = self._plan_locked(conn, plan_id)
            if plan.state != "running":
                raise PlanStateError(f"defrag plan {plan_id!r} is {plan.state}, not running")
            s = self._step_locked(conn, plan_id, step)
            if s.state not in OPEN_STEPS:
                raise StepStateError(f"step {step} of {plan_id!r} is {s.state}")
            inst = self._instance(conn, s.instance_id)
            if inst is None:
                raise StepSkippedError(f"instance {s.instance_id!r} no longer exists")
            if inst.host != s.source:
                raise StepSkippedError(
                    f"instance {s.instance_id!r} is on {inst.host!r}, not {s.source!r}"
                )
            if not inst.migratable:
                raise StepSkippedError(f"instance {s.instance_id!r} is not migratable")
            mid = migration_id(inst.id)
            if conn.execute(select(t.instances.c.id).where(t.instances.c.id == mid)).first():
                raise StepSkippedError(f"instance {inst.id!r} is migrating already")
            group_gen = self._bump_group(conn, inst.server_group)
            row = conn.execute(
                update(t.hosts)
                .where(t.hosts.c.name == s.target)
                .values(generation=t.hosts.c.generation + 1)
                .returning(t.hosts.c.generation, t.hosts.c.draining, t.hosts.c.cluster)
            ).first()
            if row is None:
                raise PlanRejectedError(f"host {s.target!r} no longer exists")
            if row.draining:
                raise PlanRejectedError(f"host {s.target!r} is draining")
            if row.cluster != inst.cluster:
                raise PlanRejectedError(f"host {s.target!r} is not in cluster {inst.cluster!r}")
            self._verify_target(conn, s, inst, capacity)
            conn.execute(
                insert(t.instances).values(
                    id=mid,
                    project=inst.project,
                    flavor=inst.flavor,
                    host=s.target,
                    cluster=inst.cluster,
                    server_group=inst.server_group,
                    placement=s.footprint,
                    placement_id=f"defrag:{plan_id}",
                    business_type=inst.business_type,
                    preemptible=False,
                    migratable=False,
                    created_at=now,
                    network=None,
                )
            )
            self._set_step(conn, s, state="migrating")
            payload = {
                "instance_id": mid,
                "cluster": inst.cluster,
                "flavor": inst.flavor,
                "footprint": s.footprint,
                "server_group": inst.server_group,
                "group_generation": group_gen,
                "project": inst.project,
                "placement_id": f"defrag:{plan_id}",
                "preemptible": False,
                "migratable": False,
                "business_type": inst.business_type,
                "network": None,
                "created_at": now,
                "migration_of": inst.id,
                "plan_id": plan_id,
                "step": step,
            }
            return self.store._append(
                conn, [("instance_claimed", s.target, int(row.generation), payload)]
            )

    def _verify_target(
        self, conn: Connection, s: StepRow, inst: InstanceRow, cap: HostCapacity
    ) -> None:
        rows = conn.execute(
            select(t.instances.c.server_group, t.instances.c.placement).where(
                t.instances.c.host == s.target
            )
        ).all()
        used_cells, used_host = sum_footprints(
            [r.placement for r in rows] + [s.footprint], cap.device_types
        )
        if (used_cells > cap.cell_cap).any() or (used_host > cap.host_cap).any():
            raise PlanRejectedError(f"instance {inst.id!r} no longer fits on host {s.target!r}")
        if inst.server_group is None:
            return
        group = conn.execute(
            select(t.deployment_sets).where(t.deployment_sets.c.id == inst.server_group)
        ).first()
        if group is not None and group.policy == "anti-affinity":
            members = sum(1 for r in rows if r.server_group == inst.server_group)
            if members + 1 > group.max_per_host:
                raise PlanRejectedError(
                    f"deployment set {group.id!r} would have {members + 1} members on host "
                    f"{s.target!r}"
                )

    def replan_step(
        self, plan_id: str, step: int, target: str, footprint: Footprint, reason: str
    ) -> StepRow:
        """Give a step that could not start a new target (state `replanned`: it starts again)."""
        with self.store._write() as conn:
            s = self._step_locked(conn, plan_id, step)
            if s.state not in OPEN_STEPS:
                raise StepStateError(f"step {step} of {plan_id!r} is {s.state}")
            self._set_step(
                conn,
                s,
                state="replanned",
                target=target,
                footprint=footprint,
                reason=reason,
                replans=s.replans + 1,
            )
        return self._get_step(plan_id, step)

    def skip_step(self, plan_id: str, step: int, reason: str) -> StepRow:
        with self.store._write() as conn:
            s = self._step_locked(conn, plan_id, step)
            if s.state not in OPEN_STEPS:
                raise StepStateError(f"step {step} of {plan_id!r} is {s.state}")
            self._set_step(conn, s, state="skipped", reason=reason)
        return self._get_step(plan_id, step)

    def _get_step(self, plan_id: str, step: int) -> StepRow:
        for s in self.steps(plan_id):
            if s.step == step:
                return s
        raise NotFoundError("step", f"{plan_id}/{step}")

    def confirm_step(self, plan_id: str, step: int) -> tuple[StepRow, list[EventRow]]:
        """The live migration finished (transaction 2 of a move): release the source, move the
        instance row to the target with its exact cells, drop the migration allocation.

        If the instance was deleted meanwhile, the migration allocation is released and the step
        ends `aborted`."""
        with self.store._write() as conn:
            plan = self._plan_locked(conn, plan_id)
            s = self._step_locked(conn, plan_id, step)
            if s.state != "migrating":
                raise StepStateError(f"step {step} of {plan_id!r} is {s.state}, not migrating")
            if plan.state not in ACTIVE_PLANS:  # pragma: no cover - cancel aborts in-flight steps
                raise PlanStateError(f"defrag plan {plan_id!r} is {plan.state}")
            inst = self._instance(conn, s.instance_id)
            shadow = self._instance(conn, migration_id(s.instance_id))
            if inst is None or shadow is None or inst.host != s.source:
                why = (
                    "instance deleted during its migration"
                    if inst is None
                    else "migration allocation released during the migration"
                    if shadow is None
                    else f"instance moved to {inst.host!r} during its migration"
                )
                dropped = self._drop_shadows(conn, [s])
                self._set_step(conn, s, state="aborted", reason=why)
                events = self.store._append(conn, dropped)
                return self._row_after(s, "aborted", why), events
            group_gen = self._bump_group(conn, inst.server_group)
            gens = self._bump_hosts(conn, {s.source: 1, s.target: 2})
            conn.execute(delete(t.instances).where(t.instances.c.id == shadow.id))
            conn.execute(
                update(t.instances)
                .where(t.instances.c.id == inst.id)
                .values(host=s.target, placement=s.footprint)
            )
            self._set_step(conn, s, state="done", reason=s.reason)
            common = {
                "cluster": inst.cluster,
                "server_group": inst.server_group,
                "group_generation": group_gen,
                "network": inst.network,
                "plan_id": plan_id,
                "step": step,
            }
            items: list[Item] = [
                (
                    "instance_released",
                    s.source,
                    gens[s.source],
                    {**common, "instance_id": inst.id, "evicted": False, "reason": "migrated"},
                ),
                (
                    "instance_released",
                    s.target,
                    gens[s.target] - 1,
                    {
                        **common,
                        "instance_id": shadow.id,
                        "network": None,
                        "evicted": False,
                        "reason": "migration confirmed",
                    },
                ),
                (
                    "instance_claimed",
                    s.target,
                    gens[s.target],
                    {
                        **common,
                        "instance_id": inst.id,
                        "flavor": inst.flavor,
                        "footprint": s.footprint,
                        "project": inst.project,
                        "placement_id": inst.placement_id,
                        "preemptible": inst.preemptible,
                        "migratable": inst.migratable,
                        "business_type": inst.business_type,
                        "created_at": inst.created_at,
                        "migrated_from": s.source,
                    },
                ),
            ]
            events = self.store._append(conn, items)
            return self._row_after(s, "done", s.reason), events

    def abort_step(self, plan_id: str, step: int, reason: str) -> tuple[StepRow, list[EventRow]]:
        """The live migration failed or was called off: release the migration allocation."""
        with self.store._write() as conn:
            self._plan_locked(conn, plan_id)
            s = self._step_locked(conn, plan_id, step)
            if s.state != "migrating":
                raise StepStateError(f"step {step} of {plan_id!r} is {s.state}, not migrating")
            items = self._drop_shadows(conn, [s])
            self._set_step(conn, s, state="aborted", reason=reason)
            return self._row_after(s, "aborted", reason), self.store._append(conn, items)

    def cancel_plan(self, plan_id: str, reason: str) -> tuple[PlanRow, list[EventRow]]:
        """Cancel: steps not started are skipped, steps in flight aborted (their target claims
        released), all in one transaction; steps already confirmed stay done."""
        now = time.time()
        with self.store._write() as conn:
            plan = self._plan_locked(conn, plan_id)
            if plan.state not in ("planned", *ACTIVE_PLANS):
                raise PlanStateError(f"defrag plan {plan_id!r} is {plan.state}; it cannot cancel")
            rows = [
                _step(r)
                for r in conn.execute(
                    self._locked(
                        select(t.defrag_steps)
                        .where(t.defrag_steps.c.plan_id == plan_id)
                        .order_by(t.defrag_steps.c.step)
                    )
                )
            ]
            flying = [s for s in rows if s.state == "migrating"]
            items = self._drop_shadows(conn, flying)
            conn.execute(
                update(t.defrag_steps)
                .where(
                    t.defrag_steps.c.plan_id == plan_id,
                    t.defrag_steps.c.state == "migrating",
                )
                .values(state="aborted", reason=reason, updated_at=now)
            )
            conn.execute(
                update(t.defrag_steps)
                .where(
                    t.defrag_steps.c.plan_id == plan_id,
                    t.defrag_steps.c.state.in_(OPEN_STEPS),
                )
                .values(state="skipped", reason=reason, updated_at=now)
            )
            conn.execute(
                update(t.defrag_plans)
                .where(t.defrag_plans.c.id == plan_id)
                .values(
                    state="cancelled", reason=reason, owner=None, lease_until=None, updated_at=now
                )
            )
            events = self.store._append(conn, items)
        return self.get_plan(plan_id), events

    def _drop_shadows(self, conn: Connection, steps: Sequence[StepRow]) -> list[Item]:
        """Delete the migration allocations of `steps` (those still present), bumping their
        deployment sets, then their target hosts in name order; the events to append."""
        shadows = []
        for s in steps:
            shadow = self._instance(conn, migration_id(s.instance_id))
            if shadow is not None:
                shadows.append(shadow)
        group_gens = {
            gid: self._bump_group(conn, gid)
            for gid in sorted({sh.server_group for sh in shadows if sh.server_group})
        }
        bumps: dict[str, int] = {}
        for sh in shadows:
            bumps[sh.host] = bumps.get(sh.host, 0) + 1
        gens = self._bump_hosts(conn, bumps)
        items: list[Item] = []
        step_of = {migration_id(s.instance_id): s for s in steps}
        for sh in shadows:
            conn.execute(delete(t.instances).where(t.instances.c.id == sh.id))
            bumps[sh.host] -= 1
            s = step_of[sh.id]
            items.append(
                (
                    "instance_released",
                    sh.host,
                    gens[sh.host] - bumps[sh.host],
                    {
                        "instance_id": sh.id,
                        "cluster": sh.cluster,
                        "server_group": sh.server_group,
                        "group_generation": group_gens.get(sh.server_group or ""),
                        "network": None,
                        "evicted": False,
                        "reason": "migration aborted",
                        "plan_id": s.plan_id,
                        "step": s.step,
                    },
                )
            )
        return items

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

    # ------------------------------------------------------------------ audit
    def migrating_steps(self) -> list[StepRow]:
        with self.store._read() as conn:
            rows = conn.execute(
                select(t.defrag_steps)
                .where(t.defrag_steps.c.state == "migrating")
                .order_by(t.defrag_steps.c.plan_id, t.defrag_steps.c.step)
            )
            return [_step(r) for r in rows]
