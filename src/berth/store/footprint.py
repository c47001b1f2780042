"""An instance's exact footprint, by resource name, independent of any table's column layout.

The core keeps footprints as arrays whose PCI columns follow one table's device types; in the
database and in events they are stored by name so that replicas (and clusters with different
device types) read them the same way:

    {"cells": [{"vcpus": 0, "pcpus": 4, "memory_mb": 8192, "hugepages_mb": 0, "pci": {}}, ...],
     "host": {"vcpus": 0, "memory_mb": 8192, "hdd_gb": 40, "ssd_gb": 0}}
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.errors import ClaimError
from berth.core.resources import (
    C_HUGE,
    C_MEM,
    C_PCPU,
    C_VCPU,
    CELL_BASE,
    CELLS,
    H_HDD,
    H_MEM,
    H_SSD,
    H_VCPU,
    HOST_RESOURCES,
)

I64 = npt.NDArray[np.int64]
Footprint = dict[str, Any]

_CELL = (("vcpus", C_VCPU), ("pcpus", C_PCPU), ("memory_mb", C_MEM), ("hugepages_mb", C_HUGE))
_HOST = (("vcpus", H_VCPU), ("memory_mb", H_MEM), ("hdd_gb", H_HDD), ("ssd_gb", H_SSD))


def to_named(cell_use: I64, host_use: I64, device_types: list[str]) -> Footprint:
    cells = []
    for c in range(cell_use.shape[0]):
        cell: dict[str, Any] = {name: int(cell_use[c, col]) for name, col in _CELL}
        cell["pci"] = {
            d: int(cell_use[c, CELL_BASE + i])
            for i, d in enumerate(device_types)
            if cell_use[c, CELL_BASE + i]
        }
        cells.append(cell)
    host = {name: int(host_use[col]) for name, col in _HOST}
    return {"cells": cells, "host": host}


def to_arrays(fp: Footprint, device_types: list[str], cells: int = CELLS) -> tuple[I64, I64]:
    """The footprint in a table's layout (`cells` its cell axis); a device type the table
    lacks, or a cell beyond its axis, is a `ClaimError`."""
    width = CELL_BASE + len(device_types)
    cell_use = np.zeros((cells, width), dtype=np.int64)
    _check_cells(fp, cells)
    for c, cell in enumerate(fp["cells"][:cells]):
        for name, col in _CELL:
            cell_use[c, col] = int(cell.get(name, 0))
        for device, count in cell.get("pci", {}).items():
            if device not in device_types:
                raise ClaimError(f"footprint uses unknown PCI device type {device!r}")
            cell_use[c, CELL_BASE + device_types.index(device)] = int(count)
    host_use = np.zeros(HOST_RESOURCES, dtype=np.int64)
    for name, col in _HOST:
        host_use[col] = int(fp["host"].get(name, 0))
    return cell_use, host_use


def _check_cells(fp: Footprint, cells: int) -> None:
    used = [c for c, cell in enumerate(fp["cells"]) if any(cell.values())]
    if used and used[-1] >= cells:
        raise ClaimError(f"footprint uses NUMA cell {used[-1]}; the host has {cells}")


def sum_footprints(
    fps: list[Footprint], device_types: list[str], n_cells: int = CELLS
) -> tuple[I64, I64]:
    """The summed use of several footprints in a table's layout (`n_cells` its cell axis; one
    array built at the end)."""
    width = CELL_BASE + len(device_types)
    cells = [[0] * width for _ in range(n_cells)]
    host = [0] * HOST_RESOURCES
    index = {d: CELL_BASE + i for i, d in enumerate(device_types)}
    for fp in fps:
        _check_cells(fp, n_cells)
        for c, cell in enumerate(fp["cells"][:n_cells]):
            row = cells[c]
            for name, col in _CELL:
                row[col] += int(cell.get(name, 0))
            for device, count in cell.get("pci", {}).items():
                pci_col = index.get(device)
                if pci_col is None:
                    raise ClaimError(f"footprint uses unknown PCI device type {device!r}")
                row[pci_col] += int(count)
        use = fp["host"]
        for name, col in _HOST:
            host[col] += int(use.get(name, 0))
    return np.array(cells, dtype=np.int64), np.array(host, dtype=np.int64)
