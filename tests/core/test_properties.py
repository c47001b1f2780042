"""Properties over random small fleets and flavors of every NUMA mode (Hypothesis).

(1) no sequence of placements over-commits any column, and the allocations account exactly for
    what is used; every footprint has its mode's shape;
(2) capacity is exact: `capacity == k` means k sequential placements succeed on that host and
    the (k+1)-th fails;
(3) decisions are deterministic for a table, request and seed (also on a copy);
(4) a failed request (NoValidHost, StaleGenerationError) leaves the table bit-for-bit unchanged;
(5) release after claim restores the table exactly (generations move on).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import PROFILES, SchedulerConfig, profile
from berth.core.engine import Decision, FilterScheduler, commit
from berth.core.errors import StaleGenerationError
from berth.core.explain import NoValidHost
from berth.core.flavors import NumaMode, PciPolicy
from berth.core.model import Instance
from berth.core.request import RequestSpec
from berth.core.resources import CELL_BASE
from berth.core.table import HostTable
from tests.builders import NOW, assert_unchanged, snapshot
from tests.core.strategies import MODES, examples, fleets, tables

CONFIGS = {
    "plain": SchedulerConfig(),  # no weighers: seeded choice among all hosts that fit
    "chance": SchedulerConfig(driver="chance"),
    **{name: profile(name) for name in PROFILES},  # every shipped weigher profile
}
SCHEDULERS = {name: FilterScheduler.from_config(c) for name, c in CONFIGS.items()}
schedulers = st.sampled_from(sorted(SCHEDULERS)).map(SCHEDULERS.__getitem__)


class Ids:
    """Unique instance ids across a test's requests."""

    def __init__(self) -> None:
        self.n = 0

    def take(self, k: int) -> tuple[str, ...]:
        self.n += k
        return tuple(f"vm{i}" for i in range(self.n - k, self.n))


def requests(table: HostTable) -> st.SearchStrategy[tuple[str, int, int]]:
    """(flavor, num_instances, seed): mostly single instances, some multi-instance."""
    return st.tuples(
        st.sampled_from(sorted(table.flavors)),
        st.sampled_from([1, 1, 1, 2, 3]),
        st.integers(0, 2**32),
    )


def decide(sched: FilterScheduler, table: HostTable, req: RequestSpec) -> Decision | NoValidHost:
    """The decision, or the NoValidHost raised instead."""
    try:
        return sched.select_destinations(table, req, NOW)
    except NoValidHost as exc:
        return exc


def try_place(
    sched: FilterScheduler, table: HostTable, ids: Ids, flavor: str, k: int, seed: int, **kw: Any
) -> bool:
    req = RequestSpec(flavor=flavor, num_instances=k, seed=seed, instance_ids=ids.take(k), **kw)
    decision = decide(sched, table, req)
    if isinstance(decision, NoValidHost):
        return False
    commit(table, decision)
    return True


def prefill(data: st.DataObject, table: HostTable, ids: Ids, max_requests: int = 6) -> None:
    """Existing partial usage: a few random placements by the chance driver."""
    for flavor, k, seed in data.draw(st.lists(requests(table), max_size=max_requests)):
        try_place(SCHEDULERS["chance"], table, ids, flavor, k, seed)


# ---------------------------------------------------------------------------- invariants


def check_accounting(table: HostTable) -> None:
    """No column over-committed; allocations add up to exactly what is used."""
    assert (table.cell_free >= 0).all()
    assert (table.host_free >= 0).all()
    assert (table.cell_free <= table.cell_cap).all()
    cell_sum = np.zeros_like(table.cell_cap)
    host_sum = np.zeros_like(table.host_cap)
    count = np.zeros(len(table), dtype=np.int64)
    groups: dict[str, dict[int, int]] = {}
    for alloc in table.allocations.values():
        row = table.index[alloc.host]
        cell_sum[row] += alloc.cell_use
        host_sum[row] += alloc.host_use
        count[row] += 1
        if alloc.server_group is not None:
            rows = groups.setdefault(alloc.server_group, {})
            rows[row] = rows.get(row, 0) + 1
        check_footprint(table, alloc.flavor, alloc.cell_use, alloc.host_use)
    assert np.array_equal(cell_sum, table.cell_cap - table.cell_free)
    assert np.array_equal(host_sum, table.host_cap - table.host_free)
    assert np.array_equal(count, table.n_instances)
    assert groups == table.group_rows


def check_footprint(table: HostTable, flavor: str, cell_use: Any, host_use: Any) -> None:
    """The exact use of one instance has its flavor's shape."""
    d = table.demands[flavor]
    spec = d.spec
    cpu, mem = d.cpu_column, d.mem_column
    assert np.array_equal(host_use, d.host)
    assert cell_use[:, cpu].sum() == (spec.vcpus if spec.numa else 0)
    assert cell_use[:, mem].sum() == (spec.memory_mb if spec.numa else 0)
    for other in {0, 1, 2, 3} - {cpu, mem}:
        assert not cell_use[:, other].any()
    pci = cell_use[:, CELL_BASE:].sum(axis=0)
    want = np.zeros(len(table.device_types), dtype=np.int64)
    for device, n in spec.pci.items():
        want[table.device_types.index(device)] = n
    assert np.array_equal(pci, want)
    mode = spec.numa_mode
    used = [c for c in range(cell_use.shape[0]) if cell_use[c, cpu] or cell_use[c, mem]]
    if mode in (NumaMode.SINGLE, NumaMode.EVEN, NumaMode.FIXED):
        assert len(used) == len(spec.cells)
        shapes = sorted((int(cell_use[c, cpu]), int(cell_use[c, mem])) for c in used)
        assert shapes == sorted((s.vcpus, s.memory_mb) for s in spec.cells)
        local = mode == NumaMode.SINGLE or cell_use.shape[0] > 2  # two of two: any cell is local
        if spec.pci_policy == PciPolicy.REQUIRED and local:  # devices in the guest's cells
            others = [c for c in range(cell_use.shape[0]) if c not in used]
            assert not cell_use[others, CELL_BASE:].any()
    elif mode == NumaMode.FLEX:
        least = spec.cells[0]
        assert len(used) == 2
        assert (cell_use[used, cpu] >= least.vcpus).all()
        assert (cell_use[used, mem] >= least.memory_mb).all()


# ---------------------------------------------------------------------------- (1) accounting


@pytest.mark.slow
@settings(max_examples=examples(1.2))
@given(table=tables(), sched=schedulers, data=st.data())
def test_placements_never_overcommit(table, sched, data):
    ids = Ids()
    check_accounting(table)
    live = 0
    for flavor, k, seed in data.draw(st.lists(requests(table), min_size=1, max_size=12)):
        if try_place(sched, table, ids, flavor, k, seed):
            live += k  # all or nothing
        check_accounting(table)
        if data.draw(st.integers(0, 4)) == 0 and table.allocations:  # some churn
            table.release(data.draw(st.sampled_from(sorted(table.allocations))))
            live -= 1
            check_accounting(table)
        assert len(table.allocations) == live


# ---------------------------------------------------------------------------- (2) capacity


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@settings(max_examples=examples(0.8))
@given(data=st.data())
def test_capacity_is_exact(mode, data):
    table = data.draw(tables(target=mode, extra_flavors=2))
    ids = Ids()
    prefill(data, table, ids)
    sched = data.draw(schedulers)
    capacity = sched.capacity(table, "t", NOW)
    assert capacity.shape == (len(table),)
    for row, name in enumerate(table.names):
        k = int(capacity[row])
        others = tuple(n for n in table.names if n != name)
        trial = table.copy()
        for i in range(k):
            assert try_place(sched, trial, ids, "t", 1, i, ignore_hosts=others), (name, i, k)
            # the count drops by exactly one with each placement
            assert int(sched.capacity(trial, "t", NOW)[row]) == k - i - 1
        assert not try_place(sched, trial, ids, "t", 1, k, ignore_hosts=others), (name, k)
        check_accounting(trial)
        # the other hosts' counts never moved
        after = sched.capacity(trial, "t", NOW)
        assert np.array_equal(np.delete(after, row), np.delete(capacity, row))
    # all at once: k instances in one request on the host, not k + 1
    for row, name in enumerate(table.names):
        k = int(capacity[row])
        others = tuple(n for n in table.names if n != name)
        if k:
            assert try_place(sched, table.copy(), ids, "t", k, 0, ignore_hosts=others)
        assert not try_place(sched, table.copy(), ids, "t", k + 1, 0, ignore_hosts=others)


@settings(max_examples=examples(0.6))
@given(data=st.data())
def test_capacity_does_not_depend_on_the_rest_of_the_fleet(data):
    """With every other host disabled, a host takes exactly its count (no request hints)."""
    table = data.draw(tables(max_hosts=3))
    ids = Ids()
    prefill(data, table, ids)
    flavor = data.draw(st.sampled_from(sorted(table.flavors)))
    sched = SCHEDULERS["plain"]
    counts = sched.capacity(table, flavor, NOW)
    for name in table.names:
        alone = table.copy()
        row = alone.index[name]
        for other in table.names:
            if other != name:
                alone.set_enabled(other, False)
        k = int(counts[row])
        assert int(sched.capacity(alone, flavor, NOW)[row]) == k
        placed = 0
        while try_place(sched, alone, ids, flavor, 1, placed):
            placed += 1
            assert placed <= k
        assert placed == k


# ---------------------------------------------------------------------------- (3) determinism


def _same(a: Any, b: Any) -> None:
    assert a.hosts == b.hosts
    assert a.generations == b.generations
    for x, y in zip(a.selections, b.selections, strict=True):
        assert (x.instance_id, x.host, x.alternates) == (y.instance_id, y.host, y.alternates)
        assert np.array_equal(x.cell_use, y.cell_use)
        assert np.array_equal(x.host_use, y.host_use)


@settings(max_examples=examples(0.8))
@given(table=tables(), name=st.sampled_from(sorted(SCHEDULERS)), data=st.data())
def test_decisions_are_deterministic(table, name, data):
    ids = Ids()
    prefill(data, table, ids)
    flavor, k, seed = data.draw(requests(table))
    req = RequestSpec(flavor=flavor, num_instances=k, seed=seed)
    first = decide(SCHEDULERS[name], table, req)
    fresh = FilterScheduler.from_config(CONFIGS[name])
    for sched, other in [
        (SCHEDULERS[name], table),
        (SCHEDULERS[name], table.copy()),
        (fresh, table.copy()),
    ]:
        again = decide(sched, other, req)
        if isinstance(first, NoValidHost):
            assert isinstance(again, NoValidHost)
            assert again.diagnosis == first.diagnosis
        else:
            assert isinstance(again, Decision)
            _same(first, again)


# ---------------------------------------------------------------------------- (4) failures


@settings(max_examples=examples(1.0))
@given(table=tables(), sched=schedulers, data=st.data())
def test_failed_requests_leave_the_table_unchanged(table, sched, data):
    ids = Ids()
    prefill(data, table, ids)
    flavor = data.draw(st.sampled_from(sorted(table.flavors)))
    k = data.draw(st.integers(1, 8))
    req = RequestSpec(flavor=flavor, num_instances=k, instance_ids=ids.take(k))
    before = snapshot(table)
    decision = decide(sched, table, req)
    if isinstance(decision, NoValidHost):
        assert_unchanged(table, before)
        diagnosis = decision.diagnosis
        assert sum(r.hosts for r in diagnosis.reasons) == len(table)
        assert str(decision).startswith(
            (f"0/{len(table)} hosts fit", f"instance {diagnosis.instance} of {k}: 0/")
        )
        return
    assert_unchanged(table, before)  # deciding alone changes nothing
    # someone else changes a host the decision touched: the commit must refuse, untouched
    victim = data.draw(st.sampled_from(sorted(decision.generations)))
    if data.draw(st.booleans()):
        table.set_enabled(victim, bool(table.enabled[table.index[victim]]))
    else:
        other = next(iter(table.allocations), None)
        if other is not None and table.allocations[other].host == victim:
            table.release(other)
        else:
            table.set_enabled(victim, True)
    changed = snapshot(table)
    with pytest.raises(StaleGenerationError):
        commit(table, decision)
    assert_unchanged(table, changed)
    check_accounting(table)


# ---------------------------------------------------------------------------- (5) release


@settings(max_examples=examples(1.0))
@given(table=tables(), sched=schedulers, data=st.data())
def test_release_after_claim_restores_the_table(table, sched, data):
    ids = Ids()
    prefill(data, table, ids)
    flavor, k, seed = data.draw(requests(table))
    before = snapshot(table)
    req = RequestSpec(flavor=flavor, num_instances=k, seed=seed, instance_ids=ids.take(k))
    decision = decide(sched, table, req)
    if isinstance(decision, NoValidHost):
        return
    commit(table, decision)
    check_accounting(table)
    for sel in reversed(decision.selections) if data.draw(st.booleans()) else decision.selections:
        table.release(sel.instance_id)
    assert_unchanged(table, before, except_={"generation"})
    moved = table.generation - before["generation"]
    expected = np.zeros(len(table), dtype=np.int64)
    for sel in decision.selections:
        expected[table.index[sel.host]] += 2  # one for the claim, one for the release
    assert np.array_equal(moved, expected)


# ---------------------------------------------------------------------------- (6) snapshots


def as_instances(table: HostTable) -> list[Instance]:
    """The table's allocations as snapshot instances with their exact cells (like the demo)."""
    return [
        i.model_copy(update={"server_group": None, "project": "default"})
        for i in table.snapshot_instances()
    ]


@settings(max_examples=examples(1.0))
@given(fleet=fleets(), sched=schedulers, data=st.data())
def test_snapshot_round_trip_reproduces_the_table(fleet, sched, data):
    table = HostTable.from_fleet(fleet)
    ids = Ids()
    for flavor, k, seed in data.draw(st.lists(requests(table), min_size=1, max_size=10)):
        try_place(sched, table, ids, flavor, k, seed)
        if data.draw(st.integers(0, 3)) == 0 and table.allocations:
            table.release(data.draw(st.sampled_from(sorted(table.allocations))))
    reloaded = HostTable.from_fleet(fleet.model_copy(update={"instances": as_instances(table)}))
    check_accounting(reloaded)
    assert np.array_equal(reloaded.cell_free[:, :, :CELL_BASE], table.cell_free[:, :, :CELL_BASE])
    assert np.array_equal(reloaded.host_free, table.host_free)
    assert np.array_equal(
        reloaded.cell_free[:, :, CELL_BASE:].sum(axis=1),
        table.cell_free[:, :, CELL_BASE:].sum(axis=1),
    )
    assert np.array_equal(reloaded.n_instances, table.n_instances)
