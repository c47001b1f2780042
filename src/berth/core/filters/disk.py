"""Enough local disk of the flavor's kind (HDD or SSD), counted separately (Nova's DiskFilter)."""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.model import DiskKind
from berth.core.resources import H_HDD, H_SSD


class DiskFilter(HostFilter):
    name = "disk"
    static = False
    kind = "resource"
    relaxable_by_eviction = True
    implied_by_count = True

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return any(f.disk_gb for f in work.flavors)

    def per_host_limit(self) -> int | None:
        return None

    @staticmethod
    def _column(ctx: Context) -> int:
        return H_SSD if ctx.demand.spec.disk_kind == DiskKind.SSD else H_HDD

    def mask(self, ctx: Context) -> Mask:
        need = ctx.demand.spec.disk_gb
        if need == 0:
            return ctx.table.everyone()
        return ctx.host_free[:, self._column(ctx)] >= need

    def host_minimum(self, ctx: Context) -> tuple[int, int] | None:
        need = ctx.demand.spec.disk_gb
        return None if need == 0 else (self._column(ctx), need)

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        need = ctx.demand.spec.disk_gb
        kind = ctx.demand.spec.disk_kind.value
        free = ctx.host_free[:, self._column(ctx)].astype(np.float64)
        why = Rejection(
            f"insufficient_disk_{kind}",
            f"less than {need} GB free {kind.upper()} disk",
            f"disk_{kind}_gb",
            need,
            free,
        )
        return [(why, failed)]
