"""The cheapest integer cover (HiGHS): how many hosts of each type to buy so that every
capacity constraint of a necessary condition holds (berth.sim.capacity_bound)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.solvers._highs import solve_milp

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def cheapest_cover(
    matrix: F64, need: F64, prices: F64, upper: I64, time_limit: float = 10.0
) -> I64 | None:
    """The integer ``x`` (0 <= x <= upper) of least ``prices @ x`` with ``matrix @ x >= need``
    (one row per constraint, one column per host type); None when no such ``x`` exists.

    Rows whose need is already met by nothing bought (need <= 0) are dropped. Ties between
    equal-cost covers go to HiGHS: the caller must not read meaning into which one it gets."""
    rows = need > 0
    if not rows.any():
        return np.zeros(matrix.shape[1], dtype=np.int64)
    a, b = matrix[rows], need[rows]
    reach = a @ upper.astype(np.float64)
    if (reach < b - 1e-9 * np.maximum(1.0, b)).any():
        return None  # even the upper bound of every type falls short of some row
    # scale each row to its need: capacities in MB and counts in hosts stay well conditioned
    scaled = a / b[:, None]
    result = solve_milp(
        prices.astype(np.float64),
        scaled,
        np.ones(b.size),
        np.full(b.size, np.inf),
        np.zeros(matrix.shape[1]),
        upper.astype(np.float64),
        time_limit,
    )
    if result.x is None:
        return None
    x = np.rint(result.x).astype(np.int64)
    # the solver's tolerance may round a hair below a row: repair upward, cheapest first
    while True:
        short = a @ x < b - 1e-9 * b
        if not short.any():
            return x
        row = int(np.flatnonzero(short)[0])
        useful = np.flatnonzero((a[row] > 0) & (x < upper))
        if not useful.size:
            return None
        x[useful[np.argmin(prices[useful] / a[row, useful])]] += 1
