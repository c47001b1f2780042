"""Run the core scheduler on a subset of a table's hosts, by composition (no core change).

`restricted(scheduler, mask)` returns a scheduler of the same class with the same filters and
weighers plus one static filter that passes only the hosts in `mask`. The policy layer uses it to
place inside one resource pool and to verify a preemption plan on one host. The extra filter
takes part in failure explanations like any other ("12 not in pool dpdk").
"""

from __future__ import annotations

import numpy as np

from berth.core.engine import FilterScheduler
from berth.core.filters.base import Context, HostFilter, Mask, Workload


class HostSubsetFilter(HostFilter):
    """Passes the hosts of a fixed boolean mask (aligned with the table it is used on)."""

    name = "host_subset"
    static = True
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def per_host_limit(self) -> int | None:
        return None

    def __init__(self, allowed: Mask, reason: str) -> None:
        super().__init__()
        self.allowed = allowed
        self.reason = reason

    def mask(self, ctx: Context) -> Mask:
        if self.allowed.shape != (len(ctx.table),):
            raise ValueError("host subset mask does not match the table")
        return self.allowed

    def describe(self, ctx: Context) -> str:
        return self.reason


def restricted(scheduler: FilterScheduler, allowed: Mask, reason: str) -> FilterScheduler:
    """`scheduler` limited to the hosts in `allowed` (the subset filter runs first)."""
    new = type(scheduler).__new__(type(scheduler))
    new.__dict__.update(scheduler.__dict__)
    new.filters = [HostSubsetFilter(allowed, reason), *scheduler.filters]
    return new


def only_hosts(scheduler: FilterScheduler, n_hosts: int, rows: list[int]) -> FilterScheduler:
    allowed = np.zeros(n_hosts, dtype=bool)
    allowed[rows] = True
    return restricted(scheduler, allowed, "not a host this plan may use")
