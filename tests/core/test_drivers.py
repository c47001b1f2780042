"""The caching driver: a table kept exact by generation-stamped change events."""

from __future__ import annotations

import numpy as np
import pytest

from berth.core.drivers import Applied, CachingScheduler
from berth.core.errors import ClaimError
from berth.core.events import (
    Event,
    Heartbeat,
    HostAdded,
    HostStateChanged,
    InstanceClaimed,
    InstanceReleased,
)
from berth.core.explain import NoValidHost
from berth.core.filters.aggregate_extra_specs import AggregateInstanceExtraSpecsFilter
from berth.core.filters.traits import TraitsFilter
from berth.core.flavors import parse_flavor
from berth.core.resources import C_PCPU, H_MEM
from berth.core.table import HostTable
from tests.builders import (
    NOW,
    assert_unchanged,
    context,
    flavor,
    host,
    passing,
    request,
    scheduler,
    snapshot,
    table_of,
)

FLAVORS = [
    flavor("p", vcpus=2, mem=1024, pinned=True),
    flavor("big", vcpus=8, mem=8192, pinned=True),
]


def _table() -> HostTable:
    hosts = [host("h1", cells=2, pcpus=4, mem=4096), host("h2", cells=2, pcpus=4, mem=4096)]
    return table_of(hosts, FLAVORS)


def _cache() -> CachingScheduler:
    return CachingScheduler(scheduler(weighers={"ram": -1.0}), _table())


def _claim_event(cache: CachingScheduler, host_name: str, iid: str, generation: int | None = None):
    """The event another scheduler would publish after claiming `iid` on `host_name`."""
    row = cache.table.index[host_name]
    cell_use, host_use = cache.table.plan_for("p", row)
    if generation is None:
        generation = int(cache.table.generation[row]) + 1
    return InstanceClaimed(host_name, generation, iid, "p", cell_use, host_use)


def test_next_generation_events_apply():
    cache = _cache()
    claimed = _claim_event(cache, "h1", "a")
    assert claimed.generation == 1
    assert cache.apply(claimed) is Applied.APPLIED
    table = cache.table
    assert table.generation.tolist() == [1, 0]
    assert table.allocations["a"].host == "h1"
    assert table.cell_free[0, :, C_PCPU].sum() == 6
    assert table.host_free[0, H_MEM] == 8192 - 1024

    assert cache.apply(HostStateChanged("h1", 2, enabled=False)) is Applied.APPLIED
    assert not table.enabled[0]
    assert cache.apply(InstanceReleased("h1", 3, "a")) is Applied.APPLIED
    assert "a" not in table.allocations
    assert table.cell_free[0, :, C_PCPU].tolist() == [4, 4]
    assert table.generation.tolist() == [3, 0]
    assert not cache.needs_refresh


def test_stale_events_are_ignored_and_never_overwrite_newer_state():
    cache = _cache()
    assert cache.apply(HostStateChanged("h1", 1, enabled=False)) is Applied.APPLIED
    assert cache.apply(HostStateChanged("h1", 2, enabled=True)) is Applied.APPLIED
    before = snapshot(cache.table)
    # a late duplicate and an older report: both ignored
    assert cache.apply(HostStateChanged("h1", 2, enabled=True)) is Applied.STALE
    assert cache.apply(HostStateChanged("h1", 1, enabled=False)) is Applied.STALE
    assert cache.apply(_claim_event(cache, "h1", "late", generation=1)) is Applied.STALE
    assert cache.apply(InstanceReleased("h1", 0, "whatever")) is Applied.STALE
    assert_unchanged(cache.table, before)
    assert cache.table.enabled[0]
    assert "late" not in cache.table.allocations
    assert not cache.needs_refresh


def test_skipped_generation_is_a_gap_and_asks_for_refresh():
    cache = _cache()
    before = snapshot(cache.table)
    assert cache.apply(HostStateChanged("h2", 2, enabled=False)) is Applied.GAP
    assert cache.needs_refresh
    assert_unchanged(cache.table, before)
    assert cache.apply(_claim_event(cache, "h1", "a", generation=5)) is Applied.GAP
    assert "a" not in cache.table.allocations


def test_refresh_swaps_the_table():
    cache = _cache()
    cache.apply(HostStateChanged("h2", 7, enabled=False))
    assert cache.needs_refresh
    fresh = table_of([host("n1", cells=2, pcpus=8, mem=8192)], FLAVORS)
    cache.refresh(lambda: fresh)
    assert cache.table is fresh
    assert not cache.needs_refresh
    decision = cache.schedule(request("p"), NOW)
    assert decision.hosts == ["n1"]


def test_heartbeats_only_move_forward():
    cache = _cache()
    cache.apply(Heartbeat("h1", NOW + 30))
    assert cache.table.heartbeat[0] == NOW + 30
    before = snapshot(cache.table)
    cache.apply(Heartbeat("h1", NOW + 10))  # delayed report: older than what we have
    assert_unchanged(cache.table, before)
    assert cache.table.heartbeat[0] == NOW + 30
    assert cache.table.generation.tolist() == [0, 0]  # heartbeats do not bump generations


def test_older_heartbeat_is_reported_stale():
    cache = _cache()
    assert cache.apply(Heartbeat("h1", NOW + 30)) is Applied.APPLIED
    assert cache.apply(Heartbeat("h1", NOW + 10)) is Applied.STALE


def test_heartbeat_revives_a_host_that_never_reported():
    table = table_of(
        [host("h1", cells=2, pcpus=4, mem=4096, heartbeat=None)],
        FLAVORS,
    )
    cache = CachingScheduler(scheduler(), table)
    with pytest.raises(NoValidHost, match="no heartbeat"):
        cache.schedule(request("p"), NOW)
    cache.apply(Heartbeat("h1", NOW - 5))
    assert cache.schedule(request("p"), NOW).hosts == ["h1"]


def test_host_added_is_usable_for_placement():
    cache = _cache()
    with pytest.raises(NoValidHost):
        cache.schedule(request("big"), NOW)
    new = host("h3", numa=None, cells=1, pcpus=8, mem=16384, traits=["HW_NEW"], aggregates=["agg"])
    assert cache.apply(HostAdded(new, {"agg": {"ssd": "true"}})) is Applied.APPLIED
    table = cache.table
    assert table.names == ["h1", "h2", "h3"]
    assert table.generation.tolist() == [0, 0, 0]
    assert table.cell_free[2, 0, C_PCPU] == 8
    assert table.traits.get("HW_NEW") >= 0
    decision = cache.schedule(request("big"), NOW)
    assert decision.hosts == ["h3"]
    assert table.generation.tolist() == [0, 0, 1]
    # the new row's aggregate metadata and traits are visible to the filters
    ctx = context(table, "p")
    assert AggregateInstanceExtraSpecsFilter().mask(ctx).tolist() == [True, True, True]
    assert passing(TraitsFilter(), table, "p") == ["h1", "h2", "h3"]
    # adding it again is a stale report
    assert cache.apply(HostAdded(new)) is Applied.STALE
    assert len(table) == 3


def test_schedule_claims_in_the_cache():
    cache = _cache()
    decision = cache.schedule(request("p", num_instances=3), NOW)
    assert len(decision.selections) == 3
    assert cache.table.n_instances.sum() == 3
    assert set(cache.table.allocations) == {s.instance_id for s in decision.selections}
    # the events a persistence layer would emit for this decision are already applied: stale
    for sel in decision.selections:
        row = cache.table.index[sel.host]
        event = InstanceClaimed(
            sel.host,
            int(cache.table.generation[row]),
            sel.instance_id,
            "p",
            sel.cell_use,
            sel.host_use,
        )
        assert cache.apply(event) is Applied.STALE


def test_events_for_unknown_hosts_are_errors():
    cache = _cache()
    with pytest.raises(ClaimError, match="unknown host 'h9'"):
        cache.apply(HostStateChanged("h9", 1, enabled=False))


def test_replaying_a_source_tables_events_reproduces_it():
    source = _table()
    cache = CachingScheduler(scheduler(), _table())
    events: list[Event] = []

    def emit_claim(iid: str, host_name: str) -> None:
        alloc = source.claim(iid, host_name, "p")
        gen = int(source.generation[source.index[host_name]])
        events.append(InstanceClaimed(host_name, gen, iid, "p", alloc.cell_use, alloc.host_use))

    emit_claim("a", "h1")
    emit_claim("b", "h1")
    emit_claim("c", "h2")
    source.release("a")
    events.append(InstanceReleased("h1", int(source.generation[0]), "a"))
    source.set_enabled("h2", False)
    events.append(HostStateChanged("h2", int(source.generation[1]), False))
    emit_claim("d", "h1")

    # out of order delivery with duplicates: stale ones are dropped, gaps flagged
    assert cache.apply(events[1]) is Applied.GAP
    for event in events:
        assert cache.apply(event) is Applied.APPLIED
    for event in events:
        assert cache.apply(event) is Applied.STALE
    assert_unchanged(cache.table, snapshot(source))
    assert np.array_equal(cache.table.cell_free, source.cell_free)


def test_host_added_widens_the_trait_bitmask():
    names = [f"CUSTOM_T{i:02d}" for i in range(64)]
    table = table_of([host("h1", traits=names)], [flavor("f", required=["CUSTOM_T63"])])
    assert table.trait_bits.shape == (1, 1)
    cache = CachingScheduler(scheduler(), table)
    cache.apply(HostAdded(host("h2", traits=["CUSTOM_T63", "CUSTOM_NEW"])))
    assert cache.table.trait_bits.shape == (2, 2)
    assert passing(TraitsFilter(), cache.table, "f") == ["h1", "h2"]
    table.add_flavor(parse_flavor(flavor("g", required=["CUSTOM_NEW"]), {}))
    assert passing(TraitsFilter(), cache.table, "g") == ["h2"]
    table.add_flavor(parse_flavor(flavor("k", forbidden=["CUSTOM_T00"]), {}))
    assert passing(TraitsFilter(), cache.table, "k") == ["h2"]


def test_host_added_with_aggregate_metadata():
    cache = _cache()
    cache.table.add_flavor(parse_flavor(flavor("fast", vcpus=1, aggregate={"ssd": "true"}), {}))
    with pytest.raises(NoValidHost, match="2 aggregate ssd not s== true"):
        cache.schedule(request("fast"), NOW)
    cache.apply(HostAdded(host("h3", aggregates=["a"]), {"a": {"ssd": "true"}}))
    cache.apply(HostAdded(host("h4", aggregates=["b"]), {"b": {"ssd": "false"}}))
    assert cache.schedule(request("fast"), NOW).hosts == ["h3"]
