"""The guest's NUMA topology fits the host's cells (NUMATopologyFilter, done exactly).

Checks pinned/shared CPUs, small-page or huge-page memory and cell-local PCI devices per cell,
for one guest cell, k even cells, k stated uneven cells, or Berth's flexible split (a flexible
split whose `required` PCI devices must sit in its two cells: on hosts of at most two cells).
Host-wide columns (RAM, vCPU, disk, PCI totals) belong to their own filters.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from berth.core.demand import Demand
from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.flavors import NumaMode
from berth.core.numa import vector, wide
from berth.core.resources import CELL_BASE, cell_resource_name


def page_size_ok(ctx: Context) -> Mask:
    """Hosts whose huge-page size suits the flavor (and divides each guest cell's memory)."""
    return ctx.table.page_size_ok(ctx.demand.spec)


def _flex_local(ctx: Context) -> bool:
    """A flexible split whose devices must sit in its own two cells, on a table wider than two
    cells: refused on hosts of more than two (docs/numa.md, "FLEX on more than two cells")."""
    d = ctx.demand
    return d.mode == NumaMode.FLEX and ctx.table.cell_cap.shape[1] > 2 and wide.local_pci(d)


def _only(d: Demand, columns: list[int]) -> Demand:
    """The same demand restricted to some cell columns (to find which resource fails)."""
    keep = np.zeros(d.cells.shape[1], dtype=bool)
    keep[columns] = True
    return replace(d, cells=d.cells * keep, total=d.total * keep)


class NumaTopologyFilter(HostFilter):
    name = "numa_topology"
    static = False
    kind = "resource"
    relaxable_by_eviction = True
    implied_by_count = True

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return any(f.numa_mode != NumaMode.NONE or f.hugepages for f in work.flavors)

    def per_host_limit(self) -> int | None:
        return None

    def static_part(self, ctx: Context) -> Mask | None:
        if _flex_local(ctx):
            return page_size_ok(ctx) & (ctx.table.n_cells <= 2)
        return page_size_ok(ctx)

    def mask(self, ctx: Context) -> Mask:
        d = ctx.demand
        if d.mode == NumaMode.NONE:
            return ctx.table.everyone()
        fit = ctx.table.cells_fit(d.spec.name)
        if _flex_local(ctx):
            fit = fit & (ctx.table.n_cells <= 2)
        if not d.spec.hugepages:  # small pages suit every host
            return fit
        return fit & page_size_ok(ctx)

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        d = ctx.demand
        spec = d.spec
        out: list[tuple[Rejection, Mask]] = []
        left = failed.copy()
        guest_cells = d.guest_cells
        if guest_cells >= 2:
            few = left & (ctx.table.n_cells < guest_cells)
            why = (
                "host has one NUMA cell, flavor needs two"
                if guest_cells == 2
                else f"host has fewer than {guest_cells} NUMA cells, flavor needs {guest_cells}"
            )
            out.append((Rejection("numa_cells", why), few))
            left &= ~few
        if _flex_local(ctx):
            many = left & (ctx.table.n_cells > 2)
            why = (
                "a flexible split with required PCI devices is placed on hosts of at most two "
                "NUMA cells (docs/numa.md)"
            )
            out.append((Rejection("numa_flex_cells", why), many))
            left &= ~many
        if spec.hugepages:
            bad = left & ~page_size_ok(ctx)
            size = "any" if spec.page_size_kb < 0 else f"{spec.page_size_kb} KB"
            out.append((Rejection("page_size", f"no huge pages of size {size}"), bad))
            left &= ~bad
        for col in np.flatnonzero(d.total):
            alone = _only(d, [int(col)])
            fits = vector.cell_count(alone, ctx.cell_free, limit=1) >= 1
            bad = left & ~fits
            name = cell_resource_name(int(col), ctx.table.device_types)
            need = int(d.cells[:, col].max()) if d.mode != NumaMode.FLEX else int(d.total[col])
            best = ctx.cell_free[:, :, col].max(axis=1).astype(np.float64)
            if d.mode == NumaMode.SINGLE:
                msg = f"no NUMA cell with {need} free {name}"
            elif d.mode == NumaMode.FLEX:
                least = int(d.cells[0, col])
                msg = f"two NUMA cells lack {need} free {name} in all (min {least} each)"
                best = ctx.cell_free[:, :, col].sum(axis=1).astype(np.float64)
            else:
                msg = f"NUMA cells lack {need} free {name} for the guest split"
            code = "numa_pci" if col >= CELL_BASE else "numa_" + name.replace(" ", "_").lower()
            out.append((Rejection(code, msg, name, need, best), bad))
            left &= ~bad
        out.append((Rejection("numa_combined", "no NUMA cell fits all resources together"), left))
        return out
