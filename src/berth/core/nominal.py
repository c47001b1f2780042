"""What each host states before any ratio: Placement's inventory (`total`, `reserved`,
`allocation_ratio`, `max_unit`) and the NUMA cells' own sizes.

The table's capacity columns (`host_columns.capacities`) hold what guests may take with ratios
applied; a few of Nova's rules read the stated sizes instead: a guest never over-commits against
itself (its vCPUs at most the host's shared CPUs, Placement's `max_unit`; a guest cell at most
the host cell's CPUs and memory), and a pinned guest never over-commits memory (the
`max_unit` and `pinned_memory` filters). Nova's weighers read free amounts without ratios too
(`weighers/nova.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.model import Host
from berth.core.resources import CELLS

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Nominal:
    shared: I64  # (n, cells) shared CPUs per cell (the table's cell axis)
    memory: I64  # (n, cells) small-page memory MB per cell
    cpu_ratio: F64  # (n,)
    ram_ratio: F64
    disk_ratio: F64
    reserved_mb: I64  # (n,)
    reserved_gb: I64
    disk_gb: I64  # (n,) HDD + SSD
    pci: I64  # (n,) PCI devices of every type

    @classmethod
    def empty(cls) -> Nominal:
        return cls.of([])

    @classmethod
    def of(cls, hosts: list[Host]) -> Nominal:
        n = len(hosts)
        cells = max([CELLS, *(len(h.numa_cells) for h in hosts)])  # as the table's cell axis
        shared = np.zeros((n, cells), dtype=np.int64)
        memory = np.zeros((n, cells), dtype=np.int64)
        for r, host in enumerate(hosts):
            for c, cell in enumerate(host.numa_cells):
                shared[r, c] = cell.shared_cpus
                memory[r, c] = cell.memory_mb

        def col(values: list[int]) -> I64:
            return np.asarray(values, dtype=np.int64).reshape(n)

        def ratio(values: list[float]) -> F64:
            return np.asarray(values, dtype=np.float64).reshape(n)

        return cls(
            shared=shared,
            memory=memory,
            cpu_ratio=ratio([h.cpu_allocation_ratio for h in hosts]),
            ram_ratio=ratio([h.ram_allocation_ratio for h in hosts]),
            disk_ratio=ratio([h.disk_allocation_ratio for h in hosts]),
            reserved_mb=col([h.reserved_memory_mb for h in hosts]),
            reserved_gb=col([h.reserved_disk_gb for h in hosts]),
            disk_gb=col([h.disk.hdd_gb + h.disk.ssd_gb for h in hosts]),
            pci=col([sum(sum(c.pci.values()) for c in h.numa_cells) for h in hosts]),
        )

    def extend(self, hosts: list[Host]) -> Nominal:
        new = Nominal.of(hosts)
        cells = max(self.shared.shape[1], new.shared.shape[1])

        def join(a: Any, b: Any) -> Any:
            if a.ndim == 2:  # per cell: pad the narrower with empty cells
                a, b = (np.pad(x, ((0, 0), (0, cells - x.shape[1]))) for x in (a, b))
            return np.concatenate([a, b])

        return Nominal(**{name: join(getattr(self, name), getattr(new, name)) for name in FIELDS})

    @property
    def host_shared(self) -> I64:
        return self.shared.sum(axis=1)

    @property
    def host_memory(self) -> I64:
        return self.memory.sum(axis=1)


FIELDS = tuple(Nominal.__dataclass_fields__)
