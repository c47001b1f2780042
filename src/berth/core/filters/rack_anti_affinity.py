"""Rack-level anti-affinity: a group's members on distinct racks, not only distinct hosts.

For anti-affinity server groups named in `groups` (or every anti-affinity group with
`all_groups`), a host is rejected when any host of its rack already holds a member. Hosts
without a rack count as their own rack (the table's convention), so the rule degrades to
host-level anti-affinity there. Deployment sets "by rack" use it (docs/policy.md).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from berth.core.filters.base import Context, HostFilter, Mask, Workload
from berth.core.model import GroupPolicy


class RackAntiAffinityParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    groups: list[str] = Field(default_factory=list, description="groups spread by rack")
    all_groups: bool = False


class RackAntiAffinityFilter(HostFilter):
    name = "rack_anti_affinity"
    Params = RackAntiAffinityParams
    static = False
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        groups = work.table.groups.values()
        return any(g.policy == GroupPolicy.ANTI_AFFINITY for g in groups)

    def per_host_limit(self) -> int | None:
        return None

    def _applies(self, ctx: Context) -> str | None:
        assert isinstance(self.params, RackAntiAffinityParams)
        gid = ctx.request.server_group
        if gid is None:
            return None
        group = ctx.table.groups.get(gid)
        if group is None or group.policy != GroupPolicy.ANTI_AFFINITY:
            return None
        if not self.params.all_groups and gid not in self.params.groups:
            return None
        return gid

    def mask(self, ctx: Context) -> Mask:
        gid = self._applies(ctx)
        table = ctx.table
        rows = table.group_rows.get(gid) if gid is not None else None
        if not rows:
            return np.ones(len(table), dtype=bool)
        used = np.unique(table.rack[list(rows)])
        return ~np.isin(table.rack, used)

    def describe(self, ctx: Context) -> str:
        return f"rack already holds a member of {ctx.request.server_group}"
