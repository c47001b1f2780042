"""The one-host paths equal the vectorised ones exactly.

`numa.scalar` (plain integers, one host) must give `vector.count` and `vector.place` bit for bit,
and the weigher and count caches that use it for a few changed rows must hold the same values as
the vectorised computation; `HostTable.changed_since` (the touch log) must select what a scan of
`touched` selects. Random hosts, flavors of every NUMA mode, PCI devices, huge pages, random
free amounts (negative ones too: the weigher counts on states after a placement).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core import table_changes
from berth.core.errors import ClaimError
from berth.core.filters.base import Context
from berth.core.flavors import NumaMode
from berth.core.numa import compiled, dispatch, scalar, vector
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.core.weighers.fragmentation import FragmentationParams, FragmentationWeigher
from tests.builders import NOW
from tests.core.strategies import examples, tables


def _fill(table: HostTable, data: st.DataObject, steps: int) -> None:
    """Random claims (by the claim rule) and releases, so that hosts are partly used."""
    flavors = sorted(table.flavors)
    for step in range(steps):
        if table.allocations and data.draw(st.integers(0, 3)) == 0:
            table.release(data.draw(st.sampled_from(sorted(table.allocations))))
            continue
        host = data.draw(st.sampled_from(table.names))
        try:
            table.claim(f"i{table.version}-{step}", host, data.draw(st.sampled_from(flavors)))
        except ClaimError:
            continue


def _random_free(table: HostTable, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Free amounts anywhere from a little below zero to the capacity, per column."""
    rng = np.random.default_rng(seed)
    cell = table.cell_cap * rng.integers(0, 9, table.cell_cap.shape) // 8
    cell -= rng.choice([0, 0, 0, 1, 2, 300], table.cell_cap.shape)
    host = table.host_cap * rng.integers(0, 9, table.host_cap.shape) // 8
    host -= rng.choice([0, 0, 0, 1, 2, 300], table.host_cap.shape)
    return cell.astype(np.int64), host.astype(np.int64)


@settings(max_examples=examples(1.0), deadline=None)
@given(
    table=tables(min_hosts=1, max_hosts=6, extra_flavors=4),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
    random_free=st.booleans(),
)
def test_one_host_count_and_place_equal_the_vectorised(
    table: HostTable, data: st.DataObject, seed: int, random_free: bool
) -> None:
    _fill(table, data, 8)
    cf, hf = _random_free(table, seed) if random_free else (table.cell_free, table.host_free)
    for name, d in table.demands.items():
        counts = vector.count(d, cf, hf)
        cell_use, host_use = vector.place(d, cf, hf)
        for r in range(len(table)):
            cells, hosts = cf[r].tolist(), hf[r].tolist()
            assert scalar.count(d.rows, cells, hosts) == counts[r], (name, r)
            assert scalar.place(d.rows, cells) == cell_use[r].tolist(), (name, r)
            assert d.rows.host_use == host_use[r].tolist(), (name, r)


def _vectorised_cost(table: HostTable, flavor: str, references: list[str]) -> np.ndarray:
    """-cost on every host with `numa` (the weigher's formula, reference by reference in
    float32 after int32 counts before): the reference for the compiled path."""
    d = table.demand(flavor)
    cf, hf = table.cell_free, table.host_free
    cell_use, host_use = vector.place(d, cf, hf)
    cost = np.zeros(len(table), dtype=np.float32)
    for name in references:
        r = table.demand(name)
        before = np.minimum(vector.count(r, cf, hf), 2**31 - 1).astype(np.int32)
        cost += r.spec.vcpus * (before - vector.count(r, cf - cell_use, hf - host_use))
    return np.negative(cost, dtype=np.float64)


def _raw(weigher: FragmentationWeigher, table: HostTable, flavor: str) -> np.ndarray:
    ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), NOW)
    return weigher.raw(ctx, np.arange(len(table)))


@settings(max_examples=examples(0.6), deadline=None)
@given(
    table=tables(min_hosts=1, max_hosts=6, extra_flavors=4),
    data=st.data(),
    kernel_rows=st.sampled_from([64, 0]),
)
def test_fragmentation_cost_equals_the_vectorised(
    table: HostTable, data: st.DataObject, kernel_rows: int
) -> None:
    """Every host's cost, computed cold and then kept up to date through claims and releases
    (the hosts changed since the last read: in one compiled pass, or with numpy when there are
    more than `KERNEL_ROWS`), is the numpy formula's float, bit for bit, for flavors and
    references of every NUMA mode."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dispatch, "KERNEL_ROWS", kernel_rows)
        _cost_follows_the_table(table, data)


def _cost_follows_the_table(table: HostTable, data: st.DataObject) -> None:
    _fill(table, data, 6)
    largest = data.draw(st.integers(1, 4))
    weigher = FragmentationWeigher(FragmentationParams(largest=largest))
    flavors = sorted(table.flavors)
    for flavor in flavors:
        refs = weigher.references(
            Context(table, RequestSpec(flavor=flavor), table.demand(flavor), NOW)
        )
        want = _vectorised_cost(table, flavor, list(refs))
        assert np.array_equal(_raw(weigher, table, flavor), want), flavor  # sign of 0 aside
    for _ in range(3):  # incremental: changed hosts only
        _fill(table, data, 3)
        for flavor in data.draw(st.lists(st.sampled_from(flavors), min_size=1, unique=True)):
            ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), NOW)
            want = _vectorised_cost(table, flavor, list(weigher.references(ctx)))
            assert np.array_equal(_raw(weigher, table, flavor), want), flavor  # sign of 0 aside


@settings(max_examples=examples(0.4), deadline=None)
@given(
    table=tables(min_hosts=1, max_hosts=6),
    data=st.data(),
    kernel_rows=st.sampled_from([64, 0]),
)
def test_kept_counts_and_cell_fits_equal_the_vectorised(
    table: HostTable, data: st.DataObject, kernel_rows: int
) -> None:
    """`resource_counts` and `cells_fit`, warm then refreshed on the changed hosts (compiled,
    or with numpy beyond `KERNEL_ROWS`), equal a fresh vectorised computation."""
    flavors = sorted(table.flavors)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dispatch, "KERNEL_ROWS", kernel_rows)
        for flavor in flavors:  # warm: later refreshes touch a few rows
            table.resource_counts(flavor)
            table.cells_fit(flavor)
        _fill(table, data, 6)
        for flavor in flavors:
            d = table.demand(flavor)
            fresh = np.minimum(vector.count(d, table.cell_free, table.host_free), 2**31 - 1)
            assert np.array_equal(table.resource_counts(flavor), fresh), flavor
            fit = vector.cell_count(d, table.cell_free, limit=1) >= 1
            assert np.array_equal(table.cells_fit(flavor), fit), flavor


@settings(max_examples=examples(0.4), deadline=None)
@given(
    table=tables(min_hosts=1, max_hosts=6),
    data=st.data(),
    keep=st.sampled_from([4, 8, 1024]),
)
def test_changed_since_equals_a_scan_of_touched(
    table: HostTable, data: st.DataObject, keep: int
) -> None:
    """Every version back, through log trims (a tiny LOG_KEEP) and copies."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(table_changes, "LOG_KEEP", keep)
        start = table.version
        for _ in range(3):
            _fill(table, data, 10)
            if data.draw(st.booleans()):
                table = table.copy()
            for seen in range(start - 1, table.version + 1):
                expected = np.flatnonzero(table.touched > seen)
                got = table.changed_since(seen)
                assert got.dtype == expected.dtype
                assert np.array_equal(got, expected), seen
                recent = table.recent_changes(seen)  # the log itself, repeats included
                if recent is not None:
                    assert sorted(set(recent)) == expected.tolist(), seen
                    assert len(recent) == table.version - seen


@settings(max_examples=examples(1.0), deadline=None)
@given(
    table=tables(min_hosts=1, max_hosts=6, extra_flavors=4),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
    random_free=st.booleans(),
)
def test_compiled_counts_equal_the_vectorised(
    table: HostTable, data: st.DataObject, seed: int, random_free: bool
) -> None:
    """`compiled.counts`, the compiled mirror of `scalar.count` / `cell_count`, and
    `compiled.place_row` (`scalar.place`) on every mode, negative free amounts included, any
    subset of rows in any order."""
    _fill(table, data, 8)
    cf, hf = _random_free(table, seed) if random_free else (table.cell_free, table.host_free)
    cf, hf = vector.resource_major(cf), vector.resource_major(hf)  # the table's layout
    rows = np.array(
        data.draw(st.lists(st.integers(0, len(table) - 1), min_size=1, max_size=8)),
        dtype=np.int64,
    )
    for name, d in table.demands.items():
        out = np.full(rows.size + 2, -7, dtype=np.int64)
        compiled.counts(cf, hf, rows, d.packed, False, out)
        assert out[: rows.size].tolist() == vector.count(d, cf, hf)[rows].tolist(), name
        assert out[rows.size :].tolist() == [-7, -7]
        compiled.counts(cf, hf, rows, d.packed, True, out)
        cells = [scalar.cell_count(d.rows, cf[r].tolist()) for r in rows.tolist()]
        assert out[: rows.size].tolist() == cells, name
        if d.mode != NumaMode.NONE:
            fit = vector.cell_count(d, cf, limit=1)[rows] >= 1
            assert (out[: rows.size] >= 1).tolist() == fit.tolist(), name
        if vector.two_cells(d, cf):  # `compiled.place_row`, the table's `plan_for`
            for r in rows.tolist():
                want = scalar.place(d.rows, cf[r].tolist())
                assert compiled.place_row(cf, r, d.packed).tolist() == want, (name, r)


@settings(max_examples=examples(0.5), deadline=None)
@given(
    table=tables(min_hosts=1, max_hosts=6, extra_flavors=4, cells=(2, 1, 4)),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
    random_free=st.booleans(),
)
def test_one_host_footprint_is_the_scalar_rule_on_any_cell_axis(
    table: HostTable, data: st.DataObject, seed: int, random_free: bool
) -> None:
    """`dispatch.place_on` (the table's `plan_for`): the compiled two-cell rule where it
    applies (a two-cell table, or a wider table's host with empty cells beyond two when the
    footprint fits), `scalar.place` elsewhere; equal to `scalar.place` everywhere."""
    _fill(table, data, 8)
    cf, hf = _random_free(table, seed) if random_free else (table.cell_free, table.host_free)
    cf, hf = vector.resource_major(cf), vector.resource_major(hf)
    for name, d in table.demands.items():
        for r in range(len(table)):
            want = scalar.place(d.rows, cf[r].tolist(), table.distance.get(r))
            got = dispatch.place_on(d, cf, hf, r, table.distance.get(r))
            assert got.tolist() == want, (name, r)
