"""Every host passes (Nova's AllHostsFilter)."""

from __future__ import annotations

from berth.core.filters.base import Context, HostFilter, Mask


class AllHostsFilter(HostFilter):
    name = "all_hosts"

    def mask(self, ctx: Context) -> Mask:
        return ctx.table.everyone()
