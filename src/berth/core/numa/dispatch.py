"""The cheaper copy of the claim rule's count for a number of hosts: `compiled` or `vector`."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.numa import compiled, vector

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
