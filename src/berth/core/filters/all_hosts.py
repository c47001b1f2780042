"""Every host passes (Nova's AllHostsFilter)."""

from __future__ import annotations

from berth.core.filters.base import Context, HostFilter, Mask, Workload


class AllHostsFilter(HostFilter):
    name = "all_hosts"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return False  # passes every host

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        return ctx.table.everyone()
