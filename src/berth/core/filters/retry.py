"""Exclude hosts that already failed this request (Nova's RetryFilter)."""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Workload


class RetryFilter(HostFilter):
    name = "retry"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return work.hints

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        if not ctx.request.ignore_hosts:
            return ctx.table.everyone()
        out = np.ones(len(ctx.table), dtype=bool)
        rows = [ctx.table.index[h] for h in ctx.request.ignore_hosts if h in ctx.table.index]
        out[rows] = False
        return out

    def describe(self, ctx: Context) -> str:
        return "already failed this request"
