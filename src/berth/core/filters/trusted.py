"""Flavors with `trust:trusted_host=trusted` run only on attested hosts (TrustedFilter)."""

from __future__ import annotations

from berth.core.filters.base import Context, HostFilter, Mask, Workload


class TrustedFilter(HostFilter):
    name = "trusted"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return any(f.trusted for f in work.flavors)

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        if not ctx.demand.spec.trusted:
            return ctx.table.everyone()
        return ctx.table.trusted.copy()

    def describe(self, ctx: Context) -> str:
        return "not an attested (trusted) host"
