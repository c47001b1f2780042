"""The claim rule (`rule`) on every host at once, vectorised with numpy: count, fit, place.

* `count(d, cell_free, host_free)`: how many more instances of a flavor fit on each host.
* `place(d, cell_free, host_free)`: what one more instance takes from each host by the claim
  rule (`rule`: its clauses are named in the branches below).
* fit is simply ``count(...) >= 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.flavors import NumaMode
from berth.core.numa import wide
from berth.core.numa.rule import BIG as NO_LIMIT
from berth.core.resources import CELL_BASE

I64 = npt.NDArray[np.int64]
BIG = np.int64(NO_LIMIT)


def resource_major(a: Any) -> Any:
    """The same (hosts, ...) array stored with the host axis last in memory.

    Indexing is unchanged (``a[row, cell, column]``), but each resource column is one contiguous
    run over all hosts, so the vectorised per-column arithmetic of filters and capacity counts
    streams through memory instead of striding across it.
    """
    return np.ascontiguousarray(a.T).T


def take(a: I64, rows: I64) -> I64:
    """Rows of a table column, keeping the resource-major layout (see `resource_major`)."""
    return a.T[..., rows].T


def _units(cell_free: I64, vec: I64) -> I64:
    """Per host and cell: how many copies of `vec` fit (shape (n, 2); `wide.units` on any
    cell axis).

    One pass per requested column over contiguous memory; reducing over the short column axis
    instead would be several times slower in numpy.
    """
    out = np.full_like(cell_free[:, :, 0], BIG)  # same memory order as the columns
    for col in np.flatnonzero(vec):
        np.minimum(out, cell_free[:, :, col] // vec[col], out=out)
    return np.maximum(out, 0, out=out)


def host_limit(d: Demand, host_free: I64, cell_free: I64) -> I64:
    """Instances allowed by the host-level columns and host-level PCI (shape (n,))."""
    out = np.full(host_free.shape[0], BIG, dtype=np.int64)
    for col in np.flatnonzero(d.host):
        np.minimum(out, host_free[:, col] // d.host[col], out=out)
    for p in np.flatnonzero(d.pci):
        if cell_free.shape[1] == 2:
            pci_free = cell_free[:, 0, CELL_BASE + p] + cell_free[:, 1, CELL_BASE + p]
        else:
            pci_free = wide.host_pci(cell_free, int(p))
        np.minimum(out, pci_free // d.pci[p], out=out)
    return np.maximum(out, 0, out=out)


def _fixed_count(a: I64, b: I64, free: I64, limit: int | None) -> I64:
    """Max x + y with x guests oriented (a->cell0, b->cell1) and y the other way round."""
    cols = np.flatnonzero(a + b)
    f0 = free[:, 0, cols]
    f1 = free[:, 1, cols]
    av, bv = a[cols], b[cols]
    with np.errstate(divide="ignore"):
        x_max = np.minimum(
            np.where(av > 0, f0 // np.maximum(av, 1), BIG).min(axis=1),
            np.where(bv > 0, f1 // np.maximum(bv, 1), BIG).min(axis=1),
        )
    x_max = np.maximum(x_max, 0)
    top = int(x_max.max(initial=0))
    if limit is not None:
        top = min(top, limit)
    best = np.zeros(free.shape[0], dtype=np.int64)
    for x in range(top + 1):
        r0 = f0 - x * av
        r1 = f1 - x * bv
        valid = (r0 >= 0).all(axis=1) & (r1 >= 0).all(axis=1)
        y = np.minimum(
            np.where(bv > 0, r0 // np.maximum(bv, 1), BIG).min(axis=1),
            np.where(av > 0, r1 // np.maximum(av, 1), BIG).min(axis=1),
        )
        best = np.where(valid, np.maximum(best, x + np.maximum(y, 0)), best)
    return best


def _flex_count(d: Demand, free: I64) -> I64:
    out = np.full(free.shape[0], BIG, dtype=np.int64)
    for col in np.flatnonzero(d.total[:CELL_BASE]):
        total, minimum = d.total[col], d.cells[0, col]
        f0, f1 = free[:, 0, col], free[:, 1, col]
        out = np.minimum(out, np.minimum((f0 + f1) // total, np.minimum(f0, f1) // minimum))
    return np.maximum(out, 0)


def two_cells(d: Demand, cell_free: I64) -> bool:
    """Whether the two-cell formulas below apply: a two-cell axis and a guest of at most two
    cells (else `wide`)."""
    return cell_free.shape[1] == 2 and d.guest_cells <= 2


def cell_count(d: Demand, cell_free: I64, limit: int | None = None) -> I64:
    """Instances allowed by the NUMA cells alone (shape (n,))."""
    if not two_cells(d, cell_free):
        return wide.cell_count(d, cell_free, limit, _two_cell_count)
    return _two_cell_count(d, cell_free, limit)


def _two_cell_count(d: Demand, cell_free: I64, limit: int | None) -> I64:
    mode = d.mode
    if mode == NumaMode.NONE:
        return np.full(cell_free.shape[0], BIG, dtype=np.int64)
    if mode == NumaMode.SINGLE:
        units = _units(cell_free, d.cells[0])
        return np.asarray(units[:, 0] + units[:, 1], dtype=np.int64)
    if mode == NumaMode.EVEN:
        units = _units(cell_free, d.cells[0])
        return np.minimum(units[:, 0], units[:, 1])  # not .min(axis=1): slow on a short axis
    if mode == NumaMode.FIXED:
        return _fixed_count(d.cells[0], d.cells[1], cell_free, limit)
    return _flex_count(d, cell_free)


def count(d: Demand, cell_free: I64, host_free: I64, limit: int | None = None) -> I64:
    """How many more instances fit on each host (NUMA cells, host columns and PCI together).

    `limit` bounds the answer (fit checks pass 1) and lets the FIXED search stop early.
    """
    out = np.minimum(cell_count(d, cell_free, limit), host_limit(d, host_free, cell_free))
    if limit is not None:
        out = np.minimum(out, limit)
    return out


def fits(d: Demand, cell_free: I64, host_free: I64) -> npt.NDArray[np.bool_]:
    return count(d, cell_free, host_free, limit=1) >= 1


def place(
    d: Demand, cell_free: I64, host_free: I64, distance: I64 | None = None
) -> tuple[I64, I64]:
    """What one more instance takes on each host: (cell_use (n, cells, w), host_use (n, h)).

    Only rows where the flavor fits are meaningful. `distance` (n, cells, cells): the hosts'
    NUMA distances, which steer a multi-cell guest on a host of more than two cells (`wide`).
    """
    if not two_cells(d, cell_free):
        return wide.place(d, cell_free, host_free, _two_cell_place, distance)
    return _two_cell_place(d, cell_free, host_free)


def _two_cell_place(d: Demand, cell_free: I64, host_free: I64) -> tuple[I64, I64]:
    n, cells, width = cell_free.shape
    cell_use = resource_major(np.zeros((n, cells, width), dtype=np.int64))
    host_use = resource_major(np.broadcast_to(d.host, host_free.shape))
    mode = d.mode
    rows = np.arange(n)
    first = None  # the cell the guest calls its own, for host-level PCI
    if mode == NumaMode.SINGLE:  # rule: the fitting cell with fewer slots, cell 0 on a tie
        units = _units(cell_free, d.cells[0])
        fit0, fit1 = units[:, 0] >= 1, units[:, 1] >= 1
        first = np.where(fit0 & fit1, (units[:, 1] < units[:, 0]).astype(np.int64), ~fit0 * 1)
        cell_use[rows, first] = d.cells[0]
    elif mode == NumaMode.EVEN:
        cell_use[:, 0] = d.cells[0]
        cell_use[:, 1] = d.cells[1]
    elif mode == NumaMode.FIXED:  # rule: (a, b) unless (b, a) fits and leaves more
        a, b = d.cells[0], d.cells[1]
        ab = np.stack([a, b])
        ba = np.stack([b, a])
        ok_ab = (cell_free >= ab).all(axis=(1, 2))
        ok_ba = (cell_free >= ba).all(axis=(1, 2))
        left_ab = _fixed_count(a, b, cell_free - ab, None)
        left_ba = _fixed_count(a, b, cell_free - ba, None)
        flip = ~ok_ab | (ok_ba & (left_ba > left_ab))
        cell_use[:] = np.where(flip[:, None, None], ba, ab)
    elif mode == NumaMode.FLEX:  # rule: the balanced leftover within the minimums
        for col in np.flatnonzero(d.total[:CELL_BASE]):
            total, minimum = d.total[col], d.cells[0, col]
            f0, f1 = cell_free[:, 0, col], cell_free[:, 1, col]
            lo = np.maximum(minimum, total - f1)
            hi = np.minimum(total - minimum, f0)
            share = np.clip((f0 - f1 + total) // 2, lo, np.maximum(lo, hi))
            cell_use[:, 0, col] = share
            cell_use[:, 1, col] = total - share
    for p in np.flatnonzero(d.pci):  # rule: own cell first, else the one with more free
        col = CELL_BASE + p
        want = d.pci[p]
        free0, free1 = cell_free[:, 0, col], cell_free[:, 1, col]
        own = first if first is not None else (free1 > free0).astype(np.int64)
        own_free = np.where(own == 0, free0, free1)
        take = np.minimum(want, np.maximum(own_free, 0))
        cell_use[rows, own, col] += take
        cell_use[rows, 1 - own, col] += want - take
    return cell_use, host_use
