"""The compiled kernels (`berth.core.kernels`) equal the textbook formulas they replace.

`add_scaled` and `ties` against ``sum_j weight_j * normalise(values_j)`` in numpy and its
ties, on arbitrary floats (negative, huge, tiny, equal, signed zeros); `host_only_costs`
against the cost formula in Python integers. Equal means bit for bit (only the sign of a zero
may differ, which `array_equal` and every comparison ignore).
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
    """The engine's use of the kernels: `add_scaled` weigher by weigher, then `ties`; -1 when
    a weigher declines (NaN). Each row is given as a column over more hosts than the
    candidates (every other host), as a weigher's `column` is."""
    m = values.shape[1]
    scores = np.full(m + 3, 123.0)  # longer than needed: the tail must stay untouched
    started = False
    for row, weight in zip(values, weights, strict=True):
        column = np.full(2 * m, np.nan)  # hosts that are not candidates hold anything
        column[::2] = row
        rows = np.arange(0, 2 * m, 2, dtype=np.int64)
        status = kernels.add_scaled(column, rows, float(weight), scores[:m], started)
        if status < 0:
            return -1, scores[:m], np.zeros(0, dtype=np.int64)
        started = started or status > 0
    assert np.all(scores[m:] == 123.0)
    if not started:
        scores[:m] = 0.0
    ties = np.full(m + 3, -7, dtype=np.int64)
    n = kernels.ties(scores[:m], ties)
    assert np.all(ties[n:] == -7)
    return n, scores[:m], ties[:n]


@settings(max_examples=examples(1.0), deadline=None)
@given(
    k=st.integers(1, 4),
    m=st.integers(1, 40),
    data=st.data(),
)
def test_scores_equal_the_weighted_sum_of_normalised_values(
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
def test_nan_declines(where: int) -> None:
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
def test_tie_cases(values: list[list[float]], weights: list[float], ties: list[int]) -> None:
    n, _, got = _pool(np.array(values), np.array(weights))
    assert got.tolist() == ties
    assert n == len(ties)


@pytest.mark.parametrize("at", range(10))
@pytest.mark.parametrize("weight", [1.0, -1.0])
def test_the_extremes_are_found_in_every_lane(at: int, weight: float) -> None:
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
    touched = np.zeros(n_hosts, dtype=np.int64)
    touched[rows] = 5  # changed after version 4; the others before
    kernels.host_only_costs(free, touched, 4, cols, need, use, vcpus, out[1 : placed + 1])
    assert np.isnan(out[0]).all()  # other flavors untouched
    assert np.isnan(out[placed + 1]).all()
    for g in range(placed):
        for j, h in enumerate(rows.tolist()):
            assert out[1 + g, h] == want[g, j], (g, h)
    untouched = sorted(set(range(n_hosts)) - set(rows.tolist()))
    assert np.isnan(out[:, untouched]).all()


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_int64_columns_are_cast_as_astype(dtype: type) -> None:
    """An int64 column is read as ``astype(float64)`` would: beyond 2**53 that rounds."""
    column: np.ndarray = np.array(
        [2**53 + 1, 3, 2**62 + 12345, -(2**60) - 1], dtype=np.int64
    ).astype(dtype)
    rows = np.array([0, 2, 3], dtype=np.int64)
    scores = np.empty(3)
    assert kernels.add_scaled(column, rows, -0.5, scores, False) == 1
    assert np.array_equal(scores, -0.5 * normalise(column[rows].astype(np.float64)))


@settings(max_examples=examples(1.0), deadline=None)
@given(data=st.data())
def test_select_rows_equals_the_masks(data: st.DataObject) -> None:
    n_hosts = data.draw(st.integers(1, 40))
    n_cols = data.draw(st.integers(1, 5))
    free = np.asfortranarray(
        np.array(
            [[data.draw(st.integers(-5, 20)) for _ in range(n_cols)] for _ in range(n_hosts)],
            dtype=np.int64,
        )
    )
    bounds = np.array(
        data.draw(
            st.lists(
                st.tuples(st.integers(0, n_cols - 1), st.integers(-5, 20)), min_size=1, max_size=4
            )
        ),
        dtype=np.int64,
    )
    passed = np.array(data.draw(st.lists(st.booleans(), min_size=n_hosts, max_size=n_hosts)))
    if data.draw(st.booleans()):
        passed[:] = True
        passed.flags.writeable = False  # as the table's shared all-True mask
    want = passed.copy()
    for column, least in bounds.tolist():
        want &= free[:, column] >= least
    out = np.full(n_hosts, -1, dtype=np.int64)
    n = kernels.select_rows(passed, free, bounds, out)
    assert out[:n].tolist() == np.flatnonzero(want).tolist()


@settings(max_examples=examples(1.0), deadline=None)
@given(data=st.data())
def test_a_claim_takes_all_or_nothing_and_a_release_undoes_it(data: st.DataObject) -> None:
    n_hosts, width = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    small = st.integers(-2, 6)
    cells = np.asfortranarray(
        np.array(
            data.draw(st.lists(small, min_size=n_hosts * 2 * width, max_size=n_hosts * 2 * width))
        )
        .reshape(n_hosts, 2, width)
        .astype(np.int64)
    )
    hosts = np.asfortranarray(
        np.array(data.draw(st.lists(small, min_size=n_hosts * 3, max_size=n_hosts * 3)))
        .reshape(n_hosts, 3)
        .astype(np.int64)
    )
    cell_use = np.array(data.draw(st.lists(small, min_size=2 * width, max_size=2 * width)))
    cell_use = cell_use.reshape(2, width).astype(np.int64)
    host_use = np.array(data.draw(st.lists(small, min_size=3, max_size=3)), dtype=np.int64)
    counters = (
        np.arange(n_hosts, dtype=np.int32),
        np.arange(n_hosts, dtype=np.int64) * 10,
        np.zeros(n_hosts, dtype=np.int64),
    )
    row = data.draw(st.integers(0, n_hosts - 1))
    arrays: list[np.ndarray] = [cells, hosts, *counters]
    before = [a.copy() for a in arrays]
    fits = (cells[row] - cell_use >= 0).all() and (hosts[row] - host_use >= 0).all()
    assert kernels.move_footprint(cells, hosts, row, cell_use, host_use, *counters, 7, -1) == fits
    if not fits:  # nothing changed
        for now, then in zip(arrays, before, strict=True):
            assert np.array_equal(now, then)
        return
    assert np.array_equal(cells[row], before[0][row] - cell_use)
    assert np.array_equal(hosts[row], before[1][row] - host_use)
    assert counters[0][row] == before[2][row] + 1
    assert counters[1][row] == before[3][row] + 1
    assert counters[2][row] == 7
    kernels.move_footprint(cells, hosts, row, cell_use, host_use, *counters, 8, 1)
    assert np.array_equal(cells, before[0])
    assert np.array_equal(hosts, before[1])
    assert np.array_equal(counters[0], before[2])
    assert counters[1][row] == before[3][row] + 2  # generations only move on
    assert counters[2][row] == 8
    others = np.arange(n_hosts) != row
    assert np.array_equal(counters[1][others], before[3][others])


@settings(max_examples=examples(0.5), deadline=None)
@given(data=st.data())
def test_footprint_fits_is_use_within_zero_and_free(data: st.DataObject) -> None:
    width = data.draw(st.integers(1, 4))
    small = st.integers(-2, 6)

    def drawn(shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        values = data.draw(st.lists(small, min_size=size, max_size=size))
        return np.array(values, dtype=np.int64).reshape(shape)

    cells, hosts = np.asfortranarray(drawn((3, 2, width))), np.asfortranarray(drawn((3, 3)))
    cell_use, host_use = drawn((2, width)), drawn((3,))
    if data.draw(st.booleans()):  # a flavor's shared footprint
        cell_use.flags.writeable = host_use.flags.writeable = False
    row = data.draw(st.integers(0, 2))
    want = bool(
        (cell_use >= 0).all()
        and (host_use >= 0).all()
        and (cell_use <= cells[row]).all()
        and (host_use <= hosts[row]).all()
    )
    assert kernels.footprint_fits(cells, hosts, row, cell_use, host_use) is want


@settings(max_examples=examples(0.5), deadline=None)
@given(
    beats=st.lists(
        st.one_of(st.just(float("nan")), st.floats(-1e9, 1e9, allow_nan=False)), max_size=30
    ),
    data=st.data(),
)
def test_fresh_hosts_is_enabled_and_a_fresh_heartbeat(beats: list[float], data: st.DataObject):
    heartbeat = np.array(beats, dtype=np.float64)
    flags = data.draw(st.lists(st.booleans(), min_size=len(beats), max_size=len(beats)))
    enabled = np.array(flags, dtype=bool)
    now = data.draw(st.sampled_from([0.0, 1e9, -5.0, 123.5]))
    down_time = data.draw(st.sampled_from([60.0, 0.5, 1e12]))
    want = enabled & ((now - heartbeat) <= down_time)  # the compute filter's numpy formula
    got = kernels.fresh_hosts(enabled, heartbeat, now, down_time)
    assert got.dtype == np.bool_
    assert got.tolist() == want.tolist()
