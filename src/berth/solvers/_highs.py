"""The one way Berth calls HiGHS's MIP solver: silenced, integer variables, a time limit."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import Bounds, LinearConstraint, milp  # type: ignore[import-untyped]

F64 = npt.NDArray[np.float64]


@contextmanager
def quiet() -> Iterator[None]:
    """Silence HiGHS: some MIP code paths print to the process's stdout whatever `disp` says."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real stdout (embedded interpreter): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def solve_milp(
    cost: F64,
    matrix: Any,
    row_lo: Any,
    row_hi: Any,
    lo: Any,
    hi: Any,
    time_limit: float,
) -> Any:
    """Minimise ``cost @ x`` over integer ``x`` with ``row_lo <= matrix @ x <= row_hi`` and
    ``lo <= x <= hi``; SciPy's `milp` result (``x`` is None when no solution was found)."""
    with quiet():
        return milp(
            c=cost,
            constraints=LinearConstraint(matrix, row_lo, row_hi),
            integrality=np.ones(len(cost)),
            bounds=Bounds(lo, hi),
            options={"time_limit": time_limit, "disp": False},
        )


def dual_bound(result: Any) -> float | None:
    """The MIP's dual bound (a bound on the minimum) when HiGHS proved a finite one."""
    dual = getattr(result, "mip_dual_bound", None)
    if dual is None or not np.isfinite(dual):
        return None
    return float(dual)
