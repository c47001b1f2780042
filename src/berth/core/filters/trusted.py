"""Flavors with `trust:trusted_host=trusted` run only on attested hosts (TrustedFilter)."""

from __future__ import annotations

from berth.core.filters.base import Context, HostFilter, Mask


class TrustedFilter(HostFilter):
    name = "trusted"

    def mask(self, ctx: Context) -> Mask:
        if not ctx.demand.spec.trusted:
            return ctx.table.everyone()
        return ctx.table.trusted.copy()

    def describe(self, ctx: Context) -> str:
        return "not an attested (trusted) host"
