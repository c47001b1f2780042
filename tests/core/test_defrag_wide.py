"""The defrag planner on tables wider than two cells (docs/defrag.md, docs/numa.md): landing
shapes by rank of the target's cells (`shapes.Ranked`), and plans that stay valid, step by step,
on mixed fleets of two-cell and eight-cell hosts with NUMA distances."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import profile
from berth.core.defrag import Budget, Objective, Target, apply_moves, check_plan, plan_defrag
from berth.core.defrag import search as search_module
from berth.core.defrag.objective import HostValue
from berth.core.defrag.rules import footprint_error
from berth.core.defrag.shapes import (
    RULE,
    Ranked,
    footprint,
    insert_one,
    insert_values,
    landing_shapes,
    shape_lists,
)
from berth.core.engine import FilterScheduler
from berth.core.model import NumaCell
from berth.core.resources import C_PCPU
from berth.core.table import HostTable
from tests.builders import NOW, cell, flavor, fleet, host
from tests.core.strategies import examples
from tests.core.test_numa_wide_fleet import FLAVORS, eight

SCHED = FilterScheduler.from_config(profile("berth"))
WIDE = [
    flavor("one", vcpus=2, mem=1024, pinned=True, numa=1),
    flavor("two", vcpus=4, mem=2048, pinned=True, numa=2),
    flavor("four", vcpus=16, mem=4096, pinned=True, numa=4),
]


def _distances(cells: int) -> list[list[int]]:
    """Two sockets of `cells // 2` cells: 10 on the diagonal, 12 inside a socket, 32 across."""
    half = cells // 2
    return [
        [10 if a == b else (12 if a // half == b // half else 32) for b in range(cells)]
        for a in range(cells)
    ]


def _blocked_pair() -> HostTable:
    """Host a: an even two-cell guest blocks a second four-cell slot; host b: cells [4, 4, 4,
    4, 2, 2, 0, 0] free, where the claim rule would put that guest on the roomy cells 0 and 1
    (the closest valid pair) and lose b's own four-cell slot; cells 4 and 5 keep it."""
    cells = [cell(pcpus=4, mem=16384) for _ in range(8)]
    table = HostTable.from_fleet(fleet([host("a", numa=cells), host("b", numa=cells)], WIDE))
    use = np.zeros_like(table.cell_cap[0])
    use[0:2] = table.demand("two").cells[0]
    table.claim("x", "a", "two", use, table.demand("two").host.copy())
    one = table.demand("one")
    for k, c in enumerate([4, 5, 6, 6, 7, 7]):
        use = np.zeros_like(table.cell_cap[0])
        use[c] = one.cells[0]
        table.claim(f"f{k}", "b", "one", use, one.host.copy(), migratable=False)
    return table


def test_ranked_shapes_are_bounded_and_legal() -> None:
    table = HostTable.from_fleet(fleet([host("h", numa=[cell(pcpus=4, mem=16384)] * 8)], WIDE))
    for name, k in (("one", 1), ("two", 2), ("four", 4)):
        shapes = landing_shapes(table, name)
        assert isinstance(shapes, Ranked)
        assert len(shapes) == 8 - k + 1  # equal cells: one shape per window
        for use in shapes.uses(table.cell_free):
            assert footprint_error(table, name, use[0], table.demand(name).host) is None


def test_a_wide_landing_shape_keeps_the_target_slot() -> None:
    table = _blocked_pair()
    target = Target(flavors=("four",))
    value = HostValue(table, target, SCHED, NOW)
    shapes = landing_shapes(table, "two")
    b = table.index["b"]
    best, shape = insert_values(value, table, "two", np.array([b]), shapes)
    assert int(shape[0]) != RULE
    assert best[0] == 1.0  # the rule's cells would leave 0
    assert insert_one(value, table, "two", b, shape_lists(shapes)) == (best[0], int(shape[0]))
    use = footprint(table, "two", b, shapes, int(shape[0]))
    assert [c for c in range(8) if use[c, C_PCPU]] == [4, 5]

    plan = plan_defrag(table, target, Budget(max_migrations=2), scheduler=SCHED, now=NOW)
    check_plan(table, plan, scheduler=SCHED, now=NOW)
    assert plan.after.capacity["four"] == plan.before.capacity["four"] + 1
    with mock.patch.object(search_module, "landing_shapes", return_value=[]):
        rule_only = plan_defrag(table, target, Budget(max_migrations=2), scheduler=SCHED, now=NOW)
    assert rule_only.after.capacity["four"] == rule_only.before.capacity["four"]


def _mixed(n: int, seed: int, with_distances: bool) -> HostTable:
    """Half two-cell, half eight-cell hosts (every other one with a distance matrix when asked),
    filled at random by the claim rule, then a third of the VMs gone."""
    hosts = []
    for i in range(n):
        socket = cell(vcpus=8, pcpus=16, mem=32768)
        cells: list[NumaCell] = [socket, socket] if i % 2 == 0 else eight(socket) + eight(socket)
        h = host(f"h{i}", numa=cells, az="az1")
        if i % 4 == 1 and with_distances:
            h = h.model_copy(update={"numa_distances": _distances(8)})
        hosts.append(h)
    table = HostTable.from_fleet(fleet(hosts, FLAVORS, aliases={"gpu": "gpu"}))
    rng = np.random.default_rng(seed)
    names = ["one", "two", "four", "split", "float"]
    for k in range(40 * n):
        name = names[int(rng.integers(len(names)))]
        row = int(rng.integers(n))
        if SCHED.capacity(table, name, NOW)[row] > 0:
            table.claim(f"vm{k}", table.names[row], name)
    ids = list(table.allocations)
    for i in rng.permutation(len(ids))[: len(ids) // 3]:
        table.release(ids[int(i)])
    return table


@pytest.mark.parametrize(
    ("seed", "flavors", "empty", "budget"), [(0, {"four", "split"}, False, 5), (1, set(), True, 4)]
)
def test_wide_plans_are_valid_on_two_fleets(
    seed: int, flavors: set[str], empty: bool, budget: int
) -> None:
    """Two fixed cases of the property below (which is slow), for the quick runs."""
    _valid_plan(seed, flavors, empty, budget, distances=True)


@pytest.mark.slow  # ~1-2 s an example on a loaded machine
@settings(max_examples=examples(0.1), deadline=None)
@given(
    seed=st.integers(0, 10**6),
    flavors=st.sets(st.sampled_from(["one", "two", "four", "split"]), min_size=1, max_size=2),
    empty=st.booleans(),
    budget=st.integers(1, 6),
    distances=st.booleans(),
)
def test_wide_plans_are_valid_step_by_step(
    seed: int, flavors: set[str], empty: bool, budget: int, distances: bool
) -> None:
    """Every plan on a mixed fleet passes `check_plan` (each wave's claims fit beside its held
    sources, every footprint a legal shape, the scheduler's filters), applies exactly and never
    lowers the objective."""
    _valid_plan(seed, flavors, empty, budget, distances)


def _valid_plan(seed: int, flavors: set[str], empty: bool, budget: int, distances: bool) -> None:
    table = _mixed(4, seed, distances)
    target = (
        Target(objective=Objective.EMPTY_HOSTS) if empty else Target(flavors=tuple(sorted(flavors)))
    )
    plan = plan_defrag(
        table, target, Budget(max_migrations=budget, max_concurrent=2), scheduler=SCHED, now=NOW
    )
    check_plan(table, plan, scheduler=SCHED, now=NOW)
    work = table.copy()
    apply_moves(work, plan.moves)
    value = HostValue(table, target, SCHED, NOW)
    assert value.total(work) >= value.total(table) - 1e-9


@pytest.mark.parametrize("seed", [0, 1])
def test_one_host_insertion_equals_the_vectorised(seed: int) -> None:
    """`insert_one` (plain numbers, one host) gives `insert_values`' value and shape, bit for
    bit, on every host of a mixed fleet with distances, for every flavor and both objectives."""
    table = _mixed(4, seed, with_distances=True)
    rows = np.arange(len(table))
    for target in (Target(flavors=("four", "split")), Target(objective=Objective.EMPTY_HOSTS)):
        value = HostValue(table, target, SCHED, NOW)
        for f in sorted(table.flavors):
            shapes = landing_shapes(table, f)
            best, shape = insert_values(value, table, f, rows, shapes)
            for r in rows.tolist():
                assert insert_one(value, table, f, r, shape_lists(shapes)) == (
                    best[r],
                    int(shape[r]),
                ), (f, r)
