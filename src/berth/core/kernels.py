"""Compiled kernels for the two hottest loops of a decision, over the same columns.

A Berth decision is about 35 numpy calls on a few hundred candidate hosts; each call costs about
a microsecond whatever its size, so the calls, not the arithmetic, set the speed. These kernels
do the same arithmetic in one compiled pass each (numba, compiled on first use and cached on
disk), with the same IEEE operations in the same order, so their results equal the numpy code
they replace bit for bit (`tests/core/test_kernels.py` checks both against it):

* `tie_pool`: the engine's weighted sum of min-max scaled raw values (`FilterScheduler._scores`)
  and the hosts that tie for the best score (`FilterScheduler._pick`).
* `host_only_costs`: the fragmentation weigher's cost of every placed host-only flavor on some
  hosts (`weighers.frag_host`), in integers.

numba is imported on the first call, not at import time, so commands that never decide never
pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

TIE = 1e-9
"""Scores within this of the best tie (the engine's tolerance)."""

_compiled: dict[str, Callable[..., Any]] = {}


def _kernel(name: str, source: Callable[..., Any]) -> Callable[..., Any]:
    """`source` compiled with numba (once per process; the machine code is cached on disk)."""
    found = _compiled.get(name)
    if found is None:
        from numba import njit  # imported here: 0.3 s that only deciding needs

        found = _compiled[name] = njit(cache=True, nogil=True)(source)
    return found


def _tie_pool(values: F64, weights: F64, scores: F64, ties: I64) -> int:
    k, m = values.shape
    end = m - m % 4
    started = False
    for j in range(k):
        row = values[j]
        # min and max in four independent lanes (a chain of compares through one pair of
        # registers costs three times as much); which of equal values wins changes at most the
        # sign of a zero, which no comparison of scores sees
        lo0 = lo1 = lo2 = lo3 = hi0 = hi1 = hi2 = hi3 = row[0]
        nan = False
        for i in range(0, end, 4):
            a, b, c, d = row[i], row[i + 1], row[i + 2], row[i + 3]
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
            a = row[i]
            nan |= a != a
            lo0 = a if a < lo0 else lo0
            hi0 = a if a > hi0 else hi0
        if nan:
            return -1
        lo = min(min(lo0, lo1), min(lo2, lo3))
        hi = max(max(hi0, hi1), max(hi2, hi3))
        if hi <= lo:  # all equal: `normalise` gives zeros, which add nothing
            continue
        span = hi - lo
        weight = weights[j]
        if started:
            for i in range(m):
                scores[i] = scores[i] + ((row[i] - lo) / span) * weight
        else:
            for i in range(m):
                scores[i] = ((row[i] - lo) / span) * weight
            started = True
    if not started:
        scores[:m] = 0.0
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
            ties[n] = i
            n += 1
    return n


def tie_pool(values: F64, weights: F64, scores: F64, ties: I64) -> int:
    """Score the candidates and list the ties for the best score.

    `values` (weighers, candidates): each weigher's raw values; `weights` (weighers,). Writes
    ``sum_j weight_j * (values_j - min_j) / (max_j - min_j)`` into ``scores[:candidates]``,
    skipping weighers whose values are all equal (as `normalise`, whose zeros add nothing), and
    the positions of the candidates within `TIE` of the best, ascending, into ``ties``;
    returns how many tie, or -1 when some value is NaN (the caller falls back to numpy).
    """
    return int(_kernel("tie_pool", _tie_pool)(values, weights, scores, ties))


def _host_only_costs(
    free: I64, rows: I64, cols: I64, need: I64, use: F64, vcpus: I64, out: F64, first: int
) -> None:
    n_cols, n_refs = need.shape
    width = use.shape[1]
    count = np.empty(width, dtype=np.float64)
    kept = np.empty(width, dtype=np.float64)
    for r in range(rows.size):
        host = rows[r]
        kept[:] = 0.0
        for f in range(n_refs):
            started = False
            for c in range(n_cols):
                if need[c, f] == 0:
                    continue  # numa.host_limit skips the column
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
            out[first + g - 1, host] = kept[g] - kept[0]


def host_only_costs(
    free: I64, rows: I64, cols: I64, need: I64, use: F64, vcpus: I64, out: F64, first: int = 0
) -> None:
    """``-cost_g(h)`` of `weighers.frag_host` on `rows`, into ``out[first + g - 1, h]``.

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
    _kernel("host_only_costs", _host_only_costs)(free, rows, cols, need, use, vcpus, out, first)


def prepare() -> None:
    """Compile every kernel (or load it from the disk cache) for the argument types decisions
    pass, so that no decision pays for it: the simulator calls this before it times a replay,
    the service before it serves. Safe to call again (then it costs nothing)."""
    tie_pool(
        np.zeros((1, 2)), np.ones(1), np.empty(2), np.empty(2, dtype=np.int64)
    )  # C-ordered, as the engine builds them
    free = np.zeros((2, 2), dtype=np.int64, order="F")  # a table's resource-major columns
    ones = np.ones(1, dtype=np.int64)
    host_only_costs(free, ones, ones, ones.reshape(1, 1), np.zeros((1, 2)), ones, np.empty((1, 2)))
