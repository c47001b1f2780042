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
from berth.core.model import DiskKind
from berth.core.resources import C_MEM, C_PCPU, C_VCPU, H_HDD, H_MEM, H_SSD, H_VCPU
from berth.core.table import HostTable


def cells_ok(ok: Mask, fits: Mask, mode: NumaMode, n_cells: np.ndarray) -> Mask:
    """Hosts where no cell (or orientation) that could take the guest breaks Nova's rule.

    `ok[:, k, c]` / `fits[:, k, c]`: guest cell k may go to host cell c by Nova's rule / fits
    there by Berth's columns. SINGLE: no cell fits that Nova's rule forbids; two cells: no
    orientation fits that it forbids. Hosts where nothing fits pass: they are another filter's
    to reject (`numa_topology`), and room made there (defragmentation) may let the guest in."""
    real = np.arange(ok.shape[2])[None, :] < n_cells[:, None]
    if mode == NumaMode.SINGLE:
        single: Mask = ~np.any(fits[:, 0] & real & ~ok[:, 0], axis=1)
        return single
    if ok.shape[1] != 2 or ok.shape[2] != 2:  # k of n cells: no guest cell may land badly
        wide: Mask = ~np.any(fits & real[:, None, :] & ~ok, axis=(1, 2))
        return wide | (n_cells < ok.shape[1])
    straight_ok, swap_ok = ok[:, 0, 0] & ok[:, 1, 1], ok[:, 0, 1] & ok[:, 1, 0]
    straight_fit, swap_fit = fits[:, 0, 0] & fits[:, 1, 1], fits[:, 0, 1] & fits[:, 1, 0]
    bad = (straight_fit & ~straight_ok) | (swap_fit & ~swap_ok)
    return ~(bad & (n_cells >= 2))


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
        """Static: exactly when some flavor of the run is refused by some host."""
        table, flt = work.table, cls()
        for spec in work.flavors:
            d = table.demand(spec.name)
            cpus, memory, disk = flt._host(table, d)
            if not (cpus & memory & disk & flt._cells(table, d)).all():
                return True
        return False

    def per_host_limit(self) -> int | None:
        return None

    def _host(self, table: HostTable, d: Demand) -> tuple[Mask, Mask, Mask]:
        """vCPUs, memory, disk: at most the host's own, where the ratio'd capacity would allow
        more (beyond the capacity, the `vcpu`, `ram` and `disk` filters reject the host)."""
        nom, spec, cap = table.nominal, d.spec, table.host_cap
        cpus = (nom.host_shared >= spec.vcpus) | (cap[:, H_VCPU] < spec.vcpus)
        memory = (nom.host_memory >= spec.memory_mb) | (cap[:, H_MEM] < spec.memory_mb)
        kind = cap[:, H_SSD] if spec.disk_kind == DiskKind.SSD else cap[:, H_HDD]
        disk = (nom.disk_gb >= spec.disk_gb) | (kind < spec.disk_gb)
        if spec.dedicated_cpus:
            cpus = table.everyone()
        if spec.hugepages:
            memory = table.everyone()
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
        """Kept per flavor in the table's `state` cache: it reads only stated sizes and
        capacities, which change only when hosts are added (which drops the cache)."""
        table, d = ctx.table, ctx.demand

        def compute() -> Mask:
            cpus, memory, disk = self._host(table, d)
            ok: Mask = cpus & memory & disk & self._cells(table, d)
            ok.flags.writeable = False  # shared by every decision: read, never write
            return ok

        cached: Mask = table.state(("max_unit", d.spec.name), compute)
        return cached

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
