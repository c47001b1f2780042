"""The claim rule's footprint on many hosts at once, as `HostTable.plan_for` would claim it.

Weighers (the lost reference capacity of `fragmentation` and `slot_loss`) and the defrag
planner preview "one more instance here" on many hosts before anything is claimed. The claim
rule steers a multi-cell guest on a host of more than two cells by the host's NUMA distances
(docs/numa.md), so a preview that ignored them could predict other cells than the claim makes
and value the wrong leftover. Every preview goes through `place_rows`, which hands the rule
the same distances `plan_for` does (`numa.wide.distances_on`, the one reading of a host's
`numa_distances`); the rule itself stays in `numa`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.numa import vector, wide
from berth.core.table import HostTable

I64 = npt.NDArray[np.int64]

_KEY = ("berth.preview distances",)
"""`HostTable.state` key of every host's distances on the table's cell axis (`state` is dropped
by `copy` and `add_hosts`, the only ways a table's distances change)."""


def distances(table: HostTable, rows: I64 | None) -> I64 | None:
    """(rows, cells, cells): the NUMA distances the claim rule reads on these hosts (None =
    every host); None when the table's axis is two wide (the two-cell rule reads none) or no
    host reports a matrix."""
    cells = table.cell_free.shape[1]
    if cells <= 2 or not table.distance:
        return None

    def build() -> I64 | None:
        return wide.distances_on([table.distance.get(r) for r in range(len(table))], cells)

    every: I64 | None = table.state(_KEY, build)
    if every is None or rows is None:
        return every
    return every[rows]


def place_rows(
    table: HostTable, d: Demand, rows: I64 | None, free: tuple[I64, I64] | None = None
) -> tuple[I64, I64]:
    """(cell_use, host_use) of one more instance of `d` on each of these hosts (None = every
    host) by the claim rule, exactly `HostTable.plan_for`'s footprint where the flavor fits.
    `free`: the rows' `free_rows`, when the caller has them already."""
    cell_free, host_free = table.free_rows(rows) if free is None else free
    return vector.place(d, cell_free, host_free, distances(table, rows))
