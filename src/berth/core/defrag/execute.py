"""Carry out or check a plan wave by wave: claim every target of a wave (sources still held),
then release the wave's sources. `apply_moves` is all or nothing; `check_plan` works on a copy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from berth.core.defrag.journal import Journal
from berth.core.defrag.model import Move, Plan
from berth.core.defrag.rules import (
    PlanError,
    TargetRules,
    anti_affinity_ok,
    footprint_error,
    immovable,
)
from berth.core.engine import FilterScheduler
from berth.core.errors import ClaimError
from berth.core.table import HostTable


def waves(moves: Sequence[Move]) -> list[list[Move]]:
    """Consecutive moves grouped by wave number (which must never go down)."""
    out: list[list[Move]] = []
    for move in moves:
        if out and move.wave == out[-1][0].wave:
            out[-1].append(move)
        elif out and move.wave < out[-1][0].wave:
            raise PlanError(move.step, f"wave {move.wave} comes after wave {out[-1][0].wave}")
        else:
            out.append([move])
    return out


def _claim(
    table: HostTable,
    journal: Journal,
    move: Move,
    drain: Iterable[str],
    rules: TargetRules | None,
) -> None:
    step = move.step
    alloc = table.allocations.get(move.instance_id)
    if alloc is None:
        raise PlanError(step, f"instance {move.instance_id!r} is not on the fleet")
    if alloc.host != move.source:
        raise PlanError(
            step, f"instance {move.instance_id!r} is on host {alloc.host!r}, not {move.source!r}"
        )
    if alloc.flavor != move.flavor:
        raise PlanError(
            step, f"instance {move.instance_id!r} has flavor {alloc.flavor!r}, not {move.flavor!r}"
        )
    why = immovable(table, alloc)
    if why is not None:
        raise PlanError(step, why)
    if move.target == move.source:
        raise PlanError(step, f"target host {move.target!r} is the source")
    row = table.index.get(move.target)
    if row is None:
        raise PlanError(step, f"unknown target host {move.target!r}")
    if move.target in drain:
        raise PlanError(step, f"target host {move.target!r} is being drained")
    if not table.enabled[row]:
        raise PlanError(step, f"target host {move.target!r} is disabled")
    if table.zone[row] != table.zone[table.index[alloc.host]]:
        raise PlanError(step, f"target host {move.target!r} is in another availability zone")
    if not anti_affinity_ok(table, alloc, row):
        raise PlanError(
            step,
            f"target host {move.target!r} already holds the most members of anti-affinity "
            f"group {alloc.server_group!r}",
        )
    if rules is not None and not rules.mask(table, alloc)[row]:
        raise PlanError(
            step,
            f"target host {move.target!r} does not pass the scheduler's filters for instance "
            f"{move.instance_id!r} (flavor {alloc.flavor!r})",
        )
    cell_use = np.array(move.cell_use, dtype=np.int64)
    host_use = np.array(move.host_use, dtype=np.int64)
    bad = footprint_error(table, move.flavor, cell_use, host_use)
    if bad is not None:
        raise PlanError(step, f"instance {move.instance_id!r}: {bad}")
    try:
        journal.claim_target(alloc, move.target, cell_use, host_use)
    except ClaimError as exc:
        raise PlanError(step, str(exc)) from None


def run(
    table: HostTable,
    journal: Journal,
    moves: Sequence[Move],
    drain: Iterable[str],
    rules: TargetRules | None = None,
) -> None:
    """Apply `moves` wave by wave through `journal`; raise `PlanError` at the first bad step.

    With `rules`, every target must also pass the scheduler's filters at its claim."""
    drain = frozenset(drain)
    for wave in waves(moves):
        seen: set[str] = set()
        for move in wave:
            if move.instance_id in seen:
                raise PlanError(move.step, f"instance {move.instance_id!r} moves twice in a wave")
            seen.add(move.instance_id)
            _claim(table, journal, move, drain, rules)
        for move in wave:
            journal.release_source(move.instance_id)
        for move in wave:
            journal.finish(move.instance_id)


def apply_moves(table: HostTable, moves: Sequence[Move]) -> None:
    """Apply moves wave by wave, all or nothing.

    On any error the table is restored exactly (allocations, free columns, instance counts,
    server groups and generations) and `PlanError` names the step.
    """
    journal = Journal(table)
    order = list(table.allocations)
    try:
        run(table, journal, moves, ())
    except BaseException:
        journal.rollback()
        restored = {iid: table.allocations[iid] for iid in order}
        table.allocations.clear()
        table.allocations.update(restored)
        raise


def check_budget(plan: Plan) -> None:
    budget = plan.budget
    moves = plan.moves
    if len(moves) > budget.max_migrations:
        raise PlanError(
            budget.max_migrations,
            f"{len(moves)} moves exceed budget.max_migrations={budget.max_migrations}",
        )
    touches: Counter[str] = Counter()
    for i, move in enumerate(moves):
        if move.step != i:
            raise PlanError(i, f"move at position {i} says step {move.step}")
        touches[move.source] += 1
        touches[move.target] += 1
        limit = budget.max_per_host
        for host in (move.source, move.target):
            if limit is not None and touches[host] > limit:
                raise PlanError(
                    i, f"host {host!r} is touched more than budget.max_per_host={limit}"
                )
    for i, wave in enumerate(waves(moves)):
        if wave[0].wave != i:
            raise PlanError(wave[0].step, f"wave {wave[0].wave} should be wave {i}")
        if len(wave) > budget.max_concurrent:
            raise PlanError(
                wave[0].step,
                f"wave {i} has {len(wave)} moves, over budget.max_concurrent="
                f"{budget.max_concurrent}",
            )


def check_plan(
    table: HostTable,
    plan: Plan,
    *,
    scheduler: FilterScheduler | None = None,
    now: float = 0.0,
) -> None:
    """Raise `PlanError` if any intermediate state of `plan` on `table` is invalid.

    Checks the budget, then runs the waves on a copy: every move's instance is where the plan
    says and may move, every target is a different, enabled, non-draining host of the same zone
    with room for the stated (legal) footprint while the wave's sources are still held, and no
    anti-affinity group ever has too many members on a host. With a `scheduler`, every target
    must also pass its filters at `now` (traits, aggregates, PCI, page size, instance limits...)
    on that intermediate state. The table is never changed.
    """
    check_budget(plan)
    scratch = table.copy()
    rules = None
    if scheduler is not None:
        unknown = [h for h in plan.target.drain if h not in table.index]
        if unknown:
            raise PlanError(0, f"target.drain: unknown host {unknown[0]!r}")
        blocked = np.zeros(len(table), dtype=bool)
        blocked[[table.index[h] for h in plan.target.drain]] = True
        rules = TargetRules(scheduler, now, blocked, plan.target.keep_traits)
    run(scratch, Journal(scratch), plan.moves, plan.target.drain, rules)
