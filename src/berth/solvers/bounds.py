"""Bin-packing bounds by HiGHS (docs/simulator.md, "Bound"): the configuration LP and the MIP.

Items are flavors (rows of `items`, one column per resource, `counts` instances each) and bins
host types (rows of `types`); `fits[i, t]` says whether one item i fits an empty bin t.
`berth.sim.bound` builds these arrays from a fleet and adds the simple bounds.
"""

from __future__ import annotations

import math
import time

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog  # type: ignore[import-untyped]
from scipy.sparse import coo_array  # type: ignore[import-untyped]

from berth.solvers._highs import dual_bound, solve_milp

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

EPS = 1e-6
"""Tolerance on capacities and values."""


def configuration_lp(
    items: F64,
    counts: F64,
    types: F64,
    fits: npt.NDArray[np.bool_],
    deadline: float,
    max_cols: int,
    beat: int = 0,
) -> tuple[float, bool]:
    """Farley lower bound of the configuration LP; (bound, converged).

    Stops early once the restricted master's value z (an upper bound on the LP optimum) shows
    that the LP cannot give more than `beat` hosts.
    """
    m = items.shape[0]
    columns: list[F64] = []
    for i in range(m):
        best = 0.0
        for t in np.flatnonzero(fits[i]):
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(
                    items[i] > 0, types[t] / np.where(items[i] > 0, items[i], 1), np.inf
                )
            best = max(best, min(float(np.floor(ratio.min() + EPS)), float(counts[i])))
        col = np.zeros(m)
        col[i] = max(best, 1.0)
        columns.append(col)
    columns.extend(_ffd_columns(items, counts, types, fits))
    bound = 0.0
    converged = False
    while True:
        a = np.array(columns).T  # (items, columns)
        res = linprog(
            c=np.ones(a.shape[1]),
            A_ub=-a,
            b_ub=-counts,
            bounds=(0, None),
            method="highs",
        )
        if res.status != 0:
            break
        z = float(res.fun)
        if math.ceil(z - EPS) <= beat:
            return bound, False
        duals = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=np.float64), 0.0)
        v_upper = 0.0
        new: list[F64] = []
        for k in range(types.shape[0]):
            found = _price(items, counts, types[k], fits[:, k], duals, deadline)
            if found is None:
                return bound, False
            value_upper, pattern = found
            v_upper = max(v_upper, value_upper)
            if pattern is not None and float(duals @ pattern) > 1 + 1e-9:
                new.append(pattern)
        bound = max(bound, z / max(1.0, v_upper))
        if v_upper <= 1 + 1e-9:
            converged = True
            bound = max(bound, z)
            break
        if not new or len(columns) >= max_cols or time.monotonic() > deadline:
            break
        columns.extend(new)
    return bound, converged


def _ffd_columns(
    items: F64, counts: F64, types: F64, fits: npt.NDArray[np.bool_], limit: int = 200_000
) -> list[F64]:
    """Host fillings from first-fit decreasing on the largest host type: starting columns
    that put the restricted master near the optimum at once (the early stop then usually fires
    on the first iteration when the volume bound is tight)."""
    if counts.sum() > limit:
        return []
    t = int(np.argmax((types / np.maximum(types.max(axis=0), 1)).sum(axis=1)))
    cap = types[t]
    ok = fits[:, t]
    size = (items / np.maximum(cap, 1)).max(axis=1)
    order = [i for i in np.argsort(-size, kind="stable") if ok[i]]
    free = np.zeros((0, cap.size))
    content: list[dict[int, int]] = []
    for i in order:
        need = items[i]
        for _ in range(int(counts[i])):
            room = np.flatnonzero((free >= need - EPS).all(axis=1))
            if room.size:
                b = int(room[0])
            else:
                free = np.vstack([free, cap[None, :]])
                content.append({})
                b = len(content) - 1
            free[b] -= need
            content[b][i] = content[b].get(i, 0) + 1
    out: dict[tuple[tuple[int, int], ...], F64] = {}
    for c in content:
        key = tuple(sorted(c.items()))
        if key not in out:
            col = np.zeros(items.shape[0])
            for i, k in c.items():
                col[i] = k
            out[key] = col
    return list(out.values())


def _price(
    items: F64,
    counts: F64,
    cap: F64,
    fits: npt.NDArray[np.bool_],
    duals: F64,
    deadline: float,
) -> tuple[float, F64 | None] | None:
    """Best filling of one host of capacity `cap` by dual values: (upper bound, pattern)."""
    use = np.flatnonzero(fits & (duals > 1e-12))
    if use.size == 0:
        return 0.0, None
    a = items[use].T  # (resources, k)
    upper = counts[use].copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(a > 0, cap[:, None] / np.where(a > 0, a, 1), np.inf)
    upper = np.minimum(upper, np.floor(ratio.min(axis=0) + EPS))
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    res = solve_milp(
        -duals[use], a, -np.inf, cap, np.zeros(use.size), upper, max(0.5, min(remaining, 10.0))
    )
    dual = dual_bound(res)
    if res.x is None:
        return None if dual is None else (-dual, None)
    pattern = np.zeros(items.shape[0])
    pattern[use] = np.round(res.x)
    if res.status == 0:
        return float(duals @ pattern), pattern
    upper_value = -dual if dual is not None else math.inf
    return max(upper_value, float(duals @ pattern)), pattern


def bin_packing_mip(
    items: F64,
    counts: F64,
    types: F64,
    per_type: I64,
    fits: npt.NDArray[np.bool_],
    time_limit: float,
) -> tuple[int, bool] | None:
    """Exact bin packing on the fleet's host types: (hosts, optimal).

    Variables: x[i, h] instances of flavor i on candidate host h, y[h] host h used. Candidate
    hosts are, per type, as many copies as instances (the bound says what the load needs, even
    beyond the fleet), used in order (symmetry breaking).
    """
    m, r = items.shape
    total = int(counts.sum())
    hosts: list[int] = []  # type of each candidate host: as many as instances, fleet or not
    for t in range(len(per_type)):
        hosts.extend([t] * total)
    nh = len(hosts)
    nx = m * nh
    nvar = nx + nh
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    row = 0
    for i in range(m):  # every instance placed
        for h in range(nh):
            rows.append(row)
            cols.append(i * nh + h)
            vals.append(1.0)
        lo.append(float(counts[i]))
        hi.append(float(counts[i]))
        row += 1
    for h, t in enumerate(hosts):  # capacity, only when used
        for j in range(r):
            for i in range(m):
                if items[i, j] > 0:
                    rows.append(row)
                    cols.append(i * nh + h)
                    vals.append(float(items[i, j]))
            rows.append(row)
            cols.append(nx + h)
            vals.append(-float(types[t, j]))
            lo.append(-np.inf)
            hi.append(0.0)
            row += 1
    for h in range(nh - 1):  # same-type hosts are used in order
        if hosts[h] == hosts[h + 1]:
            rows.extend([row, row])
            cols.extend([nx + h, nx + h + 1])
            vals.extend([1.0, -1.0])
            lo.append(0.0)
            hi.append(np.inf)
            row += 1
    a = coo_array((vals, (rows, cols)), shape=(row, nvar)).tocsr()
    upper = np.zeros(nvar)
    for i in range(m):
        for h, t in enumerate(hosts):
            upper[i * nh + h] = counts[i] if fits[i, t] else 0.0
    upper[nx:] = 1.0
    c = np.zeros(nvar)
    c[nx:] = 1.0
    res = solve_milp(c, a, np.array(lo), np.array(hi), np.zeros(nvar), upper, time_limit)
    if res.status == 0 and res.x is not None:
        return round(float(res.fun)), True
    dual = dual_bound(res)
    if dual is not None:
        return math.ceil(dual - EPS), False
    return None
