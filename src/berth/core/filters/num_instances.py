"""At most `max_instances_per_host` instances per host (Nova's NumInstancesFilter)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from berth.core.filters.base import Context, HostFilter, Mask, Workload


class NumInstancesParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    max_instances_per_host: Annotated[int, Field(ge=1)] = 50


class NumInstancesFilter(HostFilter):
    name = "num_instances"
    Params = NumInstancesParams
    static = False
    kind = "host_state"
    relaxable_by_eviction = True
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return work.instance_caps

    def per_host_limit(self) -> int:
        assert isinstance(self.params, NumInstancesParams)
        return self.params.max_instances_per_host

    def mask(self, ctx: Context) -> Mask:
        return ctx.table.n_instances < self.per_host_limit()

    def describe(self, ctx: Context) -> str:
        return f"already runs {self.per_host_limit()} instances"
