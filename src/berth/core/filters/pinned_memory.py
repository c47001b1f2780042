"""A pinned guest's memory is never over-committed (Nova's NUMA fit, made static).

Nova checks a dedicated-CPU guest cell's memory against the host cell's memory less what every
guest there uses, without the RAM allocation ratio (`_numa_fit_instance_cell`: `avail_memory`),
while shared guests may fill the cell up to memory x ratio. Berth's cell column holds the
ratio'd amount, and its cell rule counts and places by it, so a pinned small-page guest goes
only to hosts whose cell memory is not over-committed (RAM ratio at most 1). Static: capacity
counts stay exact (docs/numa.md). Nova would also place it on an over-committed host while the
plain memory lasts; Berth refuses (docs/scheduling.md).
"""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.resources import C_MEM
from berth.core.table import HostTable


def _overcommitted(table: HostTable) -> Mask:
    """Hosts with some cell's memory over-committed; kept in the table's `state` cache (it
    reads only capacities and stated sizes, which change only when hosts are added, which
    drops the cache)."""

    def compute() -> Mask:
        out: Mask = np.any(table.cell_cap[:, :, C_MEM] > table.nominal.memory, axis=1)
        out.flags.writeable = False  # shared by every decision: read, never write
        return out

    cached: Mask = table.state("pinned_memory.overcommitted", compute)
    return cached


class PinnedMemoryFilter(HostFilter):
    name = "pinned_memory"
    kind = "resource"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        """A pinned small-page flavor, and a host whose cell memory is over-committed."""
        if not any(f.dedicated_cpus and not f.hugepages for f in work.flavors):
            return False
        return bool(_overcommitted(work.table).any())

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        spec = ctx.demand.spec
        if not spec.dedicated_cpus or spec.hugepages:
            return ctx.table.everyone()
        ok: Mask = ~_overcommitted(ctx.table)
        return ok

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        why = Rejection(
            "pinned_memory", "a pinned guest's memory may not be over-committed (RAM ratio > 1)"
        )
        return [(why, failed)]
