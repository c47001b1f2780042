"""An instance's NUMA cells as a snapshot states them: checked against its flavor, turned into
its exact footprint, and read back from an allocation's footprint."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.errors import SpecError
from berth.core.flavors import NumaMode
from berth.core.model import CellPlacement
from berth.core.resources import CELL_BASE

I64 = npt.NDArray[np.int64]


def stated_use(d: Demand, numa: list[CellPlacement], cell_free: I64, width: int) -> tuple[I64, I64]:
    """The footprint of a snapshot instance of `d` at its stated cells `numa`, checked against
    the flavor; `cell_free` is its host's free cells (for where its PCI devices come from)."""
    shape = stated_shape(d, [(p.cell, p.vcpus, p.memory_mb) for p in numa])
    cells = cell_free.shape[0]
    cell_use = np.zeros((cells, width), dtype=np.int64)
    for cell, (vcpus, memory) in shape.items():
        if cell >= cells:
            raise SpecError(f"numa placement names cell {cell}; the host has {cells}")
        cell_use[cell, d.cpu_column] = vcpus
        cell_use[cell, d.mem_column] = memory
    if d.mode == NumaMode.SINGLE:
        (cell,) = shape
        cell_use[cell, CELL_BASE:] = d.cells[0, CELL_BASE:]  # cell-local devices
    # host-level devices as the claim rule (`numa.rule`) takes them: the guest's own cells
    # first, then the others, each group the cell with more free devices first (lowest on a tie)
    mine = np.zeros(cells, dtype=bool)
    mine[list(shape)] = True
    for p in np.flatnonzero(d.pci):
        col = CELL_BASE + p
        free = np.maximum(cell_free[:, col], 0)
        want = int(d.pci[p])
        order = sorted(range(cells), key=lambda c: (not mine[c], -free[c], c))
        for i, c in enumerate(order):
            took = want if i == cells - 1 else min(want, int(free[c]))
            cell_use[c, col] += took
            want -= took
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
