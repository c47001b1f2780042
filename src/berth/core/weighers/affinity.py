"""Soft server-group affinity and anti-affinity (Nova's ServerGroupSoft*Weigher).

Both return larger values for hosts the policy prefers, so both take positive weights.
"""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, Workload
from berth.core.model import GroupPolicy, ServerGroup
from berth.core.weighers.base import F64, I64, HostWeigher


def _group(ctx: Context, policy: GroupPolicy) -> ServerGroup | None:
    """The request's group if it has this policy (else every value is zero)."""
    gid = ctx.request.server_group
    group = ctx.table.groups.get(gid) if gid is not None else None
    return None if group is None or group.policy != policy else group


def _members(ctx: Context, rows: I64, policy: GroupPolicy) -> F64:
    group = _group(ctx, policy)
    if group is None:
        return np.zeros(rows.size, dtype=np.float64)
    return ctx.table.group_count(group.id)[rows].astype(np.float64)


def _any_group(work: Workload, policy: GroupPolicy) -> bool:
    """Without a group of the policy every value is zero."""
    return any(g.policy == policy for g in work.table.groups.values())


class SoftAffinityWeigher(HostWeigher):
    name = "soft_affinity"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return _any_group(work, GroupPolicy.SOFT_AFFINITY)

    def constant(self, ctx: Context) -> bool:
        return _group(ctx, GroupPolicy.SOFT_AFFINITY) is None

    def raw(self, ctx: Context, rows: I64) -> F64:
        return _members(ctx, rows, GroupPolicy.SOFT_AFFINITY)


class SoftAntiAffinityWeigher(HostWeigher):
    name = "soft_anti_affinity"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return _any_group(work, GroupPolicy.SOFT_ANTI_AFFINITY)

    def constant(self, ctx: Context) -> bool:
        return _group(ctx, GroupPolicy.SOFT_ANTI_AFFINITY) is None

    def raw(self, ctx: Context, rows: I64) -> F64:
        return -_members(ctx, rows, GroupPolicy.SOFT_ANTI_AFFINITY)
