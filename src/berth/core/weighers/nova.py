"""Nova 34's default weighers, as Nova computes them (the `nova` profile, docs/scheduling.md).

Each reads what Nova's `HostState` holds, which is not what Berth's own weighers read:

* `nova_ram`: free RAM without the allocation ratio, reserved memory counted as used
  (`free_ram_mb`); Berth's `ram` reads the ratio'd free column.
* `nova_cpu`: shared CPUs x ratio less every guest's vCPUs, pinned guests' too (`vcpus_total x
  cpu_allocation_ratio - vcpus_used`); Berth's `vcpu` adds free pinned CPUs instead.
* `nova_disk`: free disk without the ratio, reserved disk counted as used (`free_disk_mb`).
* `nova_io_ops`: the host's reported I/O operations plus one per instance of this request already
  placed there (`consume_from_request` adds one per instance).
* `pci`: ``100 - min(free devices, 99)``: hosts with fewer free PCI devices first, whatever the
  request (`PCIWeigher`).

The first four scale as Nova's `normalize` with ``minval = 0`` (x / max, `HostWeigher.minval`);
`pci` min-max.
"""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, Workload
from berth.core.resources import C_PCPU, CELL_BASE, H_HDD, H_MEM, H_SSD, H_VCPU
from berth.core.weighers.base import F64, I64, HostWeigher


class _XOverMax(HostWeigher):
    """Nova's weighers that scale x / max (``minval = 0``) and weigh every request."""

    minval = 0.0

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True


class NovaRamWeigher(_XOverMax):
    name = "nova_ram"

    def raw(self, ctx: Context, rows: I64) -> F64:
        t, nom = ctx.table, ctx.table.nominal
        used = t.host_cap[rows, H_MEM] - ctx.host_free[rows, H_MEM]
        free = nom.host_memory[rows] - nom.reserved_mb[rows] - used
        return free.astype(np.float64)


class NovaCpuWeigher(_XOverMax):
    name = "nova_cpu"

    def raw(self, ctx: Context, rows: I64) -> F64:
        t, nom = ctx.table, ctx.table.nominal
        shared_used = t.host_cap[rows, H_VCPU] - ctx.host_free[rows, H_VCPU]
        pinned_used = (t.cell_cap[rows, :, C_PCPU] - ctx.cell_free[rows, :, C_PCPU]).sum(axis=1)
        total = nom.host_shared[rows] * nom.cpu_ratio[rows]
        return total - (shared_used + pinned_used).astype(np.float64)


class NovaDiskWeigher(_XOverMax):
    name = "nova_disk"

    def raw(self, ctx: Context, rows: I64) -> F64:
        t, nom = ctx.table, ctx.table.nominal
        cols = [H_HDD, H_SSD]
        used = (t.host_cap[rows][:, cols] - ctx.host_free[rows][:, cols]).sum(axis=1)
        free = nom.disk_gb[rows] - nom.reserved_gb[rows] - used
        return free.astype(np.float64)


class NovaIoOpsWeigher(_XOverMax):
    name = "nova_io_ops"

    def raw(self, ctx: Context, rows: I64) -> F64:
        t = ctx.table
        ops = t.io_ops.astype(np.float64)
        placed = [t.allocations.get(iid) for iid in ctx.request.ids()]
        extra = [t.index[a.host] for a in placed if a is not None]  # this request's claims
        if not extra:
            return ops[rows]
        ops = ops.copy()
        np.add.at(ops, np.array(extra, dtype=np.int64), 1.0)
        return ops[rows]


class PciWeigher(HostWeigher):
    name = "pci"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return bool(work.table.nominal.pci.any())

    def raw(self, ctx: Context, rows: I64) -> F64:
        free = ctx.cell_free[rows, :, CELL_BASE:].sum(axis=(1, 2))
        return (100 - np.minimum(free, 99)).astype(np.float64)
