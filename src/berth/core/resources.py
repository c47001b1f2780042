"""Column layout of the resource arrays, shared by the table, the NUMA fit and the filters.

Per NUMA cell (array shape ``(hosts, cells, CELL_BASE + pci_types)``; ``cells`` is the widest
host's, at least `CELLS`, narrower hosts padded with empty cells, docs/numa.md):

* ``C_VCPU``  shared vCPUs, capacity = floor(shared CPUs x cpu_allocation_ratio)
* ``C_PCPU``  dedicated (pinnable) CPUs, never over-committed
* ``C_MEM``   small-page memory in MB, capacity = floor(memory x ram_allocation_ratio)
* ``C_HUGE``  huge-page memory in MB, never over-committed
* ``CELL_BASE + p``  devices of PCI type ``p`` local to the cell

Per host (array shape ``(hosts, HOST_RESOURCES)``):

* ``H_VCPU``  shared vCPUs over the whole host (floating guests and NUMA guests alike)
* ``H_MEM``   small-page memory over the whole host, as Placement counts it:
  floor((memory - reserved_memory_mb) x ram_allocation_ratio)
* ``H_HDD`` / ``H_SSD``  local disk in GB, by kind, likewise: floor((disk - reserved) x ratio),
  ``reserved_disk_gb`` taken from HDD first

A guest with a NUMA topology consumes from its cells and from the host columns; a floating guest
consumes from the host columns only (Nova's accounting). Host-level PCI is the sum of the cells.
"""

from __future__ import annotations

from typing import Final

C_VCPU: Final = 0
C_PCPU: Final = 1
C_MEM: Final = 2
C_HUGE: Final = 3
CELL_BASE: Final = 4

H_VCPU: Final = 0
H_MEM: Final = 1
H_HDD: Final = 2
H_SSD: Final = 3
HOST_RESOURCES: Final = 4

CELLS: Final = 2
"""The narrowest cell axis of a table (a fleet of one- and two-cell hosts keeps this layout)."""

CELL_NAMES: Final = ("shared vCPUs", "pinned CPUs", "memory MB", "huge-page memory MB")
HOST_NAMES: Final = ("vCPUs", "RAM MB", "HDD GB", "SSD GB")


def cell_resource_name(column: int, device_types: list[str]) -> str:
    if column < CELL_BASE:
        return CELL_NAMES[column]
    return f"PCI {device_types[column - CELL_BASE]}"
