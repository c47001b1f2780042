"""The exact defragmentation optimum on hosts of more than two cells (`solvers.defrag_cells`):
equal to brute force over every host and every cell map of the movable instances on tiny
fleets of four- and eight-cell hosts (EVEN, FIXED and one-cell guests), and never below the
planner's plan on mixed fleets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import profile
from berth.core.defrag import Budget, Objective, Target, plan_defrag
from berth.core.engine import FilterScheduler
from berth.core.errors import ClaimError
from berth.core.model import Flavor
from berth.core.table import HostTable
from berth.solvers.defrag_bound import defrag_bound
from berth.solvers.defrag_cells import ExactUnsupportedError
from berth.solvers.defrag_exact import exact_optimum, heuristic_gap, plan_value
from tests.builders import NOW, cell, flavor, fleet, host
from tests.core.strategies import examples
from tests.core.test_defrag_wide import _mixed

SCHED = FilterScheduler.from_config(profile("berth"))
ONE = flavor("one", vcpus=2, mem=1024, pinned=True, numa=1)
TWO = flavor("two", vcpus=4, mem=2048, pinned=True, numa=2)
SPLIT = flavor(
    "split", vcpus=6, mem=3072, pinned=True, numa=2, numa_cpus=("0-3", "4-5"), numa_mem=(2048, 1024)
)
FOUR = flavor("four", vcpus=12, mem=4096, pinned=True, numa=4)
BIG = flavor("big", vcpus=4, mem=2048, pinned=True, numa=1)
CATALOGUE: list[Flavor] = [ONE, TWO, SPLIT, FOUR, BIG]


def _maps(d_cells: np.ndarray, n_cells: int) -> list[np.ndarray]:
    """Every footprint of a guest with these cells on `n_cells` cells (distinct cell maps)."""
    seen: dict[bytes, np.ndarray] = {}
    for hosts in itertools.permutations(range(n_cells), d_cells.shape[0]):
        use = np.zeros((n_cells, d_cells.shape[1]), dtype=np.int64)
        for g, h in enumerate(hosts):
            use[h] += d_cells[g]
        seen.setdefault(use.tobytes(), use)
    return list(seen.values())


def brute_force(table: HostTable, target: Target, budget: Budget) -> float:
    """Every final state of the movable instances (stay, or any host and cell map), within the
    budget; the best objective by the scheduler's own counts. Slow and obviously right."""
    movable = [a for a in table.allocations.values() if a.migratable]
    base = table.copy()
    for alloc in movable:
        base.release(alloc.instance_id)
    choices: list[list[tuple[int, np.ndarray | None]]] = []
    for a in movable:
        d = table.demand(a.flavor)
        opts: list[tuple[int, np.ndarray | None]] = [(table.index[a.host], None)]
        for r in range(len(table)):
            if r != table.index[a.host]:
                opts += [(r, use) for use in _maps(d.cells, table.cell_cap.shape[1])]
        choices.append(opts)
    best = -1.0
    weights = target.weights or tuple(1.0 for _ in target.flavors)
    for choice in itertools.product(*choices):
        if sum(use is not None for _, use in choice) > budget.max_migrations:
            continue
        work = base.copy()
        try:
            for a, (r, use) in zip(movable, choice, strict=True):
                cell_use = a.cell_use if use is None else use
                work.claim(a.instance_id, table.names[r], a.flavor, cell_use, a.host_use)
        except ClaimError:
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


def _claim(table: HostTable, iid: str, h: str, name: str, cells: list[int], fixed: bool) -> None:
    d = table.demand(name)
    use = np.zeros_like(table.cell_cap[0])
    for g, c in enumerate(cells):
        use[c] += d.cells[g]
    table.claim(iid, h, name, use, d.host.copy(), migratable=not fixed)


def _tiny(case: int) -> HostTable:
    """Two hosts of four cells (4 pinned CPUs each) or one of four and one of eight cells, with
    two movable instances and some fixed load."""
    four = [cell(pcpus=4, mem=8192) for _ in range(4)]
    eight = [cell(pcpus=4, mem=8192) for _ in range(8)]
    second = four if case < 2 else eight
    table = HostTable.from_fleet(fleet([host("a", numa=four), host("b", numa=second)], CATALOGUE))
    _claim(table, "x", "a", "two", [0, 1], fixed=False)
    _claim(table, "y", "a", "split" if case % 2 else "one", [2, 3][: 2 if case % 2 else 1], False)
    _claim(table, "f0", "b", "one", [1], fixed=True)
    _claim(table, "f1", "b", "one", [3], fixed=True)
    return table


BRUTE: list[tuple[int, Target, Budget]] = [
    (0, Target(flavors=("four",)), Budget(max_migrations=2)),
    (1, Target(flavors=("big", "four"), weights=(1.0, 3.0)), Budget(max_migrations=2)),
    (2, Target(flavors=("split",)), Budget(max_migrations=1)),
    (3, Target(flavors=("four", "two")), Budget(max_migrations=2)),
    (3, Target(objective=Objective.EMPTY_HOSTS), Budget(max_migrations=2)),
]


@pytest.mark.parametrize(("case", "target", "budget"), BRUTE)
def test_exact_equals_brute_force_on_wide_hosts(case: int, target: Target, budget: Budget) -> None:
    table = _tiny(case)
    exact = exact_optimum(table, target, budget, scheduler=SCHED, now=NOW)
    assert exact.optimal
    assert exact.value == pytest.approx(brute_force(table, target, budget))
    plan = plan_defrag(table, target, budget, scheduler=SCHED, now=NOW)
    assert plan_value(plan) <= exact.value + 1e-9


def test_flexible_splits_on_wide_hosts_are_refused() -> None:
    """A flexible flavor fits hosts of more than two cells (docs/numa.md, its exact count is a
    search over cell pairs), which the model does not state: refused with the flavor named,
    never a wrong bound."""
    flex = flavor("flex", vcpus=4, mem=2048, pinned=True, numa=2, split="flexible")
    table = HostTable.from_fleet(
        fleet([host("a", numa=[cell(pcpus=4, mem=8192)] * 8)], [*CATALOGUE, flex])
    )
    assert int(SCHED.capacity(table, "flex", NOW).sum()) > 0  # it fits: a real count to model
    with pytest.raises(ExactUnsupportedError, match="'flex'"):
        exact_optimum(
            table, Target(flavors=("flex",)), Budget(max_migrations=1), scheduler=SCHED, now=NOW
        )


def test_cell_local_devices_as_target_on_wide_hosts_are_refused() -> None:
    """Slots of a multi-cell guest whose devices must sit in its own cells are a search over
    device splits: not modelled, refused with the flavor named (never a wrong bound)."""
    gpu = flavor("gpu2", vcpus=4, mem=2048, pinned=True, numa=2, pci="gpu:1")
    cells = [cell(pcpus=4, mem=8192, pci={"gpu": 1})] * 4
    table = HostTable.from_fleet(
        fleet([host("a", numa=cells)], [*CATALOGUE, gpu], aliases={"gpu": "gpu"})
    )
    with pytest.raises(ExactUnsupportedError, match="'gpu2'"):
        exact_optimum(
            table, Target(flavors=("gpu2",)), Budget(max_migrations=1), scheduler=SCHED, now=NOW
        )


@pytest.mark.slow  # 2-5 s an example, loaded: the only planner <= optimum check on mixed fleets
@settings(max_examples=max(5, examples(0.1) // 2), deadline=None)
@given(
    seed=st.integers(0, 10**6),
    flavors=st.sets(st.sampled_from(["one", "two", "four", "split"]), min_size=1, max_size=2),
    budget=st.integers(1, 4),
)
def test_the_plan_never_beats_the_optimum_on_mixed_fleets(
    seed: int, flavors: set[str], budget: int
) -> None:
    table = _mixed(4, seed, with_distances=True)
    target = Target(flavors=tuple(sorted(flavors)))
    plan = plan_defrag(table, target, Budget(max_migrations=budget), scheduler=SCHED, now=NOW)
    exact = exact_optimum(
        table, target, Budget(max_migrations=budget), scheduler=SCHED, now=NOW, time_limit=20
    )
    assert exact.bound is not None
    assert plan_value(plan) <= exact.bound + 1e-6
    gap = heuristic_gap(exact, plan_value(plan))
    assert gap is not None
    assert 0.0 <= gap <= 1.0


def test_the_relaxed_bound_declines_wide_tables() -> None:
    """`defrag_bound` states two-cell shapes only: on a wider table it gives no bound rather
    than one that misses the other cells' slots."""
    table = _tiny(2)
    target = Target(flavors=("four",))
    assert defrag_bound(table, target, Budget(max_migrations=2), scheduler=SCHED, now=NOW) is None
