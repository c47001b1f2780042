"""The exact defragmentation model's NUMA shapes on hosts of more than two cells.

On two cells `defrag_exact` lists the shapes (a cell, an orientation). On n cells a guest of k
cells has C(n, k) cell sets, or up to n!/(n-k)! maps with unequal cells, so this module states
them as an assignment instead, with cells as bins inside the host (docs/defrag.md):

* **one instance** (`options`): binary ``z[i][c]`` = a guest cell of shape type i sits on host
  cell c; ``sum_c z[i][c] = mult_i x`` (every guest cell placed when the option x is taken) and
  ``sum_i z[i][c] <= 1`` (one guest cell per host cell). Host-level PCI devices are an integer
  split over every cell; devices that must sit in the guest's own cells (`wide.local_pci`) only
  on cells the guest takes.
* **slots** (`slots`): how many more of a flavor fit, exactly as `numa.wide` counts: integer
  ``x[i][c]`` guest cells of type i on cell c and the count t with ``sum_c x[i][c] = mult_i t``
  and ``sum_i x[i][c] <= t``; by König's edge-colouring theorem those x split into t guests on
  distinct cells (docs/numa.md, "Hosts of up to eight cells"). One type of multiplicity k is the
  EVEN count ``max t with sum_c min(u_c, t) >= k t``; a one-cell guest is the sum of the cells.

The search refuses some roomy states for FIXED flavors of many cell shapes (count 0,
`numa.search.SWEEP_STATES`); the model counts them, which can only raise the optimum, so it
stays an upper bound. Not modelled on these hosts (`ExactUnsupportedError`): flexible splits (no
exact rule) and slots of flavors with cell-local PCI devices (the count is a search over
device splits).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.errors import BerthError
from berth.core.flavors import NumaMode
from berth.core.numa import wide
from berth.core.resources import CELL_BASE
from berth.solvers._mip import Model, Use, add

I64 = npt.NDArray[np.int64]


class ExactUnsupportedError(BerthError):
    """The exact model does not cover this flavor on hosts of more than two cells."""


def _types(d: Demand) -> list[tuple[I64, int]]:
    """The guest's distinct cell shapes (columns) and how many of its cells have each."""
    out: list[tuple[I64, int]] = []
    for row in d.cells:
        for i, (shape, mult) in enumerate(out):
            if np.array_equal(shape, row):
                out[i] = (shape, mult + 1)
                break
        else:
            out.append((row, 1))
    return out


def _refuse_flex(d: Demand) -> None:
    if d.mode == NumaMode.FLEX:
        raise ExactUnsupportedError(
            f"flavor {d.spec.name!r}: flexible splits on hosts of more than two cells are not "
            "modelled by the exact optimum"
        )


def options(model: Model, d: Demand, use: Use, n_cells: int) -> list[int]:
    """One instance of `d` on a host of `n_cells` cells: one option variable, its cells by
    assignment (module doc); the footprints go to `use`."""
    _refuse_flex(d)
    x = model.var(1.0)
    taken: dict[int, dict[int, float]] = {c: {} for c in range(n_cells)}
    if d.mode != NumaMode.NONE:
        per_cell: dict[int, dict[int, float]] = {c: {} for c in range(n_cells)}
        for shape, mult in _types(d):
            placed: dict[int, float] = {x: -float(mult)}
            for c in range(n_cells):
                z = model.var(1.0)
                placed[z] = 1.0
                per_cell[c][z] = 1.0
                taken[c][z] = 1.0
                for col in np.flatnonzero(shape):
                    add(use, c, int(col), z, float(shape[col]))
            model.row(placed, 0.0, 0.0)
        for c in range(n_cells):
            model.row(per_cell[c], -np.inf, 1.0)
    for col in np.flatnonzero(d.host):
        add(use, -1, int(col), x, float(d.host[col]))
    local = wide.local_pci(d)
    for p in np.flatnonzero(d.pci):
        need, pcol = float(d.pci[p]), CELL_BASE + int(p)
        split: dict[int, float] = {x: -need}
        for c in range(n_cells):
            s = model.var(need)
            split[s] = 1.0
            add(use, c, pcol, s, 1.0)
            if local:  # only from the guest's own cells
                model.row({s: 1.0, **dict.fromkeys(taken[c], -need)}, -np.inf, 0.0)
        model.row(split, 0.0, 0.0)
    return [x]


def slots(
    model: Model, d: Demand, weight: float, n_cells: int, top: float
) -> tuple[Use, list[int]]:
    """Slot variables counting how many more `d` fit on a host of `n_cells` cells (module doc):
    the count t (weighted in the objective) first, then the per-cell guest cells."""
    _refuse_flex(d)
    if wide.local_pci(d):
        raise ExactUnsupportedError(
            f"flavor {d.spec.name!r}: slots of guests whose PCI devices must sit in their own "
            "cells are not modelled on hosts of more than two cells"
        )
    use: Use = {}
    t = model.var(top, cost=weight)
    if d.mode != NumaMode.NONE:
        per_cell: dict[int, dict[int, float]] = {c: {t: -1.0} for c in range(n_cells)}
        for shape, mult in _types(d):
            placed: dict[int, float] = {t: -float(mult)}
            for c in range(n_cells):
                xc = model.var(top * mult)
                placed[xc] = 1.0
                per_cell[c][xc] = 1.0
                for col in np.flatnonzero(shape):
                    add(use, c, int(col), xc, float(shape[col]))
            model.row(placed, 0.0, 0.0)
        if len(d.cells) > 1:  # one guest cell per host cell and guest (a single cell: trivially)
            for c in range(n_cells):
                model.row(per_cell[c], -np.inf, 0.0)
    for col in np.flatnonzero(d.host):
        add(use, -1, int(col), t, float(d.host[col]))
    return use, [t]


def top(d: Demand, cell_cap: I64, host_cap: I64) -> I64:
    """Per host, an upper bound on the count of `d` from the columns alone (its cells' total
    need against the cells' sums, the host columns, host-level PCI): never below the exact
    count, and not refused where the search refuses a roomy state."""
    bound = np.full(cell_cap.shape[0], 1 << 20, dtype=np.int64)
    for col in np.flatnonzero(d.host):
        np.minimum(bound, host_cap[:, col] // d.host[col], out=bound)
    if d.mode != NumaMode.NONE:
        total = d.cells.sum(axis=0)
        for col in np.flatnonzero(total):
            np.minimum(bound, cell_cap[:, :, col].sum(axis=1) // total[col], out=bound)
        holds: npt.NDArray[np.bool_] = np.zeros(cell_cap.shape[:2], dtype=bool)
        for row in d.cells:  # cells that hold some guest cell
            holds |= (cell_cap >= row[None, None, :]).all(axis=2)
        bound = np.where(holds.sum(axis=1) >= len(d.cells), bound, 0)
    for p in np.flatnonzero(d.pci):
        pcol = CELL_BASE + int(p)
        np.minimum(bound, cell_cap[:, :, pcol].sum(axis=1) // int(d.pci[p]), out=bound)
    out: I64 = np.maximum(bound, 0)
    return out
