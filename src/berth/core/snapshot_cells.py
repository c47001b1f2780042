"""An instance's NUMA cells as a snapshot states them: checked against its flavor, turned into
its exact footprint, and read back from an allocation's footprint."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.errors import SpecError
from berth.core.flavors import NumaMode
from berth.core.model import CellPlacement
from berth.core.resources import CELL_BASE, CELLS

I64 = npt.NDArray[np.int64]


def stated_use(d: Demand, numa: list[CellPlacement], cell_free: I64, width: int) -> tuple[I64, I64]:
    """The footprint of a snapshot instance of `d` at its stated cells `numa`, checked against
    the flavor; `cell_free` is its host's free cells (for where its PCI devices come from)."""
    shape = stated_shape(d, [(p.cell, p.vcpus, p.memory_mb) for p in numa])
    cell_use = np.zeros((CELLS, width), dtype=np.int64)
    for cell, (vcpus, memory) in shape.items():
        cell_use[cell, d.cpu_column] = vcpus
        cell_use[cell, d.mem_column] = memory
    free = cell_free[:, CELL_BASE:]
    if d.mode == NumaMode.SINGLE:
        (cell,) = shape
        cell_use[cell, CELL_BASE:] = d.cells[0, CELL_BASE:]  # cell-local devices
        own = np.full(free.shape[1], cell)
    else:  # as the claim rule (`numa.rule`): per device type, the cell with more free devices
        own = (free[1] > free[0]).astype(np.int64)
    # host-level devices: the guest's own cell first, then the other
    cols = np.arange(free.shape[1])
    take_own = np.minimum(d.pci, np.maximum(free[own, cols], 0))
    cell_use[own, CELL_BASE + cols] += take_own
    cell_use[1 - own, CELL_BASE + cols] += d.pci - take_own
    return cell_use, d.host.copy()


def stated_cells(d: Demand, cell_use: I64) -> list[CellPlacement] | None:
    """An allocation's cells as a snapshot states them (None for a flavor without a topology):
    loading them back with the same hosts and flavors rebuilds the same footprint."""
    if not d.spec.numa:
        return None
    return [CellPlacement(cell=c, vcpus=v, memory_mb=m) for c, v, m in d.cells_used(cell_use)]


def stated_shape(d: Demand, parts: list[tuple[int, int, int]]) -> dict[int, tuple[int, int]]:
    """Check stated (cell, vcpus, memory) parts against the flavor's guest shape; cell -> use."""
    spec = d.spec
    if not spec.numa:
        raise SpecError("numa placement given for a flavor without a NUMA topology")
    shape: dict[int, tuple[int, int]] = {}
    for cell, vcpus, memory in parts:
        if cell in shape:
            raise SpecError(f"numa placement names cell {cell} twice")
        shape[cell] = (vcpus, memory)
    if (
        sum(v for v, _ in shape.values()) != spec.vcpus
        or sum(m for _, m in shape.values()) != spec.memory_mb
    ):
        raise SpecError("numa placement must add up to the flavor's vcpus and memory")
    cells = len(spec.cells) if spec.numa_mode != NumaMode.FLEX else 2
    if len(shape) != cells:
        raise SpecError(f"numa placement must use {cells} cell(s), as the flavor's topology does")
    if spec.numa_mode in (NumaMode.EVEN, NumaMode.FIXED):
        stated = sorted(shape.values())
        wanted = sorted((c.vcpus, c.memory_mb) for c in spec.cells)
        if stated != wanted:
            raise SpecError(f"numa placement must split the guest as {wanted}, not {stated}")
    if spec.numa_mode == NumaMode.FLEX:
        least = spec.cells[0]
        if any(v < least.vcpus or m < least.memory_mb for v, m in shape.values()):
            raise SpecError(
                f"numa placement must give each cell at least {least.vcpus} vCPUs "
                f"and {least.memory_mb} MB"
            )
    return shape
