"""The claim rule (`rule`) on ONE host, in plain Python integers: `vector.count` and `place`.

Why: a claim's footprint (`HostTable.plan_for`) and the defragmentation planner's trial moves
(which keep hosts as Python lists) need the rule on one host at a time. A numpy call costs ~1 µs
whatever the size of its array, and `vector.count` makes ten or more of them, so for one row
plain integer arithmetic is several times cheaper (docs/numa.md compares it with a compiled
one-host call). These functions mirror `vector` line for line (same clauses of `rule`, same
floor division, same clamps, a division by a zero minimum giving 0 as numpy's integer division
does); `tests/core/test_numa_rows.py` checks with Hypothesis that they give exactly the
vectorised results on random hosts, free amounts (negative included) and flavors of every NUMA
mode, with PCI devices and huge pages.

The flavor's constants come from `Demand.rows` (Python integers, computed once per flavor).
A host's state is ``(cell_free, host_free)``: ``cell_free`` a list of the cells' column lists
(``cell_free[c][col]``), ``host_free`` the host columns, as ``ndarray.tolist()`` gives them.
"""

from __future__ import annotations

import numpy as np

from berth.core.demand import Cols, RowDemand
from berth.core.flavors import NumaMode
from berth.core.numa import vector, wide
from berth.core.numa.rule import BIG

Cells = list[list[int]]


def minus(free: list[int], use: list[int]) -> list[int]:
    """Element-wise ``free - use``."""
    return [f - u for f, u in zip(free, use, strict=True)]


def _units(free: list[int], units: Cols) -> int:
    out = BIG
    for col, v in units:
        q = free[col] // v
        if q < out:
            out = q
    return out if out > 0 else 0


def host_limit(rd: RowDemand, cell_free: Cells, host_free: list[int]) -> int:
    out = BIG
    for col, v in rd.host:
        q = host_free[col] // v
        if q < out:
            out = q
    for col, v in rd.pci:
        q = sum(cell[col] for cell in cell_free) // v
        if q < out:
            out = q
    return out if out > 0 else 0


def two_cells(rd: RowDemand, cell_free: Cells) -> bool:
    """`vector.two_cells`: the two-cell arithmetic below applies (else `wide`, through numpy)."""
    return len(cell_free) == 2 and rd.source.guest_cells <= 2


def _fixed_count(fixed: tuple[tuple[int, int, int], ...], f0: list[int], f1: list[int]) -> int:
    """`vector._fixed_count` for one host (no limit: the weigher never passes one)."""
    xa = xb = BIG
    for col, a, b in fixed:
        if a > 0:
            xa = min(xa, f0[col] // a)
        if b > 0:
            xb = min(xb, f1[col] // b)
    top = max(min(xa, xb), 0)
    best = 0
    for x in range(top + 1):
        valid = True
        y = BIG
        for col, a, b in fixed:
            r0, r1 = f0[col] - x * a, f1[col] - x * b
            if r0 < 0 or r1 < 0:
                valid = False
                break
            if b > 0:
                y = min(y, r0 // b)
            if a > 0:
                y = min(y, r1 // a)
        if valid:
            best = max(best, x + max(y, 0))
    return best


def cell_count(rd: RowDemand, cell_free: Cells) -> int:
    if not two_cells(rd, cell_free):
        arr = np.array([cell_free], dtype=np.int64)
        return int(vector.cell_count(rd.source, arr)[0])
    mode = rd.mode
    if mode == NumaMode.NONE:
        return BIG
    if mode == NumaMode.SINGLE:
        return _units(cell_free[0], rd.units) + _units(cell_free[1], rd.units)
    if mode == NumaMode.EVEN:
        return min(_units(cell_free[0], rd.units), _units(cell_free[1], rd.units))
    if mode == NumaMode.FIXED:
        return _fixed_count(rd.fixed, cell_free[0], cell_free[1])
    out = BIG
    f0, f1 = cell_free[0], cell_free[1]
    for col, total, minimum in rd.flex:
        a, b = f0[col], f1[col]
        by_min = min(a, b) // minimum if minimum else 0  # numpy: integer x // 0 == 0
        out = min(out, (a + b) // total, by_min)
    return out if out > 0 else 0


def count(rd: RowDemand, cell_free: Cells, host_free: list[int]) -> int:
    """`vector.count(d, ...)` for one host (without `limit`)."""
    if rd.mode == NumaMode.NONE:  # no cell limit: the host columns alone
        return host_limit(rd, cell_free, host_free)
    return min(cell_count(rd, cell_free), host_limit(rd, cell_free, host_free))


def place(rd: RowDemand, cell_free: Cells, distance: list[list[int]] | None = None) -> Cells:
    """`vector.place(d, ...)[0]` for one host: the cells' use (the host use is `Demand.host`);
    `distance`: the host's NUMA distances (hosts of more than two cells)."""
    if not two_cells(rd, cell_free):
        d = rd.source
        arr = np.array([cell_free], dtype=np.int64)
        host = np.zeros((1, len(rd.host_use)), dtype=np.int64)
        dist = wide.distances_on([distance], len(cell_free))
        use: Cells = vector.place(d, arr, host, dist)[0][0].tolist()
        return use
    zero = [0] * rd.width
    mode = rd.mode
    first = -1  # the guest's own cell for host-level PCI; -1: per device type
    if mode == NumaMode.SINGLE:  # rule: the fitting cell with fewer slots, cell 0 on a tie
        u0, u1 = _units(cell_free[0], rd.units), _units(cell_free[1], rd.units)
        first = (1 if u1 < u0 else 0) if u0 >= 1 and u1 >= 1 else (0 if u0 >= 1 else 1)
        use = [list(rd.cells[0]), zero] if first == 0 else [zero, list(rd.cells[0])]
    elif mode == NumaMode.EVEN:
        use = [list(rd.cells[0]), list(rd.cells[1])]
    elif mode == NumaMode.FIXED:  # rule: (a, b) unless (b, a) fits and leaves more
        a, b = rd.cells[0], rd.cells[1]
        f0, f1 = cell_free[0], cell_free[1]
        ok_ab = all(x >= y for x, y in zip(f0, a, strict=True)) and all(
            x >= y for x, y in zip(f1, b, strict=True)
        )
        ok_ba = all(x >= y for x, y in zip(f0, b, strict=True)) and all(
            x >= y for x, y in zip(f1, a, strict=True)
        )
        flip = not ok_ab
        if not flip and ok_ba:
            left_ab = _fixed_count(rd.fixed, minus(f0, a), minus(f1, b))
            left_ba = _fixed_count(rd.fixed, minus(f0, b), minus(f1, a))
            flip = left_ba > left_ab
        use = [list(b), list(a)] if flip else [list(a), list(b)]
    elif mode == NumaMode.FLEX:  # rule: the balanced leftover within the minimums
        use = [list(zero), list(zero)]
        for col, total, minimum in rd.flex:
            c0, c1 = cell_free[0][col], cell_free[1][col]
            lo = max(minimum, total - c1)
            hi = max(lo, min(total - minimum, c0))
            share = min(max((c0 - c1 + total) // 2, lo), hi)
            use[0][col] = share
            use[1][col] = total - share
    else:
        use = [list(zero), list(zero)]
    for col, want in rd.pci:  # rule: own cell first, else the one with more free
        free0, free1 = cell_free[0][col], cell_free[1][col]
        own = first if first >= 0 else (1 if free1 > free0 else 0)
        own_free = free0 if own == 0 else free1
        took = min(want, max(own_free, 0))
        use[own][col] += took
        use[1 - own][col] += want - took
    return use
