"""Re-targeting one planned move on the table as it is now (a target that no longer fits)."""

from __future__ import annotations

import numpy as np

from berth.core.defrag.model import Move
from berth.core.defrag.objective import drain_mask
from berth.core.defrag.rules import TargetRules, immovable
from berth.core.engine import FilterScheduler
from berth.core.table import HostTable


def replan_move(
    table: HostTable,
    move: Move,
    *,
    scheduler: FilterScheduler,
    now: float,
    exclude: frozenset[str] = frozenset(),
    drain: frozenset[str] = frozenset(),
    keep_traits: frozenset[str] = frozenset(),
) -> Move | None:
    """A new target for `move`'s instance on the table as it is now, or None when none fits.

    Same rules as planning (the scheduler's filters, same zone, enabled, not draining, not in
    `exclude`, not the source, the source's subset of `keep_traits` -- pass the plan's
    `target.keep_traits`); among the allowed hosts the tightest fit (fewest further slots of the
    flavor) wins, then the lowest row. None as well when the instance is no longer on the move's
    source or may not move.
    """
    alloc = table.allocations.get(move.instance_id)
    if alloc is None or alloc.host != move.source or immovable(table, alloc) is not None:
        return None
    blocked = drain_mask(table, frozenset(h for h in exclude | drain if h in table.index))
    rows = np.flatnonzero(TargetRules(scheduler, now, blocked, keep_traits).mask(table, alloc))
    if rows.size == 0:
        return None
    fit = table.resource_counts(alloc.flavor)[rows]
    row = int(rows[int(np.argmin(fit))])
    cell_use, host_use = table.plan_for(alloc.flavor, row)
    return Move(
        step=move.step,
        wave=move.wave,
        instance_id=alloc.instance_id,
        flavor=alloc.flavor,
        source=alloc.host,
        target=table.names[row],
        cell_use=tuple(tuple(int(x) for x in c) for c in cell_use),
        host_use=tuple(int(x) for x in host_use),
    )
