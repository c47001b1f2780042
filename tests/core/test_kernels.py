"""The compiled kernels (`berth.core.kernels`) equal the textbook formulas they replace.

`tie_pool` against ``sum_j weight_j * normalise(values_j)`` in numpy and its ties, on arbitrary
floats (negative, huge, tiny, equal, signed zeros); `host_only_costs` against the cost formula
in Python integers. Equal means bit for bit (only the sign of a zero may differ, which
`array_equal` and every comparison ignore).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core import kernels
from berth.core.weighers.base import normalise
from tests.core.strategies import examples

FLOATS = st.one_of(
    st.integers(-(2**40), 2**40).map(float),
    st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-300, 5e-324]),
)
AMOUNTS = st.one_of(st.integers(0, 64), st.integers(0, 2**31 - 1))
"""Small amounts (many instances fit) and any up to the int32 cap the store keeps below."""
WEIGHTS = st.sampled_from([1.0, -1.0, 2.0, -0.5, 0.3, 1e-3, 7.0])


def _pool(values: np.ndarray, weights: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    m = values.shape[1]
    scores = np.full(m + 3, 123.0)  # longer than needed: the tail must stay untouched
    ties = np.full(m + 3, -7, dtype=np.int64)
    n = kernels.tie_pool(values, weights, scores, ties)
    assert np.all(scores[m:] == 123.0)
    return n, scores[:m], ties[: max(n, 0)]


@settings(max_examples=examples(1.0), deadline=None)
@given(
    k=st.integers(1, 4),
    m=st.integers(1, 40),
    data=st.data(),
)
def test_tie_pool_equals_the_weighted_sum_of_normalised_values(
    k: int, m: int, data: st.DataObject
) -> None:
    rows = []
    for _ in range(k):
        if data.draw(st.integers(0, 4)) == 0:  # all equal: adds nothing
            rows.append([data.draw(FLOATS)] * m)
        else:
            pool = data.draw(st.lists(FLOATS, min_size=1, max_size=5))  # repeats make ties
            rows.append([data.draw(st.sampled_from(pool)) for _ in range(m)])
    values = np.array(rows, dtype=np.float64)
    weights = np.array([data.draw(WEIGHTS) for _ in range(k)], dtype=np.float64)
    want = np.zeros(m)
    for j in range(k):
        want += weights[j] * normalise(values[j])
    n, scores, ties = _pool(values, weights)
    assert np.array_equal(scores, want)
    assert n == ties.size
    assert np.array_equal(ties, np.flatnonzero(want >= want.max() - kernels.TIE))


@pytest.mark.parametrize("where", [0, 3, 6])
def test_tie_pool_declines_nan(where: int) -> None:
    values = np.arange(14, dtype=np.float64).reshape(2, 7)
    values[1, where] = np.nan
    n, _, _ = _pool(values, np.array([1.0, -1.0]))
    assert n == -1


@pytest.mark.parametrize(
    ("values", "weights", "ties"),
    [
        ([[3.0, 1.0, 3.0, 2.0]], [1.0], [0, 2]),  # max, ties in row order
        ([[3.0, 1.0, 3.0, 2.0]], [-1.0], [1]),  # min
        ([[5.0, 5.0, 5.0]], [2.0], [0, 1, 2]),  # all equal: every host ties
        ([[0.0, 10.0], [10.0, 0.0]], [1.0, -1.0], [1]),  # 1 + 0 vs 0 - 1
        ([[0.0, 10.0, 5.0], [10.0, 0.0, 5.0]], [1.0, 1.0], [0, 1, 2]),  # all sum to 1
        ([[1.0, 2.0, 3.0, 4.0, 5.0]], [1.0], [4]),  # the remainder after 4 lanes
        ([[9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]], [1.0], [0]),  # lane 0 wins
    ],
)
def test_tie_pool_cases(values: list[list[float]], weights: list[float], ties: list[int]) -> None:
    n, _, got = _pool(np.array(values), np.array(weights))
    assert got.tolist() == ties
    assert n == len(ties)


@pytest.mark.parametrize("at", range(10))
@pytest.mark.parametrize("weight", [1.0, -1.0])
def test_tie_pool_finds_the_extremes_in_every_lane(at: int, weight: float) -> None:
    """The extremes are read in four lanes and a remainder: a lone minimum or maximum at any
    position scales every value (the others are then not all 0 or all 1)."""
    low = np.full(10, 5.0)
    low[(at + 1) % 10] = 7.0
    low[at] = 1.0
    high = -low
    for values in (low, high):
        want = weight * normalise(values)
        _, scores, ties = _pool(values[None, :], np.array([weight]))
        assert np.array_equal(scores, want)
        assert ties.tolist() == np.flatnonzero(want >= want.max() - kernels.TIE).tolist()


def _costs_by_integers(
    free: np.ndarray,
    rows: np.ndarray,
    cols: np.ndarray,
    need: np.ndarray,
    use: np.ndarray,
    vcpus: np.ndarray,
) -> np.ndarray:
    """-cost per (placed flavor, row) in Python integers, straight from the formula."""

    def kept(host: int, g: int) -> int:
        total = 0
        for f in range(need.shape[1]):
            fits = [
                (int(free[host, cols[c]]) - int(use[c, g])) // int(need[c, f])
                for c in range(need.shape[0])
                if need[c, f]
            ]
            total += int(vcpus[f]) * max(0, min(fits))
        return total

    return np.array(
        [[kept(int(h), g) - kept(int(h), 0) for h in rows] for g in range(1, use.shape[1])],
        dtype=np.float64,
    ).reshape(use.shape[1] - 1, rows.size)


@settings(max_examples=examples(1.0), deadline=None)
@given(data=st.data())
def test_host_only_costs_equal_the_integer_formula(data: st.DataObject) -> None:
    n_hosts = data.draw(st.integers(1, 6))
    n_cols_all = data.draw(st.integers(1, 4))
    free = np.array(
        [
            [data.draw(st.integers(-3, 2**31 - 1)) for _ in range(n_cols_all)]
            for _ in range(n_hosts)
        ],
        dtype=np.int64,
    )
    cols = np.array(
        sorted(data.draw(st.sets(st.integers(0, n_cols_all - 1), min_size=1))), dtype=np.int64
    )
    n_refs = data.draw(st.integers(1, 3))
    need = np.array(
        [[data.draw(AMOUNTS) for _ in range(n_refs)] for _ in cols],
        dtype=np.int64,
    )
    for f in range(n_refs):  # every reference needs some column
        if not need[:, f].any():
            need[data.draw(st.integers(0, cols.size - 1)), f] = data.draw(st.integers(1, 64))
    placed = data.draw(st.integers(0, 4))
    use = np.zeros((cols.size, 1 + placed), dtype=np.float64)
    for c in range(cols.size):
        for g in range(1, 1 + placed):
            use[c, g] = data.draw(AMOUNTS)
    # counts and sums stay below 2**24, as `HostOnlyCosts.build` guarantees
    vcpus = np.array([data.draw(st.integers(0, 3)) for _ in range(n_refs)], dtype=np.int64)
    rows = np.array(
        data.draw(st.lists(st.integers(0, n_hosts - 1), min_size=1, max_size=8)), dtype=np.int64
    )
    want = _costs_by_integers(free, rows, cols, need, use, vcpus)
    if np.abs(want).max(initial=0) >= 2**24:
        return
    out = np.full((placed + 2, n_hosts), np.nan)
    kernels.host_only_costs(free, rows, cols, need, use, vcpus, out, first=1)
    assert np.isnan(out[0]).all()  # other flavors untouched
    assert np.isnan(out[placed + 1]).all()
    for g in range(placed):
        for j, h in enumerate(rows.tolist()):
            assert out[1 + g, h] == want[g, j], (g, h)
    untouched = sorted(set(range(n_hosts)) - set(rows.tolist()))
    assert np.isnan(out[:, untouched]).all()
