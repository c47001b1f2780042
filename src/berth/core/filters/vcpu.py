"""Enough vCPUs on the host: shared vCPUs with the allocation ratio, or free pinnable CPUs."""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.resources import H_VCPU
from berth.core.table_free import free_pinned


class VcpuFilter(HostFilter):
    name = "vcpu"
    static = False
    kind = "resource"
    relaxable_by_eviction = True
    implied_by_count = True

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def per_host_limit(self) -> int | None:
        return None

    def _free(self, ctx: Context) -> np.ndarray:
        if ctx.demand.spec.dedicated_cpus:  # kept by the table (claims update it)
            return free_pinned(ctx.table)
        return ctx.host_free[:, H_VCPU]

    def mask(self, ctx: Context) -> Mask:
        return self._free(ctx) >= ctx.demand.spec.vcpus

    def host_minimum(self, ctx: Context) -> tuple[int, int] | None:
        spec = ctx.demand.spec
        return None if spec.dedicated_cpus else (H_VCPU, spec.vcpus)

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        need = ctx.demand.spec.vcpus
        kind = "pinned CPUs" if ctx.demand.spec.dedicated_cpus else "vCPUs"
        free = self._free(ctx).astype(np.float64)
        why = Rejection("insufficient_vcpu", f"less than {need} free {kind}", kind, need, free)
        return [(why, failed)]
