"""A flavor's consumption as vectors in the table's column layout (see `resources`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core.flavors import FlavorSpec, NumaMode, PciPolicy
from berth.core.model import DiskKind
from berth.core.resources import (
    C_HUGE,
    C_MEM,
    C_PCPU,
    C_VCPU,
    CELL_BASE,
    H_HDD,
    H_MEM,
    H_SSD,
    H_VCPU,
    HOST_RESOURCES,
)

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Demand:
    """What one instance of a flavor takes, ready for vectorised arithmetic.

    ``cells`` holds the guest cells' vectors: one row for SINGLE, two for EVEN and FIXED, and for
    FLEX the per-cell minimums (two equal rows) while ``total`` holds the whole guest.
    ``pci`` is the host-level PCI demand (devices that may come from any of the guest's cells).
    """

    spec: FlavorSpec
    host: I64
    cells: I64
    total: I64
    pci: I64

    @property
    def mode(self) -> NumaMode:
        return self.spec.numa_mode

    @property
    def cpu_column(self) -> int:
        return C_PCPU if self.spec.dedicated_cpus else C_VCPU

    @property
    def mem_column(self) -> int:
        return C_HUGE if self.spec.hugepages else C_MEM

    def cells_used(self, cell_use: I64) -> list[tuple[int, int, int]]:
        """(cell, vCPUs, memory MB) for each host cell a footprint uses; empty when floating."""
        cpu, mem = self.cpu_column, self.mem_column
        return [
            (c, int(cell_use[c, cpu]), int(cell_use[c, mem]))
            for c in range(cell_use.shape[0])
            if cell_use[c, cpu] or cell_use[c, mem]
        ]


def build_demand(spec: FlavorSpec, device_types: list[str]) -> Demand:
    """Vectorise `spec` for a table whose PCI columns are `device_types` (all must be known)."""
    width = CELL_BASE + len(device_types)
    host = np.zeros(HOST_RESOURCES, dtype=np.int64)
    if not spec.dedicated_cpus:
        host[H_VCPU] = spec.vcpus
    if not spec.hugepages:
        host[H_MEM] = spec.memory_mb
    host[H_SSD if spec.disk_kind == DiskKind.SSD else H_HDD] = spec.disk_gb

    cpu = C_PCPU if spec.dedicated_cpus else C_VCPU
    mem = C_HUGE if spec.hugepages else C_MEM
    cells = np.zeros((len(spec.cells), width), dtype=np.int64)
    for i, shape in enumerate(spec.cells):
        cells[i, cpu] = shape.vcpus
        cells[i, mem] = shape.memory_mb
    total = np.zeros(width, dtype=np.int64)
    total[cpu] = spec.vcpus
    total[mem] = spec.memory_mb

    pci = np.zeros(len(device_types), dtype=np.int64)
    for device, count in spec.pci.items():
        pci[device_types.index(device)] = count
    if spec.numa_mode == NumaMode.SINGLE and spec.pci_policy == PciPolicy.REQUIRED:
        cells[0, CELL_BASE:] = pci
        total[CELL_BASE:] = pci
        pci = np.zeros_like(pci)
    return Demand(spec=spec, host=host, cells=cells, total=total, pci=pci)
