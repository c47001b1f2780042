"""Properties of the defragmentation planner over random fragmented fleets (Hypothesis).

Fleets: random hosts and flavors of every NUMA mode (`tests.core.strategies`), filled by the
real scheduler in a random arrival order (some instances in anti-affinity or affinity groups,
some not migratable), then a random share deleted. For every plan:

(1) `check_plan` accepts it and leaves the table unchanged;
(2) applying it wave by wave never over-commits and the allocations account exactly for use;
    deployment sets hold; not-migratable and affinity members never move; drain hosts are
    never targets; the figures after are the measured ones;
(3) the objective never goes down (without drain hosts);
(4) the same seed gives the same plan;
(5) `apply_moves` is all or nothing: a plan with a broken step leaves the table unchanged.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import SchedulerConfig, profile
from berth.core.defrag import (
    Budget,
    Objective,
    Plan,
    PlanError,
    Target,
    apply_moves,
    check_plan,
    measure,
    plan_defrag,
)
from berth.core.defrag.objective import HostValue
from berth.core.defrag.rules import TargetRules
from berth.core.engine import FilterScheduler, commit
from berth.core.explain import NoValidHost
from berth.core.filters.base import Context
from berth.core.model import Fleet, GroupPolicy, ServerGroup
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from tests.builders import NOW, assert_unchanged, flavor, snapshot
from tests.core.strategies import examples, fleets, pick

PLACER = FilterScheduler.from_config(profile("spread"))
SCHEDULERS = [
    FilterScheduler.from_config(profile("berth")),
    FilterScheduler.from_config(SchedulerConfig()),
]
GROUPS = [
    ServerGroup(id="anti", policy=GroupPolicy.ANTI_AFFINITY),
    ServerGroup(id="anti2", policy=GroupPolicy.ANTI_AFFINITY, max_server_per_host=2),
    ServerGroup(id="aff", policy=GroupPolicy.AFFINITY),
]


POOLS = ("CUSTOM_POOL_A", "CUSTOM_POOL_B")
"""Every host is in one of two pools (one trait each); targets may keep them."""


def pool_of(table: HostTable, host: str) -> set[str]:
    row = table.index[host]
    return {t for t in POOLS if table.traits.get(t) >= 0 and _has(table, row, t)}


def _has(table: HostTable, row: int, trait: str) -> bool:
    code = table.traits.get(trait)
    return bool(int(table.trait_bits[row, code // 64]) >> (code % 64) & 1)


@st.composite
def fragmented(draw: st.DrawFn) -> HostTable:
    """A random fleet filled in random order by the scheduler, then thinned at random."""
    base: Fleet = draw(fleets(min_hosts=2, max_hosts=6, extra_flavors=3))
    pooled = [h.model_copy(update={"traits": [draw(st.sampled_from(POOLS))]}) for h in base.hosts]
    base = base.model_copy(update={"hosts": pooled})
    common = [
        flavor("tiny", vcpus=1, mem=256),
        flavor("pin1", vcpus=1, mem=512, pinned=True, numa=1),
        flavor("even2", vcpus=2, mem=1024, numa=2),
    ]
    base = base.model_copy(update={"server_groups": GROUPS, "flavors": [*base.flavors, *common]})
    table = HostTable.from_fleet(base)
    names = pick(*sorted(table.flavors))  # built once, not per draw: the same examples
    for i in range(draw(st.integers(5, 40))):
        group = draw(pick(None, None, None, "anti", "anti2", "aff"))
        request = RequestSpec(
            flavor=draw(names),
            server_group=group,
            instance_ids=(f"vm{i}",),
            seed=i,
        )
        try:
            commit(table, PLACER.select_destinations(table, request, NOW))
        except NoValidHost:
            continue
    instances = table.snapshot_instances()
    kept = []
    for inst in instances:
        if draw(st.integers(0, 2)) == 0:
            continue  # deleted: the holes fragment the fleet
        if draw(st.integers(0, 5)) == 0:
            inst = inst.model_copy(update={"migratable": False})
        kept.append(inst)
    return HostTable.from_fleet(base.model_copy(update={"instances": kept}))


@st.composite
def targets(draw: st.DrawFn, table: HostTable) -> Target:
    drain: tuple[str, ...] = ()
    if draw(st.integers(0, 3)) == 0:
        drain = (draw(st.sampled_from(table.names)),)
    keep = POOLS if draw(st.booleans()) else ()
    if draw(st.booleans()):
        return Target(objective=Objective.EMPTY_HOSTS, drain=drain, keep_traits=keep)
    flavors = draw(st.lists(st.sampled_from(sorted(table.flavors)), min_size=1, max_size=2))
    flavors = sorted(set(flavors))
    weights = None
    if draw(st.booleans()):
        weights = tuple(float(draw(st.integers(1, 4))) for _ in flavors)
    return Target(flavors=tuple(flavors), weights=weights, drain=drain, keep_traits=keep)


budgets = st.builds(
    Budget,
    max_migrations=st.integers(0, 12),
    max_per_host=st.none() | st.integers(1, 4),
    max_concurrent=st.integers(1, 4),
)


def objective(table: HostTable, target: Target, scheduler: FilterScheduler) -> float:
    figures = measure(table, target, scheduler=scheduler, now=NOW)
    if target.objective is Objective.EMPTY_HOSTS:
        return float(figures.empty_hosts)
    weights = target.weights or tuple(1.0 for _ in target.flavors)
    return sum(w * figures.capacity[f] for f, w in zip(target.flavors, weights, strict=True))


def assert_consistent(table: HostTable) -> None:
    """No column over-committed and the allocations add up to exactly what is used."""
    assert (table.cell_free >= 0).all()
    assert (table.host_free >= 0).all()
    cell_used = np.zeros_like(table.cell_cap)
    host_used = np.zeros_like(table.host_cap)
    count = np.zeros(len(table), dtype=np.int64)
    for alloc in table.allocations.values():
        row = table.index[alloc.host]
        cell_used[row] += alloc.cell_use
        host_used[row] += alloc.host_use
        count[row] += 1
    assert np.array_equal(cell_used, table.cell_used)
    assert np.array_equal(host_used, table.host_used)
    assert np.array_equal(count, table.n_instances)
    for gid, group in table.groups.items():
        hosts = Counter(a.host for a in table.allocations.values() if a.server_group == gid)
        if group.policy == GroupPolicy.ANTI_AFFINITY:
            assert max(hosts.values(), default=0) <= group.max_server_per_host
        if group.policy == GroupPolicy.AFFINITY:
            assert len(hosts) <= 1 or all(h for h in hosts)  # members never move (below)


@settings(max_examples=examples(0.6))
@given(data=st.data(), table=fragmented(), seed=st.integers(0, 3))
def test_every_plan_is_valid_and_applies_exactly(
    data: st.DataObject, table: HostTable, seed: int
) -> None:
    target = data.draw(targets(table))
    budget = data.draw(budgets)
    scheduler = data.draw(st.sampled_from(SCHEDULERS))
    before = snapshot(table)
    plan = plan_defrag(table, target, budget, scheduler=scheduler, now=NOW, seed=seed)
    assert_unchanged(table, before)
    check_plan(table, plan)
    check_plan(table, plan, scheduler=scheduler, now=NOW)
    assert_unchanged(table, before)
    assert plan.before == measure(table, target, scheduler=scheduler, now=NOW)

    fixed = {a.instance_id for a in table.allocations.values() if not a.migratable}
    fixed |= {a.instance_id for a in table.allocations.values() if a.server_group == "aff"}
    assert not fixed & {m.instance_id for m in plan.moves}
    assert not set(target.drain) & {m.target for m in plan.moves}
    assert all(m.source != m.target for m in plan.moves)
    if target.keep_traits:
        assert all(pool_of(table, m.source) == pool_of(table, m.target) for m in plan.moves)
    assert len(plan.moves) <= budget.max_migrations
    assert set(plan.generations) == {h for m in plan.moves for h in (m.source, m.target)}

    work = table.copy()
    apply_moves(work, plan.moves)
    assert_consistent(work)
    assert measure(work, target, scheduler=scheduler, now=NOW) == plan.after
    if not target.drain:
        assert objective(work, target, scheduler) >= objective(table, target, scheduler) - 1e-9
    else:
        assert plan.after.drained_left <= plan.before.drained_left

    again = plan_defrag(table, target, budget, scheduler=scheduler, now=NOW, seed=seed)
    assert again == plan


def _broken(plan: Plan, table: HostTable, how: int) -> Plan:
    """The plan with its last move made invalid in one of several ways."""
    last = plan.moves[-1]
    if how == 0:
        bad = last.model_copy(update={"target": last.source})
    elif how == 1:
        bad = last.model_copy(update={"instance_id": "ghost"})
    else:  # claim far more than any host has
        big = tuple(tuple(x + 10**9 for x in c) for c in last.cell_use)
        bad = last.model_copy(update={"cell_use": big})
    return plan.model_copy(update={"moves": (*plan.moves[:-1], bad)})


@settings(max_examples=examples(0.3))
@given(table=fragmented(), how=st.integers(0, 2))
def test_apply_moves_all_or_nothing(table: HostTable, how: int) -> None:
    target = Target(objective=Objective.EMPTY_HOSTS)
    scheduler = SCHEDULERS[0]
    plan = plan_defrag(
        table, target, Budget(max_migrations=10, max_concurrent=2), scheduler=scheduler, now=NOW
    )
    if not plan.moves:
        return
    broken = _broken(plan, table, how)
    before = snapshot(table)
    order = list(table.allocations)
    with pytest.raises(PlanError) as err:
        apply_moves(table, broken.moves)
    assert err.value.step == broken.moves[-1].step
    assert_unchanged(table, before)
    assert list(table.allocations) == order


@settings(max_examples=examples(0.3))
@given(table=fragmented(), pick=st.integers(0, 10**6))
def test_target_rules_imply_every_scheduler_filter(table: HostTable, pick: int) -> None:
    """The resource filters the rules skip as implied by the NUMA-exact count really are: every
    host the rules allow passes every filter of the scheduler for that migration request."""
    if not table.allocations:
        return
    alloc = list(table.allocations.values())[pick % len(table.allocations)]
    for scheduler in SCHEDULERS:
        rules = TargetRules(scheduler, NOW, np.zeros(len(table), dtype=bool))
        allowed = rules.mask(table, alloc)
        ctx = Context(table, rules.request(table, alloc), table.demand(alloc.flavor), NOW)
        for flt in scheduler.filters:
            assert not (allowed & ~flt.mask(ctx)).any(), flt.name


@settings(max_examples=examples(0.3))
@given(data=st.data(), table=fragmented())
def test_planner_objective_is_the_scheduler_capacity(data: st.DataObject, table: HostTable) -> None:
    """The planner's per-host objective adds up to the figures' weighted capacity (or empty
    hosts): it optimises exactly what `measure` reports."""
    target = data.draw(targets(table))
    for scheduler in SCHEDULERS:
        value = HostValue(table, target, scheduler, NOW)
        assert value.total(table) == pytest.approx(objective(table, target, scheduler))
