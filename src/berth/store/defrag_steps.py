"""The two transactions of a live migration (start, then confirm or abort), re-planning and
skipping steps, and cancelling a plan with its steps in flight (`berth.store.defrag`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import Connection, delete, insert, select, update

from berth.store import schema as t
from berth.store.db import EventItem, bump_group
from berth.store.defrag_rows import (
    ACTIVE_PLANS,
    OPEN_STEPS,
    DefragTables,
    PlanRow,
    PlanStateError,
    StepRow,
    StepSkippedError,
    StepStateError,
    migration_id,
    step_row,
)
from berth.store.errors import PlanRejectedError
from berth.store.footprint import Footprint, sum_footprints
from berth.store.records import EventRow, HostCapacity, InstanceRow


class DefragSteps(DefragTables):
    """Starting, confirming, aborting, re-planning and skipping steps; cancelling a plan."""

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
            inst = self._movable(conn, s)
            mid = migration_id(inst.id)
            group_gen = bump_group(conn, inst.project, inst.server_group)
            generation = _bump_target(conn, s, inst)
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
            return self.store._append(conn, [("instance_claimed", s.target, generation, payload)])

    def _movable(self, conn: Connection, s: StepRow) -> InstanceRow:
        """The step's instance, locked; `StepSkippedError` when it is gone, has moved, is not
        migratable or is migrating already."""
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
        return inst

    def _verify_target(
        self, conn: Connection, s: StepRow, inst: InstanceRow, cap: HostCapacity
    ) -> None:
        rows = conn.execute(
            select(
                t.instances.c.project, t.instances.c.server_group, t.instances.c.placement
            ).where(t.instances.c.host == s.target)
        ).all()
        used_cells, used_host = sum_footprints(
            [r.placement for r in rows] + [s.footprint], cap.device_types, cap.cell_cap.shape[0]
        )
        if (used_cells > cap.cell_cap).any() or (used_host > cap.host_cap).any():
            raise PlanRejectedError(f"instance {inst.id!r} no longer fits on host {s.target!r}")
        if inst.server_group is None:
            return
        group = conn.execute(
            select(t.deployment_sets).where(
                t.deployment_sets.c.project == inst.project,
                t.deployment_sets.c.id == inst.server_group,
            )
        ).first()
        if group is not None and group.policy == "anti-affinity":
            members = sum(
                1 for r in rows if r.project == inst.project and r.server_group == inst.server_group
            )
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
            self._replanned(conn, s, target, footprint, reason)
        return self._get_step(plan_id, step)

    def reopen_step(
        self, plan_id: str, step: int, target: str, footprint: Footprint, reason: str
    ) -> StepRow:
        """Give a step whose live migration failed (`aborted`: its target claim released) a new
        target: it starts again as `replanned`."""
        with self.store._write() as conn:
            self._plan_locked(conn, plan_id)
            s = self._step_locked(conn, plan_id, step)
            if s.state != "aborted":
                raise StepStateError(f"step {step} of {plan_id!r} is {s.state}, not aborted")
            self._replanned(conn, s, target, footprint, reason)
        return self._get_step(plan_id, step)

    def _replanned(
        self, conn: Connection, s: StepRow, target: str, footprint: Footprint, reason: str
    ) -> None:
        """The step starts again toward `target` (state `replanned`, one more replan)."""
        self._set_step(
            conn,
            s,
            state="replanned",
            target=target,
            footprint=footprint,
            reason=reason,
            replans=s.replans + 1,
        )

    def skip_step(self, plan_id: str, step: int, reason: str) -> StepRow:
        with self.store._write() as conn:
            s = self._step_locked(conn, plan_id, step)
            if s.state not in OPEN_STEPS:
                raise StepStateError(f"step {step} of {plan_id!r} is {s.state}")
            self._set_step(conn, s, state="skipped", reason=reason)
        return self._get_step(plan_id, step)

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
            group_gen = bump_group(conn, inst.project, inst.server_group)
            gens = self._bump_hosts(conn, {s.source: 1, s.target: 2})
            conn.execute(delete(t.instances).where(t.instances.c.id == shadow.id))
            conn.execute(
                update(t.instances)
                .where(t.instances.c.id == inst.id)
                .values(host=s.target, placement=s.footprint)
            )
            self._set_step(conn, s, state="done", reason=s.reason)
            items = _moved(s, inst, shadow.id, gens, group_gen)
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
                step_row(r)
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

    def _drop_shadows(self, conn: Connection, steps: Sequence[StepRow]) -> list[EventItem]:
        """Delete the migration allocations of `steps` (those still present), bumping their
        deployment sets, then their target hosts in name order; the events to append."""
        shadows = []
        for s in steps:
            shadow = self._instance(conn, migration_id(s.instance_id))
            if shadow is not None:
                shadows.append(shadow)
        group_gens = {
            (project, gid): bump_group(conn, project, gid)
            for project, gid in sorted(
                {(sh.project, sh.server_group) for sh in shadows if sh.server_group}
            )
        }
        bumps: dict[str, int] = {}
        for sh in shadows:
            bumps[sh.host] = bumps.get(sh.host, 0) + 1
        gens = self._bump_hosts(conn, bumps)
        items: list[EventItem] = []
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
                        "project": sh.project,
                        "server_group": sh.server_group,
                        "group_generation": group_gens.get((sh.project, sh.server_group or "")),
                        "network": None,
                        "evicted": False,
                        "reason": "migration aborted",
                        "plan_id": s.plan_id,
                        "step": s.step,
                    },
                )
            )
        return items


def _moved(
    s: StepRow, inst: InstanceRow, shadow_id: str, gens: dict[str, int], group_gen: int | None
) -> list[EventItem]:
    """A confirmed move's events: the source and the migration allocation released, the
    instance claimed on the target (`gens`: the hosts' generations after the move)."""
    common = {
        "cluster": inst.cluster,
        "project": inst.project,
        "server_group": inst.server_group,
        "group_generation": group_gen,
        "network": inst.network,
        "plan_id": s.plan_id,
        "step": s.step,
    }
    return [
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
                "instance_id": shadow_id,
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


def _bump_target(conn: Connection, s: StepRow, inst: InstanceRow) -> int:
    """Bump the step's target host's generation (locking its row); the generation after.
    `PlanRejectedError` when the host is gone, draining or in another cluster."""
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
    return int(row.generation)
