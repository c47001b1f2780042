"""Classic bin-packing policies as weighers: first-fit, and best/worst fit by leftover.

These exist so that Berth's own policy can be compared with the textbook ones on the same engine
(the simulator's `first_fit`, `best_fit` and `worst_fit` profiles):

* `first_fit`: raw value = minus the host's row (its position in the fleet file). With a
  positive weight the lowest-numbered host that passes the filters wins: first fit.
* `leftover`: raw value = the share of the host's capacity left free after placing the
  instance, summed over the resources the flavor consumes (CPU: shared vCPUs or pinned CPUs;
  memory: small pages or huge pages)::

      leftover(h) = sum_r (free_r(h) - need_r) / cap_r(h)

  A negative weight prefers the host left fullest (best fit); a positive weight the host left
  emptiest (worst fit). Shares make hosts of different sizes comparable. `resources` restricts
  the sum (``[memory]``: best fit on memory alone, the resource that binds on memory-bound
  fleets).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from berth.core.filters.base import Context, Workload
from berth.core.resources import C_HUGE, C_PCPU, H_MEM, H_VCPU
from berth.core.table import HostTable
from berth.core.weighers.base import F64, I64, HostWeigher


class FirstFitWeigher(HostWeigher):
    """Fleet order: the first host (lowest row) that fits wins with a positive weight."""

    name = "first_fit"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def raw(self, ctx: Context, rows: I64) -> F64:
        return -rows.astype(np.float64)


Resource = Literal["cpu", "memory"]


def _both() -> list[Resource]:
    return ["cpu", "memory"]


class LeftoverParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    resources: list[Resource] = Field(default_factory=_both, min_length=1)


class LeftoverWeigher(HostWeigher):
    """Free share left after placing, summed over CPU and memory: -1 best fit, +1 worst fit."""

    name = "leftover"
    Params = LeftoverParams

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._caps: tuple[I64, F64, F64] | None = None

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def _host_caps(self, table: HostTable) -> tuple[F64, F64]:
        """max(cap, 1) of the host vCPU and memory columns, kept while the table's capacity
        array is the same object (claims never change it; adding hosts replaces it). As
        float64: an integer division casts both sides anyway, so the quotients are the same."""
        if self._caps is None or self._caps[0] is not table.host_cap:
            cap = table.host_cap
            self._caps = (
                cap,
                np.maximum(cap[:, H_VCPU], 1).astype(np.float64),
                np.maximum(cap[:, H_MEM], 1).astype(np.float64),
            )
        return self._caps[1], self._caps[2]

    def column(self, ctx: Context) -> F64 | None:
        """The leftover of every host when the flavor uses host columns only (the common
        case): a few passes over contiguous columns cost less than gathering four of them."""
        spec = ctx.demand.spec
        if spec.dedicated_cpus or spec.hugepages:
            return None
        assert isinstance(self.params, LeftoverParams)
        use = self.params.resources
        cpu_cap, mem_cap = self._host_caps(ctx.table)
        free = ctx.host_free
        if "cpu" not in use:
            return (free[:, H_MEM] - spec.memory_mb) / mem_cap
        out = (free[:, H_VCPU] - spec.vcpus) / cpu_cap
        if "memory" in use:
            out += (free[:, H_MEM] - spec.memory_mb) / mem_cap
        return out

    def raw(self, ctx: Context, rows: I64) -> F64:
        every = self.column(ctx)
        if every is not None:
            return every.take(rows)
        spec = ctx.demand.spec
        table = ctx.table
        assert isinstance(self.params, LeftoverParams)
        use = self.params.resources
        cpu, mem = "cpu" in use, "memory" in use
        out = np.zeros(rows.size, dtype=np.float64)
        if cpu:
            if spec.dedicated_cpus:
                free = ctx.cell_free[rows, :, C_PCPU].sum(axis=1)
                cap = table.cell_cap[rows, :, C_PCPU].sum(axis=1)
            else:
                free = ctx.host_free[rows, H_VCPU]
                cap = table.host_cap[rows, H_VCPU]
            out += (free - spec.vcpus) / np.maximum(cap, 1)
        if mem:
            if spec.hugepages:
                free = ctx.cell_free[rows, :, C_HUGE].sum(axis=1)
                cap = table.cell_cap[rows, :, C_HUGE].sum(axis=1)
            else:
                free = ctx.host_free[rows, H_MEM]
                cap = table.host_cap[rows, H_MEM]
            out += (free - spec.memory_mb) / np.maximum(cap, 1)
        return out
