"""Free-resource weighers: RAM, vCPU, disk (Nova's RAMWeigher, CPUWeigher, DiskWeigher)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from berth.core.filters.base import Context, Workload
from berth.core.model import DiskKind
from berth.core.resources import C_PCPU, H_HDD, H_MEM, H_SSD, H_VCPU
from berth.core.table import HostTable
from berth.core.table_free import free_vcpus
from berth.core.weighers.base import F64, I64, HostWeigher


class RamWeigher(HostWeigher):
    """Free RAM. Positive weight spreads (Nova's default), negative packs."""

    name = "ram"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def raw(self, ctx: Context, rows: I64) -> F64:
        return self.column(ctx).take(rows).astype(np.float64)

    def column(self, ctx: Context) -> I64:
        return ctx.host_free[:, H_MEM]


class VcpuWeigher(HostWeigher):
    """Free vCPUs: shared vCPUs plus free pinnable CPUs."""

    name = "vcpu"

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._pinned: tuple[I64, bool] | None = None

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def _any_pinned(self, table: HostTable) -> bool:
        """Whether some host has pinnable CPUs, kept while the table's capacity array is the
        same object (claims never change it; adding hosts replaces it)."""
        if self._pinned is None or self._pinned[0] is not table.cell_cap:
            self._pinned = (table.cell_cap, bool(table.cell_cap[:, :, C_PCPU].any()))
        return self._pinned[1]

    def raw(self, ctx: Context, rows: I64) -> F64:
        return self.column(ctx).take(rows).astype(np.float64)

    def column(self, ctx: Context) -> I64:
        if not self._any_pinned(ctx.table):  # free pinnable CPUs are 0 everywhere: x + 0 == x
            return ctx.host_free[:, H_VCPU]
        return free_vcpus(ctx.table)  # kept by the table: claims recompute their hosts only


class DiskWeigher(HostWeigher):
    """Free local disk of the flavor's kind."""

    name = "disk"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def raw(self, ctx: Context, rows: I64) -> F64:
        col = H_SSD if ctx.demand.spec.disk_kind == DiskKind.SSD else H_HDD
        return ctx.host_free[rows, col].astype(np.float64)
