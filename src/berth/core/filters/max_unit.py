"""A guest never over-commits against itself (Placement's `max_unit`, Nova's NUMA fit).

Allocation ratios let many guests share a CPU or a MB, never one guest take more than the host
has: its vCPUs at most the host's shared CPUs (the VCPU inventory's `max_unit`), its memory at
most the host's memory (MEMORY_MB's), its disk at most the host's disk (DISK_GB's); each guest
NUMA cell at most its host cell's shared CPUs and memory (`nova/virt/hardware.py`,
`_numa_fit_instance_cell`). It reads only the stated sizes (`nominal`), so it is static.

On a host whose cells differ, Berth's cell rule (docs/numa.md) could choose a cell the guest
over-commits: such a host passes only when every cell that could hold the guest is big enough
(Nova would use the big cell; Berth then refuses the host, docs/scheduling.md).
"""

from __future__ import annotations

import numpy as np

from berth.core.demand import Demand
from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.flavors import NumaMode
from berth.core.resources import C_MEM, C_PCPU, C_VCPU
from berth.core.table import HostTable


def cells_ok(ok: Mask, fits: Mask, mode: NumaMode, n_cells: np.ndarray) -> Mask:
    """Hosts where the guest's cells go only where Nova's per-cell rule allows.

    `ok[:, k, c]` / `fits[:, k, c]`: guest cell k may go to host cell c by Nova's rule / fits
    there by Berth's columns. SINGLE: some allowed cell fits and no forbidden one does; two
    cells: some orientation is allowed and fits, and no forbidden one fits."""
    real = np.arange(ok.shape[2])[None, :] < n_cells[:, None]
    if mode == NumaMode.SINGLE:
        good, cand = ok[:, 0] & real, fits[:, 0] & real
        out: Mask = np.any(good & cand, axis=1) & ~np.any(cand & ~good, axis=1)
        return out
    straight_ok, swap_ok = ok[:, 0, 0] & ok[:, 1, 1], ok[:, 0, 1] & ok[:, 1, 0]
    straight_fit, swap_fit = fits[:, 0, 0] & fits[:, 1, 1], fits[:, 0, 1] & fits[:, 1, 0]
    some = (straight_ok & straight_fit) | (swap_ok & swap_fit)
    bad = (straight_fit & ~straight_ok) | (swap_fit & ~swap_ok)
    return (n_cells >= 2) & some & ~bad


def guest_cells(d: Demand) -> np.ndarray:
    """(guest cells, 2): vCPUs and memory of each guest cell (a flexible split: its minimums)."""
    spec = d.spec
    return np.array([(c.vcpus, c.memory_mb) for c in spec.cells], dtype=np.int64)


class MaxUnitFilter(HostFilter):
    name = "max_unit"
    kind = "resource"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def per_host_limit(self) -> int | None:
        return None

    def _host(self, table: HostTable, d: Demand) -> tuple[Mask, Mask, Mask]:
        nom, spec = table.nominal, d.spec
        cpus = nom.host_shared >= spec.vcpus if not spec.dedicated_cpus else table.everyone()
        memory = nom.host_memory >= spec.memory_mb if not spec.hugepages else table.everyone()
        disk = nom.disk_gb >= spec.disk_gb
        return cpus, memory, disk

    def _cells(self, table: HostTable, d: Demand) -> Mask:
        if d.mode in (NumaMode.NONE, NumaMode.FLEX):  # FLEX: Berth's own split, within cells
            return table.everyone()
        spec, nom = d.spec, table.nominal
        g = guest_cells(d)  # (k, 2)
        ok = np.ones((len(table), g.shape[0], nom.shared.shape[1]), dtype=bool)
        if not spec.dedicated_cpus:
            ok &= nom.shared[:, None, :] >= g[None, :, 0, None]
        if not spec.hugepages:
            ok &= nom.memory[:, None, :] >= g[None, :, 1, None]
        cpu = C_PCPU if spec.dedicated_cpus else C_VCPU
        fits = table.cell_cap[:, None, :, cpu] >= g[None, :, 0, None]
        if not spec.hugepages:
            fits &= table.cell_cap[:, None, :, C_MEM] >= g[None, :, 1, None]
        return cells_ok(ok, fits, d.mode, table.n_cells)

    def mask(self, ctx: Context) -> Mask:
        cpus, memory, disk = self._host(ctx.table, ctx.demand)
        return cpus & memory & disk & self._cells(ctx.table, ctx.demand)

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        spec, nom = ctx.demand.spec, ctx.table.nominal
        cpus, memory, disk = self._host(ctx.table, ctx.demand)
        out = []
        left = failed.copy()
        for ok, code, msg, res, need, have in (
            (cpus, "max_unit_vcpu", "vCPUs", "vcpus", spec.vcpus, nom.host_shared),
            (memory, "max_unit_ram", "MB of RAM", "ram_mb", spec.memory_mb, nom.host_memory),
            (disk, "max_unit_disk", "GB of disk", "disk_gb", spec.disk_gb, nom.disk_gb),
        ):
            bad = left & ~ok
            text = f"guest needs {need} {msg}, more than the host has"
            out.append((Rejection(code, text, res, need, have.astype(np.float64)), bad))
            left &= ~bad
        why = "a guest NUMA cell needs more CPUs or memory than its host cell has"
        out.append((Rejection("max_unit_numa_cell", why), left))
        return out
