"""Enabled hosts whose service heartbeat is fresh (Nova's ComputeFilter)."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from berth.core import kernels
from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.request import RequestSpec


class ComputeParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    service_down_time: Annotated[float, Field(gt=0)] = 60.0
    """Seconds after its last heartbeat that a host counts as down (Nova's default is 60)."""


class ComputeFilter(HostFilter):
    name = "compute"
    Params = ComputeParams
    kind = "host_state"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        """True when it rejects some host at the run's start (with default parameters)."""
        if not work.flavors:
            return False
        first = work.flavors[0].name
        probe = Context(work.table, RequestSpec(flavor=first), work.table.demand(first), work.now)
        return not bool(np.all(cls().mask(probe)))

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        assert isinstance(self.params, ComputeParams)
        table, down_time = ctx.table, float(self.params.service_down_time)
        return kernels.fresh_hosts(table.enabled, table.heartbeat, float(ctx.now), down_time)

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        assert isinstance(self.params, ComputeParams)
        disabled = failed & ~ctx.table.enabled
        stale = failed & ~disabled
        return [
            (Rejection("host_disabled", "disabled"), disabled),
            (
                Rejection(
                    "host_down",
                    f"no heartbeat in the last {self.params.service_down_time:g} s",
                ),
                stale,
            ),
        ]
