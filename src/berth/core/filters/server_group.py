"""Hard server-group affinity and anti-affinity (Nova's ServerGroup*Filter).

Anti-affinity allows up to the group's `max_server_per_host` members per host (Nova's rule);
affinity confines a group that has members to the hosts that hold them.
"""

from __future__ import annotations

from berth.core.filters.base import Context, HostFilter, Mask, Workload
from berth.core.model import GroupPolicy, ServerGroup


def _group(ctx: Context, policy: GroupPolicy) -> ServerGroup | None:
    gid = ctx.request.server_group
    if gid is None:
        return None
    group = ctx.table.groups.get(gid)
    return group if group is not None and group.policy == policy else None


def _any_group(work: Workload, policy: GroupPolicy) -> bool:
    return any(g.policy == policy for g in work.table.groups.values())


class ServerGroupAffinityFilter(HostFilter):
    name = "server_group_affinity"
    static = False
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return _any_group(work, GroupPolicy.AFFINITY)

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        group = _group(ctx, GroupPolicy.AFFINITY)
        if group is None or not ctx.table.group_rows.get(group.id):
            return ctx.table.everyone()
        return ctx.table.group_count(group.id) > 0

    def describe(self, ctx: Context) -> str:
        return f"not a host of affinity group {ctx.request.server_group}"


class ServerGroupAntiAffinityFilter(HostFilter):
    name = "server_group_anti_affinity"
    static = False
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return _any_group(work, GroupPolicy.ANTI_AFFINITY)

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        group = _group(ctx, GroupPolicy.ANTI_AFFINITY)
        if group is None:
            return ctx.table.everyone()
        return ctx.table.group_count(group.id) < group.max_server_per_host

    def describe(self, ctx: Context) -> str:
        return f"already holds members of anti-affinity group {ctx.request.server_group}"
