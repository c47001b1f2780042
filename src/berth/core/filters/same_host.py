"""Scheduler hints same_host / different_host: share or avoid the hosts of given instances."""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Workload


def _rows(ctx: Context, instance_ids: tuple[str, ...]) -> list[int]:
    table = ctx.table
    return [
        table.index[a.host] for iid in instance_ids if (a := table.allocations.get(iid)) is not None
    ]


class SameHostFilter(HostFilter):
    name = "same_host"
    static = False
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return work.hints

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        if not ctx.request.same_host:
            return ctx.table.everyone()
        out = np.zeros(len(ctx.table), dtype=bool)
        out[_rows(ctx, ctx.request.same_host)] = True
        return out

    def describe(self, ctx: Context) -> str:
        return "does not hold the instances named in same_host"


class DifferentHostFilter(HostFilter):
    name = "different_host"
    static = False
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return work.hints

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        if not ctx.request.different_host:
            return ctx.table.everyone()
        out = np.ones(len(ctx.table), dtype=bool)
        out[_rows(ctx, ctx.request.different_host)] = False
        return out

    def describe(self, ctx: Context) -> str:
        return "holds an instance named in different_host"
