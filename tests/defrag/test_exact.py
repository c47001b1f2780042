"""The exact defragmentation optimum: equal to brute force on tiny fleets, never below the
heuristic planner (it bounds every plan within the budget)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import profile
from berth.core.defrag import Budget, Objective, Target, plan_defrag
from berth.core.engine import FilterScheduler
from berth.core.errors import ClaimError, SpecError
from berth.core.model import GroupPolicy, Instance
from berth.core.resources import C_MEM, C_PCPU
from berth.core.table import HostTable
from berth.solvers.defrag_exact import exact_optimum, heuristic_gap, plan_value
from tests.builders import NOW, flavor, group, host, instance, table_of
from tests.core.strategies import examples
from tests.core.test_defrag_properties import budgets, fragmented, targets

SCHED = FilterScheduler.from_config(profile("berth"))

P1 = flavor("p1", vcpus=1, mem=1024, pinned=True, numa=1)
P2 = flavor("p2", vcpus=2, mem=2048, pinned=True, numa=1)
P4 = flavor("p4", vcpus=4, mem=4096, pinned=True, numa=1)
X4 = flavor("x4", vcpus=4, mem=4096, pinned=True, numa=2)


def brute_force(table: HostTable, target: Target, budget: Budget) -> float:
    """Every final state of the movable single-cell instances (host and cell each), within
    the budget; the best objective. Slow and obviously right."""
    movable = [a for a in table.allocations.values() if a.migratable]
    base = table.copy()
    for alloc in movable:
        base.release(alloc.instance_id)
    spots = [(r, c) for r in range(len(table)) for c in range(int(table.n_cells[r]))]
    weights = target.weights or tuple(1.0 for _ in target.flavors)
    best = -1.0
    for choice in itertools.product(spots, repeat=len(movable)):
        moved = [table.index[a.host] != r for a, (r, _) in zip(movable, choice, strict=True)]
        if sum(moved) > budget.max_migrations:
            continue
        touches = np.zeros(len(table), dtype=int)
        for a, (r, _), m in zip(movable, choice, moved, strict=True):
            if m:
                touches[r] += 1
                touches[table.index[a.host]] += 1
        if budget.max_per_host is not None and (touches > budget.max_per_host).any():
            continue
        work = base.copy()
        try:
            for a, (r, c), m in zip(movable, choice, moved, strict=True):
                if m:
                    spec = table.flavors[a.flavor]
                    cell_use = np.zeros_like(a.cell_use)
                    cell_use[c, C_PCPU] = spec.vcpus
                    cell_use[c, C_MEM] = spec.memory_mb
                    host_use = a.host_use
                else:
                    cell_use, host_use = a.cell_use, a.host_use
                work.claim(
                    a.instance_id,
                    table.names[r],
                    a.flavor,
                    cell_use,
                    host_use,
                    server_group=a.server_group,
                )
        except ClaimError:
            continue
        if any(
            n > work.groups[g].max_server_per_host
            for g, rows in work.group_rows.items()
            if work.groups[g].policy == GroupPolicy.ANTI_AFFINITY
            for n in rows.values()
        ):
            continue
        if target.objective is Objective.EMPTY_HOSTS:
            value = float((work.n_instances == 0).sum())
        else:
            value = sum(
                w * float(SCHED.capacity(work, f, NOW).sum())
                for f, w in zip(target.flavors, weights, strict=True)
            )
        best = max(best, value)
    return best


def _fleet(seed: int) -> HostTable:
    rng = np.random.default_rng(seed)
    hosts = [host(f"h{i}", cells=2, pcpus=4, mem=4096) for i in range(3)]
    instances: list[Instance] = []
    for i in range(4):
        for _ in range(20):
            h = f"h{rng.integers(3)}"
            c = int(rng.integers(2))
            f = "p1" if rng.integers(2) else "p2"
            candidate = instance(f"i{i}", h, f, numa=[(c, int(f[1]), 1024 * int(f[1]))])
            try:
                table_of(hosts, [P1, P2, P4, X4], [*instances, candidate])
            except Exception:
                continue
            instances.append(candidate)
            break
    return table_of(hosts, [P1, P2, P4, X4], instances, groups=[group("g", "anti-affinity")])


BRUTE: list[tuple[int, Target, Budget]] = [
    (0, Target(flavors=("p4",)), Budget(max_migrations=2)),
    (1, Target(flavors=("p4", "x4"), weights=(1.0, 2.0)), Budget(max_migrations=3)),
    (2, Target(flavors=("x4",)), Budget(max_migrations=4, max_per_host=2)),
    (3, Target(objective=Objective.EMPTY_HOSTS), Budget(max_migrations=4)),
    (4, Target(flavors=("p4",)), Budget(max_migrations=1)),
    (5, Target(objective=Objective.EMPTY_HOSTS), Budget(max_migrations=2, max_per_host=1)),
]


@pytest.mark.parametrize(("seed", "target", "budget"), BRUTE)
def test_exact_equals_brute_force(seed: int, target: Target, budget: Budget) -> None:
    table = _fleet(seed)
    exact = exact_optimum(table, target, budget, scheduler=SCHED, now=NOW)
    assert exact.optimal
    assert exact.value == pytest.approx(brute_force(table, target, budget))
    assert exact.moved <= budget.max_migrations
    heuristic = plan_defrag(table, target, budget, scheduler=SCHED, now=NOW)
    assert plan_value(heuristic) <= exact.value + 1e-9
    if plan_value(heuristic) == pytest.approx(exact.value):
        assert exact.moved <= heuristic.migrations  # the optimum with the fewest moves
    gap = heuristic_gap(exact, plan_value(heuristic))
    assert gap is not None
    assert 0.0 <= gap <= 1.0


def test_exact_respects_anti_affinity() -> None:
    """Two members of one anti-affinity group can never share the host that frees the slot."""
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b")]
    small = flavor("small", vcpus=4, mem=4096)
    large = flavor("large", vcpus=8, mem=8192)
    instances = [
        instance("g1", "a", "small", group_id="g"),
        instance("g2", "b", "small", group_id="g"),
    ]
    target = Target(flavors=("large",))
    table = table_of(hosts, [small, large], instances, groups=[group("g", "anti-affinity")])
    exact = exact_optimum(table, target, Budget(max_migrations=2), scheduler=SCHED, now=NOW)
    assert (exact.value, exact.moved) == (0.0, 0)
    table = table_of(
        hosts, [small, large], [i.model_copy(update={"server_group": None}) for i in instances]
    )
    exact = exact_optimum(table, target, Budget(max_migrations=2), scheduler=SCHED, now=NOW)
    assert (exact.value, exact.moved) == (1.0, 1)


def test_exact_drains_first() -> None:
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "d")]
    small = flavor("small", vcpus=4, mem=4096)
    large = flavor("large", vcpus=8, mem=8192)
    instances = [instance("d1", "d", "small"), instance("a1", "a", "small")]
    target = Target(flavors=("large",), drain=("d",))
    table = table_of(hosts, [small, large], instances)
    exact = exact_optimum(table, target, Budget(max_migrations=1), scheduler=SCHED, now=NOW)
    # moving a1 onto b would not raise capacity; draining d1 is what the budget must buy
    assert exact.drained == 1
    assert exact.placement["d1"] in {"a", "b"}


def test_unknown_flavor_is_named() -> None:
    table = _fleet(0)
    with pytest.raises(SpecError, match=r"target.flavors\[0\]"):
        exact_optimum(
            table, Target(flavors=("nope",)), Budget(max_migrations=1), scheduler=SCHED, now=NOW
        )


@settings(max_examples=examples(0.25))
@given(data=st.data(), table=fragmented())
def test_exact_bounds_the_heuristic(data: Any, table: HostTable) -> None:
    target = data.draw(targets(table))
    budget = data.draw(budgets)
    heuristic = plan_defrag(table, target, budget, scheduler=SCHED, now=NOW)
    exact = exact_optimum(table, target, budget, scheduler=SCHED, now=NOW, time_limit=10)
    if target.drain:
        assert exact.drained >= heuristic.before.drained_left - heuristic.after.drained_left
    else:
        assert exact.bound is None or exact.bound >= plan_value(heuristic) - 1e-6
