"""Load weighers: I/O operations in flight and instance count (Nova's IoOps, NumInstances)."""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, Workload
from berth.core.weighers.base import F64, I64, HostWeigher


class IoOpsWeigher(HostWeigher):
    """Reported I/O operations in flight; use a negative weight to prefer idle hosts."""

    name = "io_ops"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def raw(self, ctx: Context, rows: I64) -> F64:
        return ctx.table.io_ops[rows].astype(np.float64)


class NumInstancesWeigher(HostWeigher):
    """Instances already on the host; negative weight spreads, positive packs."""

    name = "num_instances"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def raw(self, ctx: Context, rows: I64) -> F64:
        return ctx.table.n_instances[rows].astype(np.float64)
