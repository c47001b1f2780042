"""Enough small-page RAM on the host, allocation ratio and reserve applied (Nova's RamFilter)."""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.resources import H_MEM


class RamFilter(HostFilter):
    name = "ram"
    static = False
    kind = "resource"
    relaxable_by_eviction = True
    implied_by_count = True

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        need = ctx.demand.host[H_MEM]
        if need == 0:
            return ctx.table.everyone()
        return ctx.host_free[:, H_MEM] >= need

    def host_minimum(self, ctx: Context) -> tuple[int, int] | None:
        need = int(ctx.demand.host[H_MEM])
        return None if need == 0 else (H_MEM, need)  # no need: `mask` passes everyone, free

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        need = int(ctx.demand.host[H_MEM])
        free = ctx.host_free[:, H_MEM].astype(np.float64)
        why = Rejection("insufficient_ram", f"less than {need} MB free RAM", "ram_mb", need, free)
        return [(why, failed)]
