"""Where a migrating instance lands on its target: the NUMA shape that serves the objective.

The claim rule (`numa.vector.place`) picks a cell for the instance's own sake (the tightest
fitting cell, the orientation that leaves more of the flavor). A migration may state any legal
footprint (`rules.footprint_error`), so the planner values every legal shape on the target and
keeps the one that loses the least objective; on ties, the rule's own choice. Shapes that do not
depend on the host (one cell either way, an even split, both orientations of a fixed split) are
listed once per flavor; flexible splits, floating guests, host-level PCI devices and tables with
hosts of more than two cells (docs/numa.md) keep the rule's footprint.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.defrag.objective import HostValue
from berth.core.demand import Demand
from berth.core.flavors import NumaMode
from berth.core.numa import scalar, vector
from berth.core.table import HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

EPS = 1e-9
RULE = -1
"""Shape index of the claim rule's own footprint."""


def fixed_shapes(d: Demand) -> list[I64]:
    """The host-independent footprints (cells x columns) an instance of `d` may take on a
    two-cell table (on a wider one, or for a guest of more than two cells, only the rule's)."""
    if d.pci.any() or d.guest_cells > 2:
        return []
    width = d.total.size
    zero = np.zeros(width, dtype=np.int64)
    if d.mode == NumaMode.SINGLE:
        a = d.cells[0]
        return [np.stack([a, zero]), np.stack([zero, a])]
    if d.mode == NumaMode.EVEN:
        return [d.cells[:2].copy()]
    if d.mode == NumaMode.FIXED:
        a, b = d.cells[0], d.cells[1]
        if np.array_equal(a, b):
            return [np.stack([a, b])]
        return [np.stack([a, b]), np.stack([b, a])]
    return []


def insert_values(
    value: HostValue, table: HostTable, flavor: str, rows: I64, shapes: list[I64]
) -> tuple[F64, I64]:
    """Per row: the host's value with one more `flavor` in its best shape (-inf when it does
    not fit), and that shape's index in `shapes` (`RULE` for the rule's footprint)."""
    d = table.demand(flavor)
    cell_free, host_free = table.free_rows(rows)
    n_after = table.n_instances[rows].astype(np.int64) + 1
    cell_use, host_use = vector.place(d, cell_free, host_free)
    fits = vector.count(d, cell_free, host_free, limit=1) >= 1
    best = np.where(
        fits, value.of(rows, cell_free - cell_use, host_free - host_use, n_after), -np.inf
    )
    shape = np.full(rows.size, RULE, dtype=np.int64)
    host_ok = (host_free >= d.host).all(axis=1)
    for k, use in enumerate(shapes):
        ok = host_ok & (cell_free >= use).all(axis=(1, 2))
        if not ok.any():
            continue
        after = value.of(rows, cell_free - use, host_free - d.host, n_after)
        better = ok & (after > best + EPS)
        best = np.where(better, after, best)
        shape = np.where(better, k, shape)
    return best, shape


def footprint(table: HostTable, flavor: str, row: int, shapes: list[I64], k: int) -> I64:
    """The cell footprint of shape `k` on `row` (the rule's when `k` is `RULE`)."""
    if k == RULE:
        rd = table.demand(flavor).rows
        return np.array(scalar.place(rd, table.cell_free[row].tolist()), dtype=np.int64)
    return shapes[k].copy()


def insert_one(
    value: HostValue, table: HostTable, flavor: str, row: int, shapes: list[list[list[int]]]
) -> tuple[float, int]:
    """`insert_values` for one row in plain Python numbers (`HostValue.one`, `numa.scalar`):
    the same values bit for bit, without numpy's per-call cost on a single host. `shapes` are
    `insert_values`' shapes as nested lists."""
    rd = table.demand(flavor).rows
    cell_free: scalar.Cells = table.cell_free[row].tolist()
    host_free: list[int] = table.host_free[row].tolist()
    n_after = int(table.n_instances[row]) + 1
    best, shape = -np.inf, RULE
    if scalar.count(rd, cell_free, host_free) >= 1:
        use = scalar.place(rd, cell_free)
        after = [scalar.minus(f, u) for f, u in zip(cell_free, use, strict=True)]
        best = value.one(row, after, scalar.minus(host_free, rd.host_use), n_after)
    if not shapes or any(f < u for f, u in zip(host_free, rd.host_use, strict=True)):
        return best, shape
    host_after = scalar.minus(host_free, rd.host_use)
    for k, use in enumerate(shapes):
        after = [scalar.minus(f, u) for f, u in zip(cell_free, use, strict=True)]
        if any(x < 0 for cell in after for x in cell):
            continue
        v = value.one(row, after, host_after, n_after)
        if v > best + EPS:
            best, shape = v, k
    return best, shape
