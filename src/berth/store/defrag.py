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

`DefragStore` is the union of `DefragPlans` (plans, states, leases, drain flags:
`berth.store.defrag_plans`) and `DefragSteps` (the step transactions: `berth.store.defrag_steps`)
over `DefragTables` (records, locked reads, generation bumps: `berth.store.defrag_rows`), as
`Store` is the union of its resource classes (`berth.store.repo`); the records, states and errors
callers use are re-exported here.
"""

from __future__ import annotations

from berth.store.defrag_plans import DefragPlans
from berth.store.defrag_rows import (
    ACTIVE_PLANS,
    FINAL_STEPS,
    MIGRATING,
    OPEN_STEPS,
    PLAN_STATES,
    STEP_STATES,
    MigrationAllocationError,
    NewStep,
    PlanRow,
    PlanStateError,
    StepRow,
    StepSkippedError,
    StepStateError,
    is_migration,
    migrating_instance,
    migration_id,
)
from berth.store.defrag_steps import DefragSteps

__all__ = [
    "ACTIVE_PLANS",
    "FINAL_STEPS",
    "MIGRATING",
    "OPEN_STEPS",
    "PLAN_STATES",
    "STEP_STATES",
    "DefragStore",
    "MigrationAllocationError",
    "NewStep",
    "PlanRow",
    "PlanStateError",
    "StepRow",
    "StepSkippedError",
    "StepStateError",
    "is_migration",
    "migrating_instance",
    "migration_id",
]


class DefragStore(DefragPlans, DefragSteps):
    """Plans, steps and drain flags on top of a `Store` (same engine, same event log)."""
