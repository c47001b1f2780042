"""Enough free PCI devices of each requested type on the host (PciPassthroughFilter).

NUMA affinity (devices in the guest's own cell) is the NUMA topology filter's job; this filter
checks the host total, so a host without the devices at all is reported as such.
"""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.resources import CELL_BASE


class PciPassthroughFilter(HostFilter):
    name = "pci_passthrough"
    static = False
    kind = "resource"
    relaxable_by_eviction = True
    implied_by_count = True

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return any(f.pci for f in work.flavors)

    def per_host_limit(self) -> int | None:
        return None

    @staticmethod
    def _want(ctx: Context) -> np.ndarray:
        d = ctx.demand
        return d.pci + d.cells[:, CELL_BASE:].sum(axis=0) if d.cells.size else d.pci

    def mask(self, ctx: Context) -> Mask:
        # the device types and counts depend on the flavor alone: kept per table and flavor
        # (the table's state cache, dropped when a flavor is added or redefined)
        cols, want = ctx.table.state(
            ("pci_passthrough", ctx.demand.spec.name), lambda: self._need(ctx)
        )
        if cols.size == 0:
            return ctx.table.everyone()
        free = ctx.cell_free[:, :, CELL_BASE + cols].sum(axis=1)
        return (free >= want).all(axis=1)

    def _need(self, ctx: Context) -> tuple[np.ndarray, np.ndarray]:
        """(device type columns the flavor asks for, how many of each)."""
        want = self._want(ctx)
        cols = np.flatnonzero(want)
        return cols, want[cols]

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        want = self._want(ctx)
        out = []
        left = failed.copy()
        for p in np.flatnonzero(want):
            device = ctx.table.device_types[p]
            free = ctx.cell_free[:, :, CELL_BASE + p].sum(axis=1)
            bad = left & (free < want[p])
            why = Rejection(
                "insufficient_pci",
                f"fewer than {int(want[p])} free {device} devices",
                f"pci:{device}",
                int(want[p]),
                free.astype(np.float64),
            )
            out.append((why, bad))
            left &= ~bad
        return out
