"""The planner's one-host fast paths give exactly what the vectorised code gives.

(1) `HostValue.one` and `HostValue.progress_one` (plain Python numbers, one host) equal
    `HostValue.of` and `HostValue.progress` bit for bit, on random hosts, flavors of every NUMA
    mode, random free amounts (negative ones too), instance counts around the per-host limit,
    both objectives, weights and drain hosts.
(2) Plans are identical, move for move and figure for figure, to those of a reference planner
    whose hot functions (`removal_order`, the per-host `loss` and `current` arrays) are the
    straightforward vectorised versions the fast ones replaced.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import SchedulerConfig, profile
from berth.core.defrag import Budget, Objective, Target, plan_defrag
from berth.core.defrag import planner as planner_module
from berth.core.defrag.objective import HostValue
from berth.core.defrag.planner import (
    _EPS,
    F64,
    I64,
    PATIENCE,
    PREFIX,
    _Planner,
    _size,
)
from berth.core.defrag.waves import Step
from berth.core.engine import FilterScheduler
from berth.core.errors import ClaimError
from berth.core.model import DiskInventory, Flavor, Fleet, Host, NumaCell
from berth.core.numa import vector
from berth.core.resources import CELL_BASE
from berth.core.table import Allocation, HostTable
from tests.builders import NOW
from tests.core.strategies import examples, tables
from tests.core.test_defrag_properties import budgets, fragmented, targets

SCHEDULERS = [
    FilterScheduler.from_config(profile("berth")),  # an instances-per-host limit of 50
    FilterScheduler.from_config(
        SchedulerConfig(filters=["compute", "ram", "numa_topology"])
    ),  # no limit
]


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
    which=st.integers(0, 1),
)
def test_one_host_value_equals_the_vectorised(
    table: HostTable, data: st.DataObject, seed: int, which: int
) -> None:
    names = sorted(table.flavors)
    drain = tuple(data.draw(st.lists(st.sampled_from(table.names), max_size=2, unique=True)))
    if data.draw(st.integers(0, 3)) == 0:
        target = Target(objective=Objective.EMPTY_HOSTS, drain=drain)
    else:
        flavors = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        weights = data.draw(
            st.none()
            | st.lists(
                st.sampled_from([0.5, 1.0, 2.5, 3.0]), min_size=len(flavors), max_size=len(flavors)
            ).map(tuple)
        )
        target = Target(flavors=tuple(flavors), weights=weights, drain=drain)
    value = HostValue(table, target, SCHEDULERS[which], NOW)
    cf, hf = _random_free(table, seed)
    rng = np.random.default_rng(seed + 1)
    n_inst = rng.integers(0, 60, len(table)).astype(np.int64)
    rows = np.arange(len(table))
    vector = value.of(rows, cf, hf, n_inst)
    for r in rows.tolist():
        assert value.one(r, cf[r].tolist(), hf[r].tolist(), int(n_inst[r])) == vector[r]
    if target.objective is Objective.CAPACITY:
        smooth = value.progress(cf, hf)
        for r in rows.tolist():
            assert value.progress_one(cf[r].tolist(), hf[r].tolist()) == smooth[r]


class _Reference(_Planner):
    """The planner with the straightforward versions of what the fast paths replaced: vectorised
    values, `estimates` stacking the footprints and summing with `np.add.at` on every call,
    `removal_order` never remembered, footprints by `plan_for`, the per-host mask always."""

    def loss(self, flavor: str) -> F64:
        work, value = self.work, self.value
        d = work.demand(flavor)

        def compute(rows: I64 | None) -> F64:
            rr = np.arange(len(work)) if rows is None else rows
            cell_free, host_free = work.free_rows(rows)
            cell_use, host_use = vector.place(d, cell_free, host_free)
            n_inst = work.n_instances[rr].astype(np.int64)
            before = value.of(rr, cell_free, host_free, n_inst)
            after = value.of(rr, cell_free - cell_use, host_free - host_use, n_inst + 1)
            return before - after

        return work.derived(("reference.loss", flavor), compute)

    def current(self) -> F64:
        work, value = self.work, self.value
        return work.derived(("reference.value",), lambda rows: value.rows(work, _all(work, rows)))

    def best_target(self, alloc: Allocation) -> int | None:
        work = self.work
        mask = self.rules.mask(work, alloc) & (self.touches < self.per_host)
        if self.exclusive:
            mask &= ~self.is_source
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return None
        loss = self.loss(alloc.flavor)[rows]
        rows = rows[loss <= loss.min() + _EPS]
        fit = work.resource_counts(alloc.flavor)[rows]
        rows = rows[fit == fit.min()]
        return int(rows[np.argmin(self.tie[rows])])

    def move(self, alloc: Allocation, row: int, cell_use: I64 | None = None) -> None:
        work = self.work
        name = work.names[row]
        planned, host_use = work.plan_for(alloc.flavor, row)
        cell_use = planned if cell_use is None else cell_use  # the search states its shape
        self.journal.migrate(alloc, name, cell_use, host_use)
        self.steps.append(Step(alloc, name, cell_use, host_use))
        src = work.index[alloc.host]
        self.touches[src] += 1
        self.touches[row] += 1
        self.is_source[src] = True
        self.is_target[row] = True

    def best_subset(self, row: int, limit: int) -> tuple[list[str], float]:
        order, gains = self.removal_order(row)  # never remembered
        k = min(len(order), limit)
        if k == 0:
            return [], 0.0
        ratios = gains[:k] / np.arange(1, k + 1)
        j = int(np.argmax(ratios))
        if gains[j] <= _EPS:
            return [], 0.0
        return order[: j + 1], float(gains[j])

    def estimates(self, rows: I64) -> F64:
        work, value = self.work, self.value
        ids = [i for r in rows for i in self.movable[int(r)]]
        allocs = [work.allocations[i] for i in ids]
        owner = np.array([work.index[a.host] for a in allocs], dtype=np.int64)
        size = np.array([_size(work, a) for a in allocs], dtype=np.int64)
        size = size[:, 0] * (1 << 32) + size[:, 1]
        cell_use = np.stack([a.cell_use for a in allocs])
        host_use = np.stack([a.host_use for a in allocs])
        now = self.current()
        cell_free, host_free = work.free_rows(owner)
        n_inst = work.n_instances[owner].astype(np.int64)
        single = value.of(owner, cell_free + cell_use, host_free + host_use, n_inst - 1)
        single -= now[owner]
        n = len(work)
        best_single = np.full(n, -np.inf)
        np.maximum.at(best_single, owner, single)
        best = best_single[rows]
        cf, hf = work.free_rows(rows)
        left = work.n_instances[rows].astype(np.int64)
        core = np.asarray(cell_use[:, :, :CELL_BASE].any(axis=2))
        groups = [np.ones(len(ids), dtype=bool)]
        groups += [core[:, c] & ~core[:, 1 - c] for c in range(core.shape[1])]
        for members in groups:
            idx = np.flatnonzero(members)
            if idx.size == 0:
                continue
            idx = idx[np.lexsort((-size[idx], owner[idx]))]
            own = owner[idx]
            first = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
            rank = np.arange(idx.size) - np.repeat(first, np.diff(np.r_[first, idx.size]))
            count = np.bincount(own, minlength=n)[rows]
            for j in (*range(1, PREFIX + 1), None):
                take_ = idx if j is None else idx[rank < j]
                cell_sum = np.zeros((n, *cell_use.shape[1:]), dtype=np.int64)
                host_sum = np.zeros((n, host_use.shape[1]), dtype=np.int64)
                np.add.at(cell_sum, owner[take_], cell_use[take_])
                np.add.at(host_sum, owner[take_], host_use[take_])
                k = count if j is None else np.minimum(count, j)
                opened = value.of(rows, cf + cell_sum[rows], hf + host_sum[rows], left - k)
                ratio = np.where(k > 0, (opened - now[rows]) / np.maximum(k, 1), -np.inf)
                best = np.maximum(best, ratio)
        return best

    def removal_order(self, row: int) -> tuple[list[str], F64]:
        work, value = self.work, self.value
        ids = sorted(
            self.movable.get(row, []),
            key=lambda i: _size(work, work.allocations[i]),
            reverse=True,
        )
        limit = min(len(ids), int(self.per_host - self.touches[row]))
        if limit <= 0:
            return [], np.zeros(0)
        cell_use = np.stack([work.allocations[i].cell_use for i in ids])
        host_use = np.stack([work.allocations[i].host_use for i in ids])
        cell_free = work.cell_free[row].copy()
        host_free = work.host_free[row].copy()
        n_inst = int(work.n_instances[row])
        v0 = float(self.current()[row])
        remaining = list(range(len(ids)))
        chosen: list[int] = []
        gains: list[float] = []
        best_ratio, best_j = 0.0, 0
        for j in range(1, limit + 1):
            cand = np.array(remaining, dtype=np.int64)
            vals = value.of(
                np.full(cand.size, row, dtype=np.int64),
                cell_free[None] + cell_use[cand],
                host_free[None] + host_use[cand],
                np.full(cand.size, n_inst - j, dtype=np.int64),
            )
            best = np.flatnonzero(vals >= vals.max() - _EPS)
            if best.size > 1:
                closer = value.progress(
                    cell_free[None] + cell_use[cand[best]], host_free[None] + host_use[cand[best]]
                )
                best = best[closer >= closer.max() - _EPS]
            pick = int(best[0])
            chosen.append(int(cand[pick]))
            remaining.remove(int(cand[pick]))
            cell_free += cell_use[cand[pick]]
            host_free += host_use[cand[pick]]
            gains.append(float(vals[pick]) - v0)
            if gains[-1] > _EPS and gains[-1] / j > best_ratio + _EPS:
                best_ratio, best_j = gains[-1] / j, j
            elif j - best_j >= PATIENCE:
                break
        return [ids[c] for c in chosen], np.array(gains)


def _all(table: HostTable, rows: I64 | None) -> I64:
    return np.arange(len(table)) if rows is None else rows


@settings(max_examples=examples(0.6), deadline=None)
@given(data=st.data(), table=fragmented(), seed=st.integers(0, 3), which=st.integers(0, 1))
def test_plans_equal_the_reference_planner(
    data: st.DataObject, table: HostTable, seed: int, which: int
) -> None:
    target = data.draw(targets(table))
    budget: Budget = data.draw(budgets)
    scheduler = SCHEDULERS[which]
    fast = plan_defrag(table, target, budget, scheduler=scheduler, now=NOW, seed=seed)
    with mock.patch.object(planner_module, "_Planner", _Reference):
        reference = plan_defrag(table, target, budget, scheduler=scheduler, now=NOW, seed=seed)
    assert fast == reference


def _numa_fleet(n_hosts: int, seed: int) -> HostTable:
    """Two-cell hosts filled with small pinned guests in random order, then a third deleted
    (bench_defrag's fleet, small): many ties between removals, which the order must keep."""
    rng = np.random.default_rng(seed)
    cell = NumaCell(dedicated_cpus=24, memory_mb=98304)
    hosts = [
        Host(name=f"h{i:03d}", numa_cells=[cell, cell], last_heartbeat=NOW, disk=DiskInventory())
        for i in range(n_hosts)
    ]
    sizes = {"s2": (2, 1), "s4": (4, 1), "m8": (8, 1), "l16": (16, 1), "x32": (32, 2)}
    flavors = [
        Flavor(
            name=name,
            vcpus=cpus,
            memory_mb=cpus * 4096,
            extra_specs={"hw:cpu_policy": "dedicated", "hw:numa_nodes": str(nodes)},
        )
        for name, (cpus, nodes) in sizes.items()
    ]
    table = HostTable.from_fleet(Fleet(now=NOW, hosts=hosts, flavors=flavors))
    k = 0
    for name in table.names:
        fails = 0
        while fails < 3:
            try:
                table.claim(f"vm{k}", name, str(rng.choice(["s2", "s2", "s4", "m8"])))
                k += 1
            except ClaimError:
                fails += 1
    ids = list(table.allocations)
    for i in rng.permutation(len(ids))[: len(ids) // 3]:
        table.release(ids[i])
    return table


def test_plans_equal_the_reference_on_a_larger_fleet() -> None:
    table = _numa_fleet(80, seed=3)
    scheduler = SCHEDULERS[0]
    for target, budget in [
        (Target(flavors=("l16", "x32")), Budget(max_migrations=40, max_concurrent=4)),
        (
            Target(flavors=("l16", "x32"), weights=(1.0, 2.5), drain=("h000",)),
            Budget(max_migrations=30, max_per_host=3),
        ),
        (Target(objective=Objective.EMPTY_HOSTS), Budget(max_migrations=30)),
    ]:
        fast = plan_defrag(table, target, budget, scheduler=scheduler, now=NOW, seed=1)
        with mock.patch.object(planner_module, "_Planner", _Reference):
            ref = plan_defrag(table, target, budget, scheduler=scheduler, now=NOW, seed=1)
        assert fast.moves, target
        assert fast == ref, target
