"""Where a migrating instance lands on its target: the NUMA shape that serves the objective.

The claim rule (`numa.vector.place`) picks a cell for the instance's own sake (the tightest
fitting cell, the orientation that leaves more of the flavor, the closest cells). A migration
may state any legal footprint (`rules.footprint_error`), so the planner values several legal
shapes on the target and keeps the one that loses the least objective; on ties, the rule's own
choice (`preview`: the claim's footprint, NUMA distances included).

Two-cell tables: the shapes do not depend on the host (one cell either way, an even split,
both orientations of a fixed split) and are listed once per flavor (`fixed_shapes`).

Wider tables (`Ranked`): a guest of k cells on n cells has C(n, k) cell sets (70 for four of
eight) and, with unequal cells, up to n!/(n-k)! maps, each costing one exact valuation per
host. The count of any flavor does not depend on which cell is which, only on the cells'
states, so what a landing changes is *which kind* of cell it takes: tight ones (keeping roomy
cells whole for large guests) or roomy ones. The planner therefore ranks each host's cells by
the slots they hold for the moving guest (the fewest first, cells that hold none last, lowest
index on a tie) and tries every window of k consecutive ranks, the guest's larger cells on the
roomier ranks and, for unequal cells, also on the tighter ones: at most ``2 (n - k + 1)``
shapes (14 at k = 2 on eight cells, 8 for a one-cell guest: every cell), beside the rule's.
Flexible splits, floating guests and host-level PCI devices keep the rule's footprint.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core import preview
from berth.core.defrag.objective import HostValue
from berth.core.demand import Demand
from berth.core.flavors import NumaMode
from berth.core.numa import scalar, vector
from berth.core.resources import CELL_BASE
from berth.core.table import HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

EPS = 1e-9
RULE = -1
"""Shape index of the claim rule's own footprint."""


@dataclass(frozen=True)
class Ranked:
    """Landing shapes on a table wider than two cells, by rank of the host's cells (module
    doc): shape j puts guest cell g (largest first) on rank ``start + g`` (or, flipped, on rank
    ``start + k - 1 - g``) of the host's cells ordered by slots for the guest, fewest first."""

    cells: I64
    """The guest's cells (k, columns), largest first."""
    unit: I64
    """Per column, the smallest guest cell's need: a host cell's slots for the guest."""
    windows: tuple[tuple[int, bool], ...]
    """(first rank, flipped) of each shape."""

    def __len__(self) -> int:
        return len(self.windows)

    def uses(self, cell_free: I64) -> list[I64]:
        """Per shape, its footprint (rows, cells, columns) on hosts with these free cells."""
        n, cells, _ = cell_free.shape
        slots = np.full((n, cells), 1 << 40, dtype=np.int64)
        for col in np.flatnonzero(self.unit):
            np.minimum(slots, cell_free[:, :, col] // self.unit[col], out=slots)
        slots = np.maximum(slots, 0)
        key = np.where(slots > 0, slots, 1 << 41) * cells + np.arange(cells)[None, :]
        order = np.argsort(key, axis=1)  # fewest slots first, cells that hold none last
        k, rows = self.cells.shape[0], np.arange(n)
        out = []
        for start, flipped in self.windows:
            use = np.zeros(cell_free.shape, dtype=np.int64)
            for g in range(k):
                rank = start + (g if flipped else k - 1 - g)  # largest on the roomier rank
                use[rows, order[:, rank]] += self.cells[g]
            out.append(use)
        return out


Shapes = list[I64] | Ranked
"""A flavor's landing shapes: host-independent footprints, or `Ranked` (wider tables)."""


def fixed_shapes(d: Demand) -> list[I64]:
    """The host-independent footprints (cells x columns) an instance of `d` may take on a
    two-cell table (on a wider one, `landing_shapes`)."""
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


def landing_shapes(table: HostTable, flavor: str) -> Shapes:
    """The shapes the planner values for `flavor` on this table (module doc)."""
    d = table.demand(flavor)
    cells = table.cell_free.shape[1]
    if cells == 2:
        return fixed_shapes(d)
    if d.pci.any() or d.mode not in (NumaMode.SINGLE, NumaMode.EVEN, NumaMode.FIXED):
        return []
    k = len(d.cells)
    if k > cells:
        return []
    order = sorted(range(k), key=lambda g: d.cells[g, :CELL_BASE].tolist(), reverse=True)
    guest = d.cells[order].copy()
    unequal = any(not np.array_equal(guest[0], row) for row in guest[1:])
    windows = [
        (s, f) for s in range(cells - k + 1) for f in ((False, True) if unequal else (False,))
    ]
    unit = guest.min(axis=0)
    return Ranked(cells=guest, unit=unit, windows=tuple(windows))


def _uses(shapes: Shapes, cell_free: I64) -> list[I64]:
    """Per shape, its footprint on each of these hosts (broadcast when host-independent)."""
    if isinstance(shapes, Ranked):
        return shapes.uses(cell_free)
    return [np.broadcast_to(s, cell_free.shape) for s in shapes]


def insert_values(
    value: HostValue, table: HostTable, flavor: str, rows: I64, shapes: Shapes
) -> tuple[F64, I64]:
    """Per row: the host's value with one more `flavor` in its best shape (-inf when it does
    not fit), and that shape's index in `shapes` (`RULE` for the rule's footprint)."""
    d = table.demand(flavor)
    cell_free, host_free = table.free_rows(rows)
    n_after = table.n_instances[rows].astype(np.int64) + 1
    cell_use, host_use = preview.place_rows(table, d, rows, (cell_free, host_free))
    fits = vector.count(d, cell_free, host_free, limit=1) >= 1
    best = np.where(
        fits, value.of(rows, cell_free - cell_use, host_free - host_use, n_after), -np.inf
    )
    shape = np.full(rows.size, RULE, dtype=np.int64)
    host_ok = (host_free >= d.host).all(axis=1)
    for k, use in enumerate(_uses(shapes, cell_free)):
        ok = host_ok & (cell_free >= use).all(axis=(1, 2))
        if not ok.any():
            continue
        after = value.of(rows, cell_free - use, host_free - d.host, n_after)
        better = ok & (after > best + EPS)
        best = np.where(better, after, best)
        shape = np.where(better, k, shape)
    return best, shape


def footprint(table: HostTable, flavor: str, row: int, shapes: Shapes, k: int) -> I64:
    """The cell footprint of shape `k` on `row` (the rule's when `k` is `RULE`)."""
    if k == RULE:
        rd = table.demand(flavor).rows
        cells = scalar.place(rd, table.cell_free[row].tolist(), table.distance.get(row))
        return np.array(cells, dtype=np.int64)
    if isinstance(shapes, Ranked):
        return shapes.uses(table.cell_free[row : row + 1])[k][0]
    return shapes[k].copy()


def shape_lists(shapes: Shapes) -> list[list[list[int]]] | Ranked:
    """`insert_one`'s form of a flavor's shapes: nested lists (host-independent), else as is."""
    return shapes if isinstance(shapes, Ranked) else [x.tolist() for x in shapes]


def insert_one(
    value: HostValue,
    table: HostTable,
    flavor: str,
    row: int,
    shapes: list[list[list[int]]] | Ranked,
) -> tuple[float, int]:
    """`insert_values` for one row in plain Python numbers (`HostValue.one`, `numa.scalar`):
    the same values bit for bit, without numpy's per-call cost on a single host. `shapes` are
    `insert_values`' shapes as `shape_lists` gives them."""
    rd = table.demand(flavor).rows
    cell_free: scalar.Cells = table.cell_free[row].tolist()
    host_free: list[int] = table.host_free[row].tolist()
    n_after = int(table.n_instances[row]) + 1
    best, shape = -np.inf, RULE
    if scalar.count(rd, cell_free, host_free) >= 1:
        use = scalar.place(rd, cell_free, table.distance.get(row))
        after = [scalar.minus(f, u) for f, u in zip(cell_free, use, strict=True)]
        best = value.one(row, after, scalar.minus(host_free, rd.host_use), n_after)
    if not len(shapes) or any(f < u for f, u in zip(host_free, rd.host_use, strict=True)):
        return best, shape
    host_after = scalar.minus(host_free, rd.host_use)
    uses: list[list[list[int]]] | list[scalar.Cells] = (
        [u[0].tolist() for u in shapes.uses(table.cell_free[row : row + 1])]
        if isinstance(shapes, Ranked)
        else shapes
    )
    seen: dict[tuple[object, ...], float] = {}
    for k, use in enumerate(uses):
        after = [scalar.minus(f, u) for f, u in zip(cell_free, use, strict=True)]
        if any(x < 0 for cell in after for x in cell):
            continue
        key = _same_value(after)
        v = seen.get(key) if key is not None else None
        if v is None:
            v = value.one(row, after, host_after, n_after)
            if key is not None:
                seen[key] = v
        if v > best + EPS:
            best, shape = v, k
    return best, shape


def _same_value(cells: scalar.Cells) -> tuple[object, ...] | None:
    """A key shared by the states whose value is the same: on a host with room beyond its first
    two cells every count reads the cells as a multiset (`numa.wide`: sums, sorted slots, the
    search's canonical state), so the sorted cells; None on two cells or where only the first
    two have room (the two-cell forms read which cell is which)."""
    if len(cells) <= 2 or not any(x for cell in cells[2:] for x in cell):
        return None
    return tuple(sorted(tuple(cell) for cell in cells))
