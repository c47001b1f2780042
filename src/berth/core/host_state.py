"""Why hosts count for nothing: the scheduler's host-state filters (disabled, down), said once.

A host that a request-independent host-state filter rejects takes no placement, counts no
capacity and receives no migration. A snapshot whose hosts never reported a heartbeat (no
`last_heartbeat`) is the usual surprise: the compute filter counts them down, so every capacity
is 0. `berth validate` and `berth defrag plan` print these notes instead of leaving the zeros
unexplained.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from berth.core.engine import FilterScheduler
from berth.core.filters.base import Context
from berth.core.request import RequestSpec
from berth.core.table import HostTable


@dataclass(frozen=True)
class HostNote:
    """`hosts` (names, in table order) are left out of capacity for `reason`."""

    code: str
    reason: str
    hosts: tuple[str, ...]

    def line(self, total: int, example: int = 3) -> str:
        shown = ", ".join(self.hosts[:example]) + (", ..." if len(self.hosts) > example else "")
        return f"{len(self.hosts)} of {total} hosts count no capacity: {self.reason} ({shown})"


def unavailable_hosts(scheduler: FilterScheduler, table: HostTable, now: float) -> list[HostNote]:
    """The hosts each of the scheduler's static host-state filters rejects at `now`, charged to
    the first filter and reason that rejects them (as `explain.diagnose` does). Hosts that never
    reported a heartbeat get their own note."""
    if not table.flavors or len(table) == 0:
        return []
    flavor = next(iter(table.flavors))
    ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), now)
    remaining = np.ones(len(table), dtype=bool)
    never = np.isnan(table.heartbeat)
    notes: list[HostNote] = []
    for flt in scheduler.filters:
        if flt.kind != "host_state" or not flt.static:
            continue
        failed = remaining & ~flt.mask(ctx)
        if not failed.any():
            continue
        for rejection, rows in flt.explain(ctx, failed):
            rows = rows & failed
            silent = rows & never if rejection.code == "host_down" else np.zeros_like(rows)
            if silent.any():
                notes.append(
                    HostNote(
                        rejection.code,
                        "never reported a heartbeat (no last_heartbeat in the snapshot), so "
                        f"the {flt.name!r} filter counts them down",
                        tuple(table.names[r] for r in np.flatnonzero(silent)),
                    )
                )
            rest = rows & ~silent
            if rest.any():
                notes.append(
                    HostNote(
                        rejection.code,
                        f"{rejection.message} ({flt.name!r} filter)",
                        tuple(table.names[r] for r in np.flatnonzero(rest)),
                    )
                )
        remaining &= ~failed
    return notes
