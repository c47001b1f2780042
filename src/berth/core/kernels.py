"""Compiled kernels for the hot loops of a decision and its claim, over the same columns.

A decision used to be about 35 numpy calls on a few hundred candidate hosts; each call costs
about a microsecond whatever its size, so the calls, not the arithmetic, set the speed. These
kernels do the same arithmetic in one compiled pass each (numba, compiled on first use and cached
on disk), with the same IEEE operations in the same order, so their results equal the numpy
code they replace bit for bit (`tests/core/test_kernels.py` checks them against the formulas,
and the engine's and table's own tests compare the lean path with the general one):

* `add_scaled` and `ties`: the engine's weighted sum of min-max scaled raw values
  (`FilterScheduler._scores`), gathering the candidates from a weigher's column
  (`HostWeigher.column`), and the hosts that tie for the best score (`FilterScheduler._pick`).
* `select_rows`: the candidates of the engine's lean path, from the filters that compare one
  free host column with a minimum (`HostFilter.host_minimum`) and the others' masks.
* NUMA-exact counts and placements on some hosts live in `numa.compiled`.
* `move_footprint`: a claim's or a release's columns and counters on one host
  (`HostTable.claim_planned`, `HostTable.release`); `footprint_fits`: whether one fits
  (`HostTable.verify_fits`).
* `fresh_hosts`: the compute filter's mask (enabled, heartbeat fresh) in one pass.
* `host_only_costs`: the fragmentation weigher's cost of every placed host-only flavor on some
  hosts (`host_only_costs.HostOnlyCosts`), in integers.

Each is compiled on its first call (`jit.compile_kernel`), which also binds its public name in
this module to the compiled function, so later calls (``kernels.name(...)``) skip the Python
wrapper; `jit.prepare` compiles them all ahead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core import jit

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

TIE = 1e-9
"""Scores within this of the best tie (the engine's tolerance)."""


def _kernel(source: Callable[..., Any], bind: str | None = None) -> Callable[..., Any]:
    return jit.compile_kernel(source, globals(), bind=bind)


def _add_scaled(values: F64 | I64, rows: I64, weight: float, scores: F64, started: bool) -> int:
    m = rows.size
    end = m - m % 4
    # min and max in four independent lanes (a chain of compares through one pair of registers
    # costs three times as much); which of equal values wins changes at most the sign of a
    # zero, which no comparison of scores sees
    first = float(values[rows[0]]) if m else 0.0
    lo0 = lo1 = lo2 = lo3 = hi0 = hi1 = hi2 = hi3 = first
    nan = False
    for i in range(0, end, 4):
        a = float(values[rows[i]])
        b = float(values[rows[i + 1]])
        c = float(values[rows[i + 2]])
        d = float(values[rows[i + 3]])
        nan |= (a != a) | (b != b) | (c != c) | (d != d)
        lo0 = a if a < lo0 else lo0
        lo1 = b if b < lo1 else lo1
        lo2 = c if c < lo2 else lo2
        lo3 = d if d < lo3 else lo3
        hi0 = a if a > hi0 else hi0
        hi1 = b if b > hi1 else hi1
        hi2 = c if c > hi2 else hi2
        hi3 = d if d > hi3 else hi3
    for i in range(end, m):
        a = float(values[rows[i]])
        nan |= a != a
        lo0 = a if a < lo0 else lo0
        hi0 = a if a > hi0 else hi0
    if nan:
        return -1
    lo = min(min(lo0, lo1), min(lo2, lo3))
    hi = max(max(hi0, hi1), max(hi2, hi3))
    if hi <= lo:  # all equal: `normalise` gives zeros, which add nothing
        return 0
    span = hi - lo
    if started:
        for i in range(m):
            scores[i] = scores[i] + ((float(values[rows[i]]) - lo) / span) * weight
    else:
        for i in range(m):
            scores[i] = ((float(values[rows[i]]) - lo) / span) * weight
    return 1


def add_scaled(values: F64 | I64, rows: I64, weight: float, scores: F64, started: bool) -> int:
    """Add one weigher's term to the candidates' scores: ``weight * normalise(raw)``.

    ``raw[i] = float(values[rows[i]])``: `values` is the weigher's column over every host (int64
    or float64, cast exactly as ``astype``) or its raw values with ``rows = arange``. Writes
    ``scores[:len(rows)]`` (adds when `started`, else sets). Returns 1 when it wrote, 0 when
    every value is equal (``normalise`` gives zeros, which add nothing: nothing written), -1
    when some value is NaN (nothing written; the caller falls back to numpy).
    """
    return int(_kernel(_add_scaled, bind="add_scaled")(values, rows, weight, scores, started))


def _ties(scores: F64, out: I64) -> int:
    m = scores.size
    end = m - m % 4
    b0 = b1 = b2 = b3 = scores[0]
    for i in range(0, end, 4):
        a, b, c, d = scores[i], scores[i + 1], scores[i + 2], scores[i + 3]
        b0 = a if a > b0 else b0
        b1 = b if b > b1 else b1
        b2 = c if c > b2 else b2
        b3 = d if d > b3 else b3
    for i in range(end, m):
        b0 = scores[i] if scores[i] > b0 else b0
    floor = max(max(b0, b1), max(b2, b3)) - TIE
    n = 0
    for i in range(m):
        if scores[i] >= floor:
            out[n] = i
            n += 1
    return n


def ties(scores: F64, out: I64) -> int:
    """Write the positions of the scores within `TIE` of the best, ascending, into `out`;
    return how many. `scores` is not empty and holds no NaN."""
    return int(_kernel(_ties, bind="ties")(scores, out))


def _select_rows(passed: Any, free: I64, bounds: I64, out: I64) -> int:
    # column by column into a scratch mask (loops that vectorise), then one compaction pass
    n_hosts = passed.size
    ok = np.empty(n_hosts, dtype=np.bool_)
    column, least = free[:, bounds[0, 0]], bounds[0, 1]
    for h in range(n_hosts):
        ok[h] = passed[h] & (column[h] >= least)
    for k in range(1, bounds.shape[0]):
        column, least = free[:, bounds[k, 0]], bounds[k, 1]
        for h in range(n_hosts):
            ok[h] &= column[h] >= least
    n = 0
    for h in range(n_hosts):
        out[n] = h  # written always, kept when it passes: no branch to mispredict
        n += ok[h]
    return n


def select_rows(passed: npt.NDArray[np.bool_], free: I64, bounds: I64, out: I64) -> int:
    """Write the hosts (ascending) that pass the mask `passed` and hold at least
    ``bounds[k, 1]`` of column ``bounds[k, 0]`` of `free` for every k into `out`; return
    how many: ``flatnonzero(passed & (free[:, c0] >= m0) & ...)``. `bounds` has at least
    one row; `out` room for every host."""
    return int(_kernel(_select_rows, bind="select_rows")(passed, free, bounds, out))


def _fresh_hosts(enabled: Any, heartbeat: F64, now: float, down_time: float, out: Any) -> None:
    for h in range(enabled.size):
        out[h] = enabled[h] & (now - heartbeat[h] <= down_time)  # no branch: vectorises


def fresh_hosts(
    enabled: npt.NDArray[np.bool_], heartbeat: F64, now: float, down_time: float
) -> npt.NDArray[np.bool_]:
    """``enabled & (now - heartbeat <= down_time)`` in one pass (the compute filter's mask; a
    NaN heartbeat, never reported, compares False)."""
    out = np.empty(enabled.size, dtype=np.bool_)
    _kernel(_fresh_hosts, bind=None)(enabled, heartbeat, now, down_time, out)
    return out


def _footprint_fits(cell_free: I64, host_free: I64, row: int, cell_use: I64, host_use: I64) -> bool:
    cells, width = cell_use.shape
    for c in range(cells):
        for j in range(width):
            if cell_use[c, j] < 0 or cell_use[c, j] > cell_free[row, c, j]:
                return False
    for j in range(host_use.size):
        if host_use[j] < 0 or host_use[j] > host_free[row, j]:
            return False
    return True


def footprint_fits(cell_free: I64, host_free: I64, row: int, cell_use: I64, host_use: I64) -> bool:
    """Whether a footprint takes nothing negative and at most what `row` has free: ``(use >= 0)
    & (use <= free)`` over every cell and host column (`HostTable.verify_fits`'s common case).
    The shapes must match the row's (the kernel does not check them)."""
    kernel = _kernel(_footprint_fits, bind="footprint_fits")
    return bool(kernel(cell_free, host_free, row, cell_use, host_use))


def _host_only_costs(
    free: I64, touched: I64, since: int, cols: I64, need: I64, use: F64, vcpus: I64, out: F64
) -> None:
    n_cols, n_refs = need.shape
    width = use.shape[1]
    count = np.empty(width, dtype=np.float64)
    kept = np.empty(width, dtype=np.float64)
    for host in range(touched.size):
        if touched[host] <= since:
            continue
        kept[:] = 0.0
        for f in range(n_refs):
            started = False
            for c in range(n_cols):
                if need[c, f] == 0:
                    continue  # numa.vector.host_limit skips the column
                left = float(free[host, cols[c]])
                divisor = float(need[c, f])
                placed = use[c]
                if not started:
                    for g in range(width):
                        count[g] = np.floor((left - placed[g]) / divisor)
                    started = True
                else:
                    for g in range(width):
                        fit = np.floor((left - placed[g]) / divisor)
                        if fit < count[g]:
                            count[g] = fit
            if not started:
                continue
            weight = float(vcpus[f])
            for g in range(width):
                if count[g] > 0.0:
                    kept[g] += weight * count[g]
        for g in range(1, width):
            out[g - 1, host] = kept[g] - kept[0]


def host_only_costs(
    free: I64, touched: I64, since: int, cols: I64, need: I64, use: F64, vcpus: I64, out: F64
) -> None:
    """``-cost_g(h)`` of `host_only_costs.HostOnlyCosts` on the hosts h touched after version
    `since` (``touched[h] > since``: one scan of the table's versions, cheaper than listing
    them), into ``out[g - 1, h]``.

    `free` (hosts, columns): free host columns; `cols` (C,) the columns the references need;
    `need` (C, F) what each reference needs of them (0: not counted); `use` (C, 1 + G) what each
    placed flavor takes of them (integers as float64), column 0 nothing (the counts before);
    `vcpus` (F,). For each placed flavor g: ``-sum_f vcpus_f * (cap_f - cap'_f)``, with
    ``cap = max(0, min_c (free_c - use_c) // need_c)``.

    In float64, which vectorises (integer division does not) and is exact here: every amount is
    an integer below 2**31, so ``free - use`` is exact and the floor of the rounded quotient is
    the integer floor division (the rounding error is below the gap to the next integer); the
    counts and sums are integers the caller keeps below 2**24.
    """
    kernel = _kernel(_host_only_costs, bind="host_only_costs")
    kernel(free, touched, since, cols, need, use, vcpus, out)


def _move_footprint(
    cell_free: I64,
    host_free: I64,
    row: int,
    cell_use: I64,
    host_use: I64,
    n_instances: Any,
    generation: I64,
    touched: I64,
    version: int,
    sign: int,
) -> bool:
    cells, width = cell_use.shape
    if sign < 0:  # a claim: all or nothing
        for c in range(cells):
            for j in range(width):
                if cell_free[row, c, j] - cell_use[c, j] < 0:
                    return False
        for j in range(host_use.size):
            if host_free[row, j] - host_use[j] < 0:
                return False
    for c in range(cells):
        for j in range(width):
            cell_free[row, c, j] += sign * cell_use[c, j]
    for j in range(host_use.size):
        host_free[row, j] += sign * host_use[j]
    n_instances[row] -= sign
    generation[row] += 1
    touched[row] = version
    return True


def move_footprint(
    cell_free: I64,
    host_free: I64,
    row: int,
    cell_use: I64,
    host_use: I64,
    n_instances: Any,
    generation: I64,
    touched: I64,
    version: int,
    sign: int,
) -> bool:
    """The columns and counters of one claim (`sign` -1) or release (+1) on `row`.

    A claim takes the footprint only when every free column of the row stays >= 0 afterwards
    and counts one more instance; else it changes nothing and returns False (the caller's
    general path then names what does not fit). A release gives it back and counts one fewer.
    Both bump the row's generation, mark it touched at `version` and return True.
    """
    kernel = _kernel(_move_footprint, bind="move_footprint")
    args = (cell_free, host_free, row, cell_use, host_use, n_instances, generation, touched)
    return bool(kernel(*args, version, sign))


@jit.warm_up
def compile_all() -> None:
    """Compile every kernel of this module for the argument types decisions pass (run by
    `jit.prepare`)."""
    rows = np.zeros(1, dtype=np.int64)
    scores = np.zeros(1)
    for column in (np.zeros(1), rows):  # float64 and int64 columns, both contiguous
        add_scaled(column, rows, 1.0, scores, False)
    ties(scores, rows.copy())
    free = np.zeros((2, 2), dtype=np.int64, order="F")  # a table's resource-major columns
    passed = np.ones(2, dtype=bool)
    select_rows(passed, free, np.zeros((1, 2), dtype=np.int64), np.empty(2, dtype=np.int64))
    passed.flags.writeable = False  # the table's shared all-True mask
    select_rows(passed, free, np.zeros((1, 2), dtype=np.int64), np.empty(2, dtype=np.int64))
    cells = np.zeros((2, 2, 2), dtype=np.int64, order="F")  # resource-major, as `free`
    counters = (np.zeros(2, dtype=np.int32), np.zeros(2, dtype=np.int64), np.zeros(2, np.int64))
    for writable in (False, True):  # shared footprints of a flavor are read-only
        cell_use, host_use = np.zeros((2, 2), dtype=np.int64), np.zeros(2, dtype=np.int64)
        cell_use.flags.writeable = host_use.flags.writeable = writable
        move_footprint(cells, free, 0, cell_use, host_use, *counters, 1, -1)
        move_footprint(cells, free, 0, cell_use, host_use, *counters, 2, 1)
        footprint_fits(cells, free, 0, cell_use, host_use)
        footprint_fits(cells, free, 0, cell_use.copy(), host_use)  # a footprint of its own
    fresh_hosts(np.ones(2, dtype=bool), np.zeros(2), 1.0, 60.0)
    one, touched, need = np.ones(1, np.int64), np.ones(2, np.int64), np.ones((1, 1), np.int64)
    host_only_costs(free, touched, 0, one, need, np.zeros((1, 2)), one, np.empty((1, 2)))
