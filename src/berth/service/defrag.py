"""Defragmentation plans in the service: plan on the replica's table, store, carry out, report.

`DefragService` plans with the core planner (`berth.core.defrag.plan_defrag`) on a copy of the
cluster's table, stores the plan (`berth.store.defrag`), and drives running plans step by step:
waves in order, at most `budget.max_concurrent` steps in flight, each step a claim on the target
(`start_step`) and, once the cloud's adapter reports the live migration finished, a confirm
(`POST .../steps/{n}/confirm`) or an abort. With `auto_confirm` the service confirms each step it
started itself (clusters without an adapter, `berth serve --simulate-agents`). A step whose target
no longer fits is re-planned on the replica's current table (`replan_move`), or skipped when
nothing fits -- never forced.

Execution state lives in the database, so any replica resumes a running plan; a lease on the
plan row (owner, expiry) keeps two replicas from driving the same plan at once, and every step
transition is a compare-and-set on the step's state besides.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError

from berth.core.defrag import (
    Budget,
    Move,
    Plan,
    Target,
    apply_moves,
    measure,
    plan_defrag,
    replan_move,
)
from berth.core.defrag.admit import fitting, plan_admission
from berth.core.engine import FilterScheduler
from berth.core.request import RequestSpec
from berth.service.errors import ApiError
from berth.service.replica import ClusterView, Replica
from berth.service.schemas import AdmissionIn, PlanIn, TargetIn
from berth.store.defrag import (
    FINAL_STEPS,
    OPEN_STEPS,
    DefragStore,
    NewStep,
    PlanRow,
    PlanStateError,
    StepRow,
    StepSkippedError,
    StepStateError,
)
from berth.store.errors import NotFoundError, PlanRejectedError
from berth.store.footprint import to_arrays, to_named
from berth.store.repo import EventRow, HostCapacity

log = logging.getLogger("berth.service.defrag")

MAX_REPLANS = 3
"""Times one step is given a new target before it is skipped."""
LEASE_TTL = 30.0
"""Seconds a replica's claim to drive a plan lasts without renewal (its driver renews it)."""


def _check_flavor(view: ClusterView, cluster: str, name: str, where: str) -> None:
    """422 `unknown_flavor` naming the field `where` unless the cluster offers the flavor."""
    if name not in view.table.flavors:
        raise ApiError(
            422,
            "unknown_flavor",
            f"{where}: flavor {name!r} is not offered in {cluster}",
            field=where,
        )


# ---------------------------------------------------------------------------- the service
class DefragService:
    """Plans and carries out defragmentation plans for one replica."""

    def __init__(self, replica: Replica, registry: CollectorRegistry | None = None) -> None:
        self.replica = replica
        self.store = DefragStore(replica.store)
        self.owner = replica.config.replica_id
        self.lease_ttl = LEASE_TTL
        cfg = replica.config.scheduler  # its own scheduler: planning runs outside replica.lock
        params = dict(cfg.filter_params)
        if "compute" in cfg.filters:
            params["compute"] = {
                **params.get("compute", {}),
                "service_down_time": replica.config.service_down_time,
            }
        self.scheduler = FilterScheduler.from_config(
            cfg.model_copy(update={"filter_params": params})
        )
        self._planning = threading.Lock()
        self._driving = threading.Lock()
        self.wake = threading.Event()
        self.migrations = Counter(
            "berth_defrag_migrations",
            "Defrag steps by outcome (started, done, aborted, skipped, replanned)",
            ["outcome"],
            registry=registry,
        )

    # ------------------------------------------------------------------ planning
    def _cluster(self, name: str) -> ClusterView:
        """The replica's view of a cluster (call under the replica's lock), or 422."""
        view = self.replica.clusters.get(name)
        if view is None:
            raise ApiError(
                422, "unknown_cluster", f"cluster: unknown cluster {name!r}", field="cluster"
            )
        return view

    def create(self, body: PlanIn, created_by: str) -> PlanRow:
        r = self.replica
        r.sync()
        with r.lock:
            view = self._cluster(body.cluster)
            for i, name in enumerate(body.target.flavors):
                _check_flavor(view, body.cluster, name, f"target.flavors[{i}]")
            for i, name in enumerate(body.target.drain):
                if name not in view.table.index:
                    where = f"target.drain[{i}]"
                    raise ApiError(
                        422,
                        "unknown_host",
                        f"{where}: no host {name!r} in cluster {body.cluster}",
                        field=where,
                    )
            marked = sorted(h for h in r.draining if h in view.table.index)
            pool_traits = tuple(sorted(set(view.pools.values())))
            table = view.table.copy()
            now = r.clock()
        drain = tuple(dict.fromkeys([*body.target.drain, *marked]))
        try:
            # the cluster's pool traits are kept: an instance never moves to another pool
            target = Target.model_validate(
                {**body.target.model_dump(), "drain": drain, "keep_traits": pool_traits}
            )
            budget = Budget.model_validate(body.budget.model_dump())
        except ValidationError as exc:
            first = exc.errors()[0]
            msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
            where = msg.split(":", 1)[0] if ":" in msg else ""
            field = f"target.{where}" if where in TargetIn.model_fields else "target"
            raise ApiError(422, "invalid_input", f"target: {msg}", field=field) from None
        with self._planning:
            plan = plan_defrag(
                table, target, budget, scheduler=self.scheduler, now=now, seed=body.seed
            )
        return self.store_plan(body.cluster, plan, table.device_types, created_by)

    def admit(self, body: AdmissionIn, created_by: str) -> PlanRow:
        """Plan the few live migrations after which one instance of `body.flavor` fits on one
        host of the cluster (`berth.core.defrag.admit`), and store them as a plan (capacity of
        that flavor, one move per wave). 409 when it fits already or no such moves exist."""
        r = self.replica
        r.sync()
        with r.lock:
            view = self._cluster(body.cluster)
            _check_flavor(view, body.cluster, body.flavor, "flavor")
            pool_traits = tuple(sorted(set(view.pools.values())))
            table = view.table.copy()
            now = r.clock()
        request = RequestSpec(flavor=body.flavor, availability_zone=body.availability_zone)
        room = int(fitting(table, request, self.scheduler, now).sum())
        if room:
            raise ApiError(
                409,
                "fits_already",
                f"flavor: {body.flavor!r} fits on {room} host(s) of {body.cluster} as it is",
                field="flavor",
            )
        with self._planning:
            found = plan_admission(
                table,
                request,
                scheduler=self.scheduler,
                now=now,
                max_migrations=body.max_migrations,
                keep_traits=pool_traits,
            )
        if found is None:
            raise ApiError(
                409,
                "no_admission",
                f"max_migrations: no {body.max_migrations} live migration(s) make room for "
                f"{body.flavor!r} in {body.cluster}",
                field="max_migrations",
            )
        target = Target(flavors=(body.flavor,), keep_traits=pool_traits)
        after = table.copy()
        apply_moves(after, found.moves)
        touched = sorted({h for m in found.moves for h in (m.source, m.target)})
        plan = Plan(
            target=target,
            budget=Budget(max_migrations=len(found.moves), max_concurrent=1),
            moves=found.moves,
            before=measure(table, target, scheduler=self.scheduler, now=now),
            after=measure(after, target, scheduler=self.scheduler, now=now),
            generations={h: int(table.generation[table.index[h]]) for h in touched},
        )
        return self.store_plan(body.cluster, plan, table.device_types, created_by)

    def store_plan(self, cluster: str, plan: Plan, device_types: list[str], who: str) -> PlanRow:
        """Store a plan made elsewhere (tidal consolidation) or here, as `planned`."""
        steps = [
            NewStep(
                m.step,
                m.wave,
                m.instance_id,
                m.flavor,
                m.source,
                m.target,
                to_named(
                    np.array(m.cell_use, dtype=np.int64),
                    np.array(m.host_use, dtype=np.int64),
                    device_types,
                ),
            )
            for m in plan.moves
        ]
        return self.store.create_plan(
            "dp-" + secrets.token_hex(6),
            cluster,
            target=plan.target.model_dump(mode="json"),
            budget=plan.budget.model_dump(mode="json"),
            before=plan.before.model_dump(mode="json"),
            after=plan.after.model_dump(mode="json"),
            generations=dict(plan.generations),
            steps=steps,
            created_by=who,
        )

    # ------------------------------------------------------------------ control
    def execute(self, plan_id: str, auto_confirm: bool) -> PlanRow:
        plan = self.store.transition(plan_id, ("planned",), "running", auto_confirm=auto_confirm)
        self.wake.set()
        return plan

    def pause(self, plan_id: str) -> PlanRow:
        return self.store.transition(plan_id, ("running",), "paused")

    def resume(self, plan_id: str) -> PlanRow:
        plan = self.store.transition(plan_id, ("paused",), "running")
        self.wake.set()
        return plan

    def cancel(self, plan_id: str, reason: str = "cancelled") -> PlanRow:
        plan, events = self.store.cancel_plan(plan_id, reason)
        self._applied(events)
        self.migrations.labels("aborted").inc(len(events))
        return plan

    def confirm(self, plan_id: str, step: int) -> StepRow:
        row, events = self.store.confirm_step(plan_id, step)
        self._applied(events)
        self.migrations.labels(row.state).inc()
        self.wake.set()
        return row

    def abort(self, plan_id: str, step: int, reason: str) -> StepRow:
        row, events = self.store.abort_step(plan_id, step, reason)
        self._applied(events)
        self.migrations.labels("aborted").inc()
        self.wake.set()
        return row

    def drain(self, host: str, draining: bool) -> EventRow:
        ev = self.store.set_draining(host, draining)
        self._applied([ev])
        return ev

    def _applied(self, events: list[EventRow]) -> None:
        with self.replica.lock:
            for ev in events:
                self.replica._apply_own(ev)

    # ------------------------------------------------------------------ driving
    def tick(self) -> int:
        """Advance every running plan this replica may drive; the number of step transitions."""
        done = 0
        with self._driving:
            for plan in self.store.list_plans(states=("running",)):
                if not self.store.acquire(plan.id, self.owner, time.time(), self.lease_ttl):
                    continue
                try:
                    done += self.advance(plan.id)
                except DBAPIError as exc:  # the database is briefly away: next round
                    log.warning("defrag plan %s: %s", plan.id, exc)
                except Exception as exc:  # a bug or a vanished cluster: stop, say why
                    log.exception("defrag plan %s failed", plan.id)
                    with contextlib.suppress(PlanStateError):  # paused or cancelled meanwhile
                        self.store.transition(plan.id, ("running",), "failed", reason=str(exc))
        return done

    def run_until_idle(self, limit: int = 10_000) -> int:
        """Tick until nothing moves (tests and `auto_confirm` demos); transitions made."""
        total = 0
        for _ in range(limit):
            n = self.tick()
            if n == 0:
                break
            total += n
        return total

    def advance(self, plan_id: str) -> int:
        """One round for one plan: confirm (auto), start what the wave and budget allow,
        finish when every step is final."""
        self.replica.sync()
        plan = self.store.get_plan(plan_id)
        if plan.state != "running":
            return 0
        moved = 0
        steps = self.store.steps(plan_id)
        if plan.auto_confirm:
            for s in steps:
                if s.state == "migrating":
                    with contextlib.suppress(StepStateError):  # the adapter was quicker
                        self.confirm(plan_id, s.step)
                    moved += 1
            if moved:
                steps = self.store.steps(plan_id)
        for s in steps:  # a VM deleted mid-migration cannot finish migrating: free its claim
            if s.state == "migrating" and not self._exists(s.instance_id):
                with contextlib.suppress(StepStateError):
                    self.abort(plan_id, s.step, "instance deleted during its migration")
                moved += 1
        if moved:
            steps = self.store.steps(plan_id)
        pending = [s for s in steps if s.state not in FINAL_STEPS]
        if not pending:
            self._finish(plan)
            return moved + 1
        wave = min(s.wave for s in pending)
        flying = sum(1 for s in steps if s.state == "migrating")
        limit = int(plan.budget.get("max_concurrent", 1))
        for s in pending:
            if s.wave != wave or s.state not in OPEN_STEPS:
                continue
            if flying >= limit:
                break
            moved += 1
            if self._start(plan, s):
                flying += 1
        return moved

    def _exists(self, instance_id: str) -> bool:
        try:
            self.replica.store.get_instance(instance_id)
        except NotFoundError:
            return False
        return True

    def _capacity(self, cluster: str, host: str) -> HostCapacity | None:
        view = self.replica.clusters.get(cluster)
        if view is None or host not in view.table.index:
            return None
        t, row = view.table, view.table.index[host]
        return HostCapacity(t.cell_cap[row].copy(), t.host_cap[row].copy(), list(t.device_types))

    def _start(self, plan: PlanRow, s: StepRow) -> bool:
        """Start one step, re-planning it when its target no longer fits; True if started."""
        for _ in range(MAX_REPLANS + 1):
            with self.replica.lock:
                cap = self._capacity(plan.cluster, s.target)
            try:
                if cap is None:
                    raise PlanRejectedError(f"host {s.target!r} is not in cluster {plan.cluster}")
                events = self.store.start_step(plan.id, s.step, cap)
            except StepSkippedError as exc:
                self.store.skip_step(plan.id, s.step, str(exc))
                self.migrations.labels("skipped").inc()
                return False
            except (PlanStateError, StepStateError):
                return False  # paused or cancelled meanwhile, or started by another driver
            except PlanRejectedError as exc:
                if s.replans >= MAX_REPLANS:
                    self.store.skip_step(plan.id, s.step, f"{exc}; re-planned {s.replans} times")
                    self.migrations.labels("skipped").inc()
                    return False
                new = self._replan(plan, s)
                if new is None:
                    self.store.skip_step(plan.id, s.step, f"{exc}; no other host fits")
                    self.migrations.labels("skipped").inc()
                    return False
                s = self.store.replan_step(plan.id, s.step, *new, reason=str(exc))
                self.migrations.labels("replanned").inc()
                continue
            self._applied(events)
            self.migrations.labels("started").inc()
            return True
        return False  # pragma: no cover - the loop returns once replans run out

    def _replan(self, plan: PlanRow, s: StepRow) -> tuple[str, dict[str, Any]] | None:
        """A new (target, footprint) for the step on the replica's current table, or None.

        Hosts the plan empties (the sources of its steps) are never chosen: refilling them
        would undo what the plan is for."""
        r = self.replica
        vacated = frozenset(st.source for st in self.store.steps(plan.id))
        r.sync()
        with r.lock:
            view = r.clusters.get(plan.cluster)
            if view is None:
                return None
            alloc = view.table.allocations.get(s.instance_id)
            if alloc is None or alloc.host != s.source:
                return None
            table = view.table.copy()
            drain = frozenset(h for h in r.draining if h in table.index)
            now = r.clock()
        cell_use, host_use = to_arrays(s.footprint, table.device_types, table.cell_cap.shape[1])
        move = Move(
            step=s.step,
            wave=s.wave,
            instance_id=s.instance_id,
            flavor=s.flavor,
            source=s.source,
            target=s.target,
            cell_use=tuple(tuple(int(x) for x in row) for row in cell_use),
            host_use=tuple(int(x) for x in host_use),
        )
        with self._planning:
            new = replan_move(
                table,
                move,
                scheduler=self.scheduler,
                now=now,
                exclude=vacated,
                drain=drain,
                keep_traits=frozenset(plan.target.get("keep_traits", ())),
            )
        if new is None:
            return None
        fp = to_named(
            np.array(new.cell_use, dtype=np.int64),
            np.array(new.host_use, dtype=np.int64),
            table.device_types,
        )
        return new.target, fp

    def _finish(self, plan: PlanRow) -> None:
        r = self.replica
        with r.lock:
            view = r.clusters.get(plan.cluster)
            table = None if view is None else view.table.copy()
            now = r.clock()
        achieved = None
        if table is not None:
            target = Target.model_validate(plan.target)
            with self._planning:
                figures = measure(table, target, scheduler=self.scheduler, now=now)
            achieved = figures.model_dump(mode="json")
        with contextlib.suppress(PlanStateError):  # paused or cancelled at the last moment
            self.store.transition(plan.id, ("running",), "done", achieved=achieved)


class DefragThread:
    """Drives running plans in the background: on a wake-up (execute, confirm) or every
    `interval` seconds, whichever comes first."""

    def __init__(self, service: DefragService, interval: float = 1.0) -> None:
        self.service = service
        self.interval = interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="berth-defrag", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.service.wake.set()
        self.thread.join(timeout=5)

    def run(self) -> None:
        while not self.stop.is_set():
            self.service.wake.wait(self.interval)
            self.service.wake.clear()
            if self.stop.is_set():
                break
            try:
                while self.service.tick() and not self.stop.is_set():
                    pass
            except Exception as exc:  # the database may be briefly away: keep trying
                log.warning("defrag driver: %s", exc)
                self.stop.wait(1.0)
