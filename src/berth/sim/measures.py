"""Fleet measures read from a `HostTable` (pure functions; docs/simulator.md has the formulas).

CPU of a host = shared vCPUs (allocation ratio applied) + pinnable CPUs; memory = small-page
memory (less the reserve) + huge-page memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core import numa
from berth.core.filters.base import Context
from berth.core.filters.traits import TraitsFilter
from berth.core.request import RequestSpec
from berth.core.resources import C_HUGE, C_PCPU, H_MEM, H_VCPU
from berth.core.table import HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def cpu_capacity(table: HostTable) -> I64:
    return table.host_cap[:, H_VCPU] + table.cell_cap[:, :, C_PCPU].sum(axis=1)


def memory_capacity(table: HostTable) -> I64:
    return table.host_cap[:, H_MEM] + table.cell_cap[:, :, C_HUGE].sum(axis=1)


def cpu_free(table: HostTable) -> I64:
    return table.host_free[:, H_VCPU] + table.cell_free[:, :, C_PCPU].sum(axis=1)


def memory_free(table: HostTable) -> I64:
    return table.host_free[:, H_MEM] + table.cell_free[:, :, C_HUGE].sum(axis=1)


def eligible_hosts(table: HostTable, flavor: str, now: float = 0.0) -> Mask:
    """Hosts that could hold `flavor` if they were empty: resources (NUMA-exact) and traits."""
    d = table.demand(flavor)
    ok = numa.count(d, table.cell_cap, table.host_cap, limit=1) >= 1
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


@dataclass(frozen=True)
class Snapshot:
    """Fleet-wide state at one instant (one sample of the replay)."""

    used_hosts: int
    empty_hosts: int
    cpu_util_used: float  # used CPU / capacity, over hosts running at least one instance
    mem_util_used: float
    cpu_util: float  # over the whole fleet
    mem_util: float
    stranded_cpu: float  # free CPU on memory-full hosts / fleet CPU capacity
    stranded_mem: float  # free memory on CPU-full hosts / fleet memory capacity


def snapshot(table: HostTable, cpu_cap: I64, mem_cap: I64, full_fraction: float = 0.05) -> Snapshot:
    """Utilisation, empty hosts and stranded resources.

    A host's memory is *full* when less than `full_fraction` of it is free; the CPU still free
    there is *stranded* (and the reverse for memory on CPU-full hosts).
    """
    used = table.n_instances > 0
    cfree = cpu_free(table)
    mfree = memory_free(table)
    ccap_used = float(cpu_cap[used].sum())
    mcap_used = float(mem_cap[used].sum())
    ctot, mtot = float(cpu_cap.sum()), float(mem_cap.sum())
    mem_full = mfree < full_fraction * mem_cap
    cpu_full = cfree < full_fraction * cpu_cap
    return Snapshot(
        used_hosts=int(used.sum()),
        empty_hosts=int(used.size - used.sum()),
        cpu_util_used=(ccap_used - float(cfree[used].sum())) / ccap_used if ccap_used else 0.0,
        mem_util_used=(mcap_used - float(mfree[used].sum())) / mcap_used if mcap_used else 0.0,
        cpu_util=(ctot - float(cfree.sum())) / ctot if ctot else 0.0,
        mem_util=(mtot - float(mfree.sum())) / mtot if mtot else 0.0,
        stranded_cpu=float(cfree[mem_full & (cpu_cap > 0)].sum()) / ctot if ctot else 0.0,
        stranded_mem=float(mfree[cpu_full & (mem_cap > 0)].sum()) / mtot if mtot else 0.0,
    )
