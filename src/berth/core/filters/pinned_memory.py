"""A pinned guest's memory is not over-committed (Nova's NUMA fit).

Nova checks a dedicated-CPU guest cell's memory against the host cell's memory less what every
guest there uses, without the RAM allocation ratio (`_numa_fit_instance_cell`: `avail_memory`),
while shared guests may fill the cell up to memory x ratio. Berth's cell column holds the
ratio'd amount, so on a host with a RAM ratio above 1 this filter adds the plain check. Cells a
guest could be placed in by Berth's rule must all pass (as in `max_unit`); a flexible split
(Berth's own) needs hosts whose cells have no over-commit left.
"""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.filters.max_unit import cells_ok, guest_cells
from berth.core.flavors import NumaMode
from berth.core.resources import C_MEM, C_PCPU


class PinnedMemoryFilter(HostFilter):
    name = "pinned_memory"
    static = False
    kind = "resource"
    relaxable_by_eviction = True
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        """A pinned small-page flavor, and a host whose cell memory is over-committed."""
        if not any(f.dedicated_cpus and not f.hugepages for f in work.flavors):
            return False
        t = work.table
        return bool((t.cell_cap[:, :, C_MEM] > t.nominal.memory).any())

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        d, table = ctx.demand, ctx.table
        if not d.spec.dedicated_cpus or d.spec.hugepages or d.mode == NumaMode.NONE:
            return table.everyone()
        g = guest_cells(d)
        used = table.cell_cap[:, :, C_MEM] - ctx.cell_free[:, :, C_MEM]
        plain = table.nominal.memory - used  # (n, cells): free memory without the ratio
        if d.mode == NumaMode.FLEX:  # Berth's split may take any cell's free memory
            flex: Mask = np.all(plain >= ctx.cell_free[:, :, C_MEM], axis=1)
            return flex
        ok = plain[:, None, :] >= g[None, :, 1, None]
        fits = (ctx.cell_free[:, None, :, C_PCPU] >= g[None, :, 0, None]) & (
            ctx.cell_free[:, None, :, C_MEM] >= g[None, :, 1, None]
        )
        return cells_ok(ok, fits, d.mode, table.n_cells)

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        need = int(guest_cells(ctx.demand)[:, 1].max())
        why = Rejection(
            "pinned_memory",
            f"no NUMA cell has {need} MB free without over-commit for a pinned guest",
            "memory_mb",
            need,
            np.zeros(len(ctx.table)),
        )
        return [(why, failed)]
