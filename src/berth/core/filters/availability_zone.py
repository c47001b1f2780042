"""Hosts in the requested availability zone (Nova's AvailabilityZoneFilter)."""

from __future__ import annotations

from berth.core.filters.base import Context, HostFilter, Mask, Workload


class AvailabilityZoneFilter(HostFilter):
    name = "availability_zone"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return work.zones

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        zone = ctx.request.availability_zone
        if zone is None:
            return ctx.table.everyone()
        return ctx.table.zone == ctx.table.zones.get(zone)

    def describe(self, ctx: Context) -> str:
        return f"not in availability zone {ctx.request.availability_zone}"
