"""Stored defrag plans (creating, listing, state transitions, the driver's lease) and the host
drain flags (`berth.store.defrag`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select, update

from berth.store import schema as t
from berth.store.defrag_rows import (
    ACTIVE_PLANS,
    DefragTables,
    NewStep,
    PlanRow,
    PlanStateError,
    StepRow,
    plan_row,
    step_row,
)
from berth.store.errors import NotFoundError
from berth.store.records import EventRow


class DefragPlans(DefragTables):
    """Drain flags, plans and their states; the steps in flight (for `audit`)."""

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
            return [plan_row(r) for r in conn.execute(q.limit(limit))]

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

    def migrating_steps(self) -> list[StepRow]:
        with self.store._read() as conn:
            rows = conn.execute(
                select(t.defrag_steps)
                .where(t.defrag_steps.c.state == "migrating")
                .order_by(t.defrag_steps.c.plan_id, t.defrag_steps.c.step)
            )
            return [step_row(r) for r in rows]
