"""Hosts in the requested availability zone (Nova's AvailabilityZoneFilter)."""

from __future__ import annotations

from berth.core.filters.base import Context, HostFilter, Mask


class AvailabilityZoneFilter(HostFilter):
    name = "availability_zone"

    def mask(self, ctx: Context) -> Mask:
        zone = ctx.request.availability_zone
        if zone is None:
            return ctx.table.everyone()
        return ctx.table.zone == ctx.table.zones.get(zone)

    def describe(self, ctx: Context) -> str:
        return f"not in availability zone {ctx.request.availability_zone}"
