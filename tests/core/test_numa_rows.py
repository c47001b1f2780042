"""The one-host paths equal the vectorised ones exactly.

`numa_rows` (plain integers, one host) must give `numa.count` and `numa.place` bit for bit, and
the weigher and count caches that use it for a few changed rows must hold the same values as the
vectorised computation; `HostTable.changed_since` (the touch log) must select what a scan of
`touched` selects. Random hosts, flavors of every NUMA mode, PCI devices, huge pages, random
free amounts (negative ones too: the weigher counts on states after a placement).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core import numa, numa_rows
from berth.core import table as table_module
from berth.core.errors import ClaimError
from berth.core.filters.base import Context
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.core.weighers import fragmentation
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
        counts = numa.count(d, cf, hf)
        cell_use, host_use = numa.place(d, cf, hf)
        for r in range(len(table)):
            cells, hosts = cf[r].tolist(), hf[r].tolist()
            assert numa_rows.count(d.rows, cells, hosts) == counts[r], (name, r)
            assert numa_rows.place(d.rows, cells) == cell_use[r].tolist(), (name, r)
            assert d.rows.host_use == host_use[r].tolist(), (name, r)


def _weigh(table: HostTable, flavor: str, largest: int, small_rows: int) -> np.ndarray:
    """The fragmentation weigher's raw values on every host of a cold copy of `table`,
    with the one-host path used up to `small_rows` changed hosts."""
    cold = table.copy()
    cold._derived.clear()
    weigher = FragmentationWeigher(FragmentationParams(largest=largest))
    ctx = Context(cold, RequestSpec(flavor=flavor), cold.demand(flavor), NOW)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fragmentation, "SMALL_ROWS", small_rows)
        mp.setattr(table_module, "SMALL_ROWS", small_rows)
        return weigher.raw(ctx, np.arange(len(cold)))


@settings(max_examples=examples(0.6), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=6, extra_flavors=4), data=st.data())
def test_fragmentation_cost_one_host_path_equals_the_vectorised(
    table: HostTable, data: st.DataObject
) -> None:
    """Every host's cost, computed all at once with numpy and host by host in plain integers
    (and then kept up to date through claims, both ways), is the same float, bit for bit."""
    _fill(table, data, 6)
    largest = data.draw(st.integers(1, 4))
    warm = {}
    for flavor in sorted(table.flavors):
        vectorised = _weigh(table, flavor, largest, small_rows=-1)
        one_host = _weigh(table, flavor, largest, small_rows=10**9)
        assert vectorised.tobytes() == one_host.tobytes(), flavor
        warm[flavor] = vectorised
    # incremental: warm caches refreshed on the changed rows only (one-host path) still agree
    weigher = FragmentationWeigher(FragmentationParams(largest=largest))
    for flavor in sorted(table.flavors):
        ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), NOW)
        weigher.raw(ctx, np.arange(len(table)))  # warm
    _fill(table, data, 4)
    for flavor in sorted(table.flavors):
        ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), NOW)
        incremental = weigher.raw(ctx, np.arange(len(table)))
        assert incremental.tobytes() == _weigh(table, flavor, largest, -1).tobytes(), flavor


@settings(max_examples=examples(0.4), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=6), data=st.data())
def test_resource_counts_one_host_path_equals_the_vectorised(
    table: HostTable, data: st.DataObject
) -> None:
    flavors = sorted(table.flavors)
    for flavor in flavors:
        table.resource_counts(flavor)  # warm: later refreshes touch a few rows
    _fill(table, data, 6)
    for flavor in flavors:
        fresh = np.minimum(
            numa.count(table.demand(flavor), table.cell_free, table.host_free), 2**31 - 1
        )
        assert np.array_equal(table.resource_counts(flavor), fresh), flavor


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
        mp.setattr(table_module, "LOG_KEEP", keep)
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
