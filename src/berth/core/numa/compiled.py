"""The claim rule (`rule`) on some hosts, compiled with numba: `scalar`, line for line.

`vector` computes how many more instances of a flavor fit (`count`) and what one more takes
(`place`) for every host at once with numpy; `scalar` does the same for one host in Python
integers. The caches that follow the table (counts, cell fits, the fragmentation weigher's
cost) recompute the hosts changed since they were last read: usually tens of hosts, too few for
numpy's fixed cost per call and too many for Python. These kernels run `scalar`'s integer
arithmetic over those hosts in one compiled pass (`jit.compile_kernel`); `dispatch` chooses
them or `vector` by the number of hosts. `tests/core/test_numa_rows.py` holds them to `vector`
on every mode, negative amounts included.

A flavor comes packed as arrays (`demand.PackedDemand`): its mode (`flavors.NumaMode` as an
int), (column, amount) pairs and (column, a, b) / (column, total, minimum) triples. The helpers
take one host's two cell vectors ``c0``, ``c1`` (and host vector ``hf``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core import jit
from berth.core.demand import PackedDemand, PackedReferences
from berth.core.numa.rule import BIG

I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]

_HELPERS = ("_units1", "_fixed_count1", "_cell_count1", "_host_limit1", "_place1")


def _units1(c: Any, units: I64) -> int:
    out = BIG
    for k in range(units.shape[0]):
        q = c[units[k, 0]] // units[k, 1]
        out = q if q < out else out
    return out if out > 0 else 0


def _fixed_count1(f0: Any, f1: Any, fixed: I64) -> int:
    """x guests as (a, b), then as many as fit as (b, a): the best x (`scalar._fixed_count`)."""
    xa = xb = BIG
    for k in range(fixed.shape[0]):
        col, a, b = fixed[k, 0], fixed[k, 1], fixed[k, 2]
        if a > 0:
            xa = min(xa, f0[col] // a)
        if b > 0:
            xb = min(xb, f1[col] // b)
    top = max(min(xa, xb), 0)
    best = 0
    for x in range(top + 1):
        valid = True
        y = BIG
        for k in range(fixed.shape[0]):
            col, a, b = fixed[k, 0], fixed[k, 1], fixed[k, 2]
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


def _cell_count1(c0: Any, c1: Any, mode: int, units: I64, fixed: I64, flex: I64) -> int:
    if mode == 0:  # NONE
        return BIG
    if mode == 1:  # SINGLE: either cell
        return _units1(c0, units) + _units1(c1, units)
    if mode == 2:  # EVEN: both cells
        return min(_units1(c0, units), _units1(c1, units))
    if mode == 3:  # FIXED
        return _fixed_count1(c0, c1, fixed)
    out = BIG  # FLEX
    for k in range(flex.shape[0]):
        col, total, minimum = flex[k, 0], flex[k, 1], flex[k, 2]
        a, b = c0[col], c1[col]
        by_min = min(a, b) // minimum if minimum else 0  # numpy: integer x // 0 == 0
        out = min(out, (a + b) // total, by_min)
    return out if out > 0 else 0


def _host_limit1(c0: Any, c1: Any, hf: Any, host: I64, pci: I64) -> int:
    out = BIG
    for k in range(host.shape[0]):
        q = hf[host[k, 0]] // host[k, 1]
        out = q if q < out else out
    for k in range(pci.shape[0]):
        col = pci[k, 0]
        q = (c0[col] + c1[col]) // pci[k, 1]
        out = q if q < out else out
    return out if out > 0 else 0


def _place1(
    c0: Any,
    c1: Any,
    mode: int,
    cells: I64,
    units: I64,
    fixed: I64,
    pci: I64,
    flex: I64,
    use0: I64,
    use1: I64,
) -> None:
    """What one more instance takes of each cell (`scalar.place`), into `use0`, `use1`."""
    width = use0.size
    use0[:] = 0
    use1[:] = 0
    first = -1  # the guest's own cell for host-level PCI; -1: per device type
    if mode == 1:  # SINGLE; rule: the fitting cell with fewer slots, cell 0 on a tie
        u0, u1 = _units1(c0, units), _units1(c1, units)
        first = (1 if u1 < u0 else 0) if u0 >= 1 and u1 >= 1 else (0 if u0 >= 1 else 1)
        if first == 0:
            use0[:] = cells[0]
        else:
            use1[:] = cells[0]
    elif mode == 2:  # EVEN
        use0[:] = cells[0]
        use1[:] = cells[1]
    elif mode == 3:  # FIXED; rule: (a, b) unless (b, a) fits and leaves more
        ok_ab = ok_ba = True
        for j in range(width):
            a, b = cells[0, j], cells[1, j]
            ok_ab = ok_ab and c0[j] >= a and c1[j] >= b
            ok_ba = ok_ba and c0[j] >= b and c1[j] >= a
        flip = not ok_ab
        if not flip and ok_ba:
            left_ab = _fixed_count1(c0 - cells[0], c1 - cells[1], fixed)
            left_ba = _fixed_count1(c0 - cells[1], c1 - cells[0], fixed)
            flip = left_ba > left_ab
        if flip:
            use0[:] = cells[1]
            use1[:] = cells[0]
        else:
            use0[:] = cells[0]
            use1[:] = cells[1]
    elif mode == 4:  # FLEX; rule: the balanced leftover within the minimums
        for k in range(flex.shape[0]):
            col, total, minimum = flex[k, 0], flex[k, 1], flex[k, 2]
            f0, f1 = c0[col], c1[col]
            lo = max(minimum, total - f1)
            hi = max(lo, min(total - minimum, f0))
            share = min(max((f0 - f1 + total) // 2, lo), hi)
            use0[col] = share
            use1[col] = total - share
    for k in range(pci.shape[0]):  # rule: own cell first, else the one with more free
        col, want = pci[k, 0], pci[k, 1]
        free0, free1 = c0[col], c1[col]
        own = first if first >= 0 else (1 if free1 > free0 else 0)
        own_free = free0 if own == 0 else free1
        took = min(want, max(own_free, 0))
        if own == 0:
            use0[col] += took
            use1[col] += want - took
        else:
            use1[col] += took
            use0[col] += want - took


def _place_row(
    cell_free: I64,
    row: int,
    mode: int,
    cells: I64,
    units: I64,
    fixed: I64,
    pci: I64,
    flex: I64,
    out: I64,
) -> None:
    c0, c1 = cell_free[row, 0], cell_free[row, 1]
    _place1(c0, c1, mode, cells, units, fixed, pci, flex, out[0], out[1])


def place_row(cell_free: I64, row: int, packed: Any) -> I64:
    """`scalar.place` of the flavor `packed` on one host of a two-cell table: what one more
    instance takes of each cell, shape (2, width). `row` must be a row of `cell_free`."""
    kernel = jit.compile_kernel(_place_row, globals(), helpers=_HELPERS)
    d = packed
    out = np.empty((2, cell_free.shape[2]), dtype=np.int64)
    kernel(cell_free, row, d.mode, d.cells, d.units, d.fixed, d.pci, d.flex, out)
    return out


def _counts(
    cell_free: I64,
    host_free: I64,
    rows: I64,
    mode: int,
    host: I64,
    pci: I64,
    units: I64,
    fixed: I64,
    flex: I64,
    cells_only: bool,
    out: I64,
) -> None:
    for r in range(rows.size):
        h = rows[r]
        c0, c1 = cell_free[h, 0], cell_free[h, 1]
        cells = _cell_count1(c0, c1, mode, units, fixed, flex)
        if cells_only:
            out[r] = cells
        elif mode == 0:
            out[r] = _host_limit1(c0, c1, host_free[h], host, pci)
        else:
            out[r] = min(cells, _host_limit1(c0, c1, host_free[h], host, pci))


def counts(
    cell_free: I64, host_free: I64, rows: I64, packed: Any, cells_only: bool, out: I64
) -> None:
    """`scalar.count` (with `cells_only`: `scalar.cell_count`) of the flavor `packed`
    (`demand.PackedDemand`) on each of `rows`, into ``out[:len(rows)]``: how many more
    instances fit, NUMA-exactly, in integers ("no limit" is 2**40)."""
    kernel = jit.compile_kernel(_counts, globals(), helpers=_HELPERS)
    d = packed
    args = (cell_free, host_free, rows, d.mode, d.host, d.pci, d.units, d.fixed, d.flex)
    kernel(*args, cells_only, out)


def _lost(
    cell_free: I64,
    host_free: I64,
    rows: I64,
    before: I32,
    mode: int,
    cells: I64,
    units: I64,
    fixed: I64,
    pci: I64,
    flex: I64,
    host_use: I64,
    ref_modes: I64,
    ref_vcpus: I64,
    ref_at: I64,
    ref_host: I64,
    ref_pci: I64,
    ref_units: I64,
    ref_fixed: I64,
    ref_flex: I64,
    out: F32,
) -> None:
    width = cell_free.shape[2]
    use0 = np.empty(width, dtype=np.int64)
    use1 = np.empty(width, dtype=np.int64)
    for r in range(rows.size):
        total = np.float32(0.0)
        h = rows[r]
        any_room = False
        for f in range(ref_modes.size):
            any_room = any_room or before[r, f] != 0
        if any_room:
            c0, c1, hf = cell_free[h, 0], cell_free[h, 1], host_free[h]
            _place1(c0, c1, mode, cells, units, fixed, pci, flex, use0, use1)
            a0, a1, ha = c0 - use0, c1 - use1, hf - host_use
            for f in range(ref_modes.size):
                if before[r, f] == 0:  # no room before: none after (count is monotone)
                    continue
                at = ref_at[f]  # this reference's slice of each pack
                m = ref_modes[f]
                hp, pp = ref_host[at[0] : at[1]], ref_pci[at[2] : at[3]]
                after = _host_limit1(a0, a1, ha, hp, pp)
                if m != 0:
                    u, x = ref_units[at[4] : at[5]], ref_fixed[at[6] : at[7]]
                    fl = ref_flex[at[8] : at[9]]
                    after = min(_cell_count1(a0, a1, m, u, x, fl), after)
                lost = ref_vcpus[f] * (np.int64(before[r, f]) - after)
                total = np.float32(np.float64(total) + np.float64(lost))  # as numpy's +=
        out[r] = total


def lost_capacity(
    cell_free: I64,
    host_free: I64,
    rows: I64,
    before: I32,
    placed: Any,
    refs: Any,
    out: F32,
) -> None:
    """The fragmentation weigher's cost on each of `rows` (``out[:len(rows)]``): the vCPUs of
    reference capacity one more instance of `placed` (placed by the claim rule) destroys,
    ``sum_f vcpus_f * (before_f - count_f(after))``, accumulated in float32 reference by
    reference as the weigher's numpy formula does. `before` (rows, references): the counts
    before, capped to int32 (`fragmentation.reference_counts`); `refs`: `PackedReferences`."""
    kernel = jit.compile_kernel(_lost, globals(), helpers=_HELPERS)
    p = placed
    kernel(
        cell_free,
        host_free,
        rows,
        before,
        p.mode,
        p.cells,
        p.units,
        p.fixed,
        p.pci,
        p.flex,
        p.host_use,
        refs.modes,
        refs.vcpus,
        refs.at,
        refs.host,
        refs.pci,
        refs.units,
        refs.fixed,
        refs.flex,
        out,
    )


@jit.warm_up
def compile_all() -> None:
    """Compile the kernels for a table's resource-major columns (run by `jit.prepare`)."""
    cell_free = np.zeros((2, 2, 2), dtype=np.int64, order="F")  # resource-major, as the table's
    host_free = np.zeros((2, 2), dtype=np.int64, order="F")
    pairs, triples = np.ones((1, 2), np.int64), np.ones((1, 3), np.int64)
    width = cell_free.shape[2]
    cells, host_use = np.ones((1, width), np.int64), np.zeros(host_free.shape[1], np.int64)
    packed = PackedDemand(1, pairs, pairs, pairs, triples, triples, cells, host_use)
    rows, out = np.zeros(1, np.int64), np.empty(1, np.int64)
    for cells_only in (False, True):
        counts(cell_free, host_free, rows, packed, cells_only, out)
    place_row(cell_free, 0, packed)
    refs = PackedReferences.of([packed], [1])
    before = np.ones((1, 1), dtype=np.int32)
    lost_capacity(cell_free, host_free, rows, before, packed, refs, np.empty(1, np.float32))
