"""Fleet measures read from a `HostTable` (pure functions; docs/simulator.md has the formulas).

The fragmentation rate lives in the core (`berth.core.fragmentation`, the defragmentation planner
reports it too) and is re-exported here.

CPU of a host = shared vCPUs (allocation ratio applied) + pinnable CPUs; memory = small-page
memory (less the reserve) + huge-page memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core.fragmentation import eligible_hosts, flavor_cpu_free, fragmentation_rate
from berth.core.resources import C_HUGE, C_PCPU, H_MEM, H_VCPU
from berth.core.table import HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

__all__ = [
    "Snapshot",
    "cpu_capacity",
    "cpu_free",
    "eligible_hosts",
    "flavor_cpu_free",
    "fragmentation_rate",
    "memory_capacity",
    "memory_free",
    "snapshot",
]


def cpu_capacity(table: HostTable) -> I64:
    return table.host_cap[:, H_VCPU] + table.cell_cap[:, :, C_PCPU].sum(axis=1)


def memory_capacity(table: HostTable) -> I64:
    return table.host_cap[:, H_MEM] + table.cell_cap[:, :, C_HUGE].sum(axis=1)


def cpu_free(table: HostTable) -> I64:
    return table.host_free[:, H_VCPU] + table.cell_free[:, :, C_PCPU].sum(axis=1)


def memory_free(table: HostTable) -> I64:
    return table.host_free[:, H_MEM] + table.cell_free[:, :, C_HUGE].sum(axis=1)


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
