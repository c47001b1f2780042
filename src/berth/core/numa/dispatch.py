"""The cheaper copy of the claim rule for a number of hosts (`compiled` or `vector`) and for
one host's footprint (`compiled` or `scalar`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core import kernels
from berth.core.demand import Demand
from berth.core.numa import compiled, scalar, vector

I64 = npt.NDArray[np.int64]

KERNEL_ROWS = 64
"""Up to this many hosts, the compiled pass; a refresh of more hosts (a cold cache, a full
table) goes through `vector`'s functions, which cost less per host (the kernels walk each
host's modes and loops one at a time: about 0.2 µs per host and flavor against numpy's
0.03 µs, but no fixed cost of 15-20 numpy calls)."""


def count_on(
    d: Demand, cell_free: I64, host_free: I64, rows: I64 | None, *, cells_only: bool = False
) -> I64:
    """`vector.count` of `d` on `rows` (None: every host), the cheaper way for their number: the
    compiled pass (`compiled.counts`) up to `KERNEL_ROWS` hosts, numpy's vectorised count
    beyond, and always numpy on a cell axis wider than two or for a guest of more than two
    cells (the kernels hold the two-cell rule only; docs/numa.md). With `cells_only`, the
    cells' count alone, to compare with 1 only (numpy stops counting at 1)."""
    if rows is not None and rows.size <= KERNEL_ROWS and vector.two_cells(d, cell_free):
        out = np.empty(rows.size, dtype=np.int64)
        compiled.counts(cell_free, host_free, rows, d.packed, cells_only, out)
        return out
    if rows is not None:
        cell_free, host_free = vector.take(cell_free, rows), vector.take(host_free, rows)
    if cells_only:
        return vector.cell_count(d, cell_free, limit=1)
    return vector.count(d, cell_free, host_free)


def place_on(
    d: Demand, cell_free: I64, host_free: I64, row: int, distance: list[list[int]] | None
) -> I64:
    """`scalar.place` of `d` on host `row` (its cells' use), the cheaper way: the compiled
    two-cell rule (`compiled.place_row`) for a guest of at most two cells on a two-cell table,
    and on a wider table's host whose cells beyond the first two are empty when that
    footprint fits (then it is the rule's: `wide` places such a host as two cells,
    docs/numa.md); else `scalar.place` (`distance`: the host's NUMA distances)."""
    if d.guest_cells <= 2 and 0 <= row < cell_free.shape[0]:
        if cell_free.shape[1] == 2:
            return compiled.place_row(cell_free, row, d.packed)
        if not cell_free[row, 2:].any():
            use = np.zeros(cell_free.shape[1:], dtype=np.int64)
            use[:2] = compiled.place_row(cell_free, row, d.packed)
            if kernels.footprint_fits(cell_free, host_free, row, use, d.host):
                return use
    cells = scalar.place(d.rows, cell_free[row].tolist(), distance)
    return np.array(cells, dtype=np.int64)
