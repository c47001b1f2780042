"""Fragmentation of free capacity for one flavor, NUMA-exact (pure; docs/simulator.md).

The formula the simulator reports and the defragmentation planner's figures use. It lives in the
core so that the planner (`berth.core.defrag`) can use it without importing the simulator.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.filters.base import Context
from berth.core.filters.traits import TraitsFilter
from berth.core.numa import vector
from berth.core.request import RequestSpec
from berth.core.resources import C_PCPU, H_VCPU
from berth.core.table import HostTable

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def eligible_hosts(table: HostTable, flavor: str, now: float = 0.0) -> Mask:
    """Enabled hosts that could hold `flavor` if they were empty: resources (NUMA-exact) and
    traits. A disabled host is left out, as capacity leaves it out: its free CPU is not the
    fleet's to use."""
    d = table.demand(flavor)
    ok = (vector.count(d, table.cell_cap, table.host_cap, limit=1) >= 1) & table.enabled
    spec = d.spec
    if spec.required_traits or spec.forbidden_traits:
        ctx = Context(table, RequestSpec(flavor=flavor), d, now)
        ok &= TraitsFilter().mask(ctx)
    return np.asarray(ok, dtype=bool)


def flavor_cpu_free(table: HostTable, flavor: str) -> I64:
    """Free CPU in the column the flavor consumes: pinnable CPUs if dedicated, else shared."""
    if table.flavors[flavor].dedicated_cpus:
        return table.cell_free[:, :, C_PCPU].sum(axis=1)
    return table.host_free[:, H_VCPU]


def fragmentation_rate(table: HostTable, flavor: str, eligible: Mask | None = None) -> float:
    """Share of free CPU that cannot hold `flavor`, NUMA-exact::

        (free CPU - vcpus_f x sum_h count_f(h)) / free CPU

    over the hosts that could hold the flavor when empty (`eligible_hosts`); `count_f` is
    `HostTable.resource_counts` (cells, memory, disk and devices all count). 0 when no CPU is
    free.
    """
    if eligible is None:
        eligible = eligible_hosts(table, flavor)
    free = float(flavor_cpu_free(table, flavor)[eligible].sum())
    if free <= 0:
        return 0.0
    usable = float(table.resource_counts(flavor)[eligible].sum()) * table.flavors[flavor].vcpus
    return (free - usable) / free
