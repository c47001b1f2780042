"""Free-resource weighers: RAM, vCPU, disk (Nova's RAMWeigher, CPUWeigher, DiskWeigher)."""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context
from berth.core.model import DiskKind
from berth.core.resources import C_PCPU, H_HDD, H_MEM, H_SSD, H_VCPU
from berth.core.weighers.base import F64, I64, HostWeigher


class RamWeigher(HostWeigher):
    """Free RAM. Positive weight spreads (Nova's default), negative packs."""

    name = "ram"

    def raw(self, ctx: Context, rows: I64) -> F64:
        return ctx.host_free[rows, H_MEM].astype(np.float64)


class VcpuWeigher(HostWeigher):
    """Free vCPUs: shared vCPUs plus free pinnable CPUs."""

    name = "vcpu"

    def raw(self, ctx: Context, rows: I64) -> F64:
        cf, hf = ctx.cell_free, ctx.host_free
        free = hf[:, H_VCPU] + cf[:, 0, C_PCPU] + cf[:, 1, C_PCPU]  # contiguous columns
        return free[rows].astype(np.float64)


class DiskWeigher(HostWeigher):
    """Free local disk of the flavor's kind."""

    name = "disk"

    def raw(self, ctx: Context, rows: I64) -> F64:
        col = H_SSD if ctx.demand.spec.disk_kind == DiskKind.SSD else H_HDD
        return ctx.host_free[rows, col].astype(np.float64)
