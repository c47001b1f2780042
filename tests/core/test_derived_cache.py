"""The incrementally cached per-host values always equal a fresh computation.

`HostTable.derived` recomputes only rows whose `touched` version moved. These properties drive
random claims, releases, decisions (with their tentative claims and exact undo) and copies, and
compare every cached array with one computed from scratch.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import profile
from berth.core.engine import FilterScheduler, commit
from berth.core.errors import ClaimError
from berth.core.explain import NoValidHost
from berth.core.numa import vector
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from tests.builders import NOW
from tests.core.strategies import examples, tables

BERTH = FilterScheduler.from_config(profile("berth"))


def _fresh_counts(table: HostTable, flavor: str) -> np.ndarray:
    return vector.count(table.demand(flavor), table.cell_free, table.host_free)


def _assert_caches_exact(table: HostTable) -> None:
    for flavor in table.flavors:
        assert np.array_equal(table.resource_counts(flavor), _fresh_counts(table, flavor))
        fresh_fit = vector.cell_count(table.demand(flavor), table.cell_free, limit=1) >= 1
        assert np.array_equal(table.cells_fit(flavor), fresh_fit)


@settings(max_examples=examples(0.6), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=5), data=st.data())
def test_cached_counts_follow_every_change(table: HostTable, data: st.DataObject) -> None:
    flavors = sorted(table.flavors)
    _assert_caches_exact(table)  # warm every cache
    for step in range(12):
        action = data.draw(st.sampled_from(["decide", "claim", "release", "copy"]))
        flavor = data.draw(st.sampled_from(flavors))
        if action == "decide":
            count = data.draw(st.sampled_from([1, 2]))
            ids = tuple(f"d{step}-{i}" for i in range(count))
            request = RequestSpec(flavor=flavor, num_instances=count, seed=step, instance_ids=ids)
            try:
                decision = BERTH.select_destinations(table, request, NOW)
            except NoValidHost:
                continue
            if data.draw(st.booleans()):
                commit(table, decision)
        elif action == "claim":
            host = data.draw(st.sampled_from(table.names))
            try:
                table.claim(f"c{step}", host, flavor)
            except ClaimError:
                continue
        elif action == "release" and table.allocations:
            table.release(data.draw(st.sampled_from(sorted(table.allocations))))
        elif action == "copy":
            table = table.copy()
        _assert_caches_exact(table)


@settings(max_examples=examples(0.3), deadline=None)
@given(table=tables(min_hosts=2, max_hosts=5), data=st.data())
def test_fragmentation_cost_cache_matches_a_fresh_table(
    table: HostTable, data: st.DataObject
) -> None:
    """Weighing on a table with warm caches scores hosts exactly as a cold copy does."""
    flavors = sorted(table.flavors)
    for step in range(6):
        flavor = data.draw(st.sampled_from(flavors))
        request = RequestSpec(flavor=flavor, seed=step, instance_ids=(f"v{step}",))
        try:
            warm = BERTH.select_destinations(table, request, NOW)
        except NoValidHost:
            continue
        cold_table = table.copy()
        cold_table._derived.clear()
        cold = BERTH.select_destinations(cold_table, request, NOW)
        assert warm.hosts == cold.hosts
        assert [s.alternates for s in warm.selections] == [s.alternates for s in cold.selections]
        commit(table, warm)
