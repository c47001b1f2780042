"""Hosts of up to eight NUMA cells and guests of up to eight (docs/numa.md).

* the claim rule's invariant on 1-, 2-, 4- and 8-cell hosts, at the rule itself (Hypothesis):
  placing one instance by `vector.place` lowers `vector.count` by exactly one, down to 0, and
  the one-host copy (`scalar`) agrees;
* the closed forms equal the exact search (EVEN k of n; FIXED and FLEX on two cells);
* table cases for each mode; the loader's errors beyond eight cells;
* end to end (scheduler, capacity, commit) on 4- and 8-cell hosts: "capacity k" means k
  placements succeed and the (k+1)-th fails.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.demand import Demand, build_demand
from berth.core.flavors import NumaMode, parse_flavor
from berth.core.model import Flavor, Fleet
from berth.core.numa import scalar, vector
from berth.core.numa.search import Searcher, State, even_bound
from berth.core.resources import C_MEM, C_PCPU, CELL_BASE
from berth.core.table import HostTable
from berth.fleet.io import FleetFileError, parse_fleet
from tests.builders import NOW, cell, flavor, fleet, host
from tests.core.strategies import MODES, examples, flavors, tables
from tests.core.test_properties import SCHEDULERS, Ids, check_accounting, prefill, try_place

DEVICES = ["gpu"]
WIDTH = CELL_BASE + len(DEVICES)


def _demand(f: Flavor) -> Demand:
    return build_demand(parse_flavor(f, {"gpu": "gpu"}), DEVICES)


@st.composite
def free_cells(draw: st.DrawFn, n: int, cells: int) -> np.ndarray:
    """Free amounts of `n` hosts with `cells` cells (some cells empty, some negative), on a
    cell axis of at least two (as a table's)."""
    out = np.zeros((n, max(cells, 2), WIDTH), dtype=np.int64)
    for h in range(n):
        for c in range(cells):
            if draw(st.integers(0, 5)) == 0:
                continue  # an empty (or padded) cell
            out[h, c, 0] = draw(st.integers(-1, 12))  # shared vCPUs
            out[h, c, C_PCPU] = draw(st.integers(-1, 12))
            out[h, c, C_MEM] = draw(st.integers(-1, 16)) * 256
            out[h, c, 3] = draw(st.integers(0, 8)) * 512  # huge pages
            out[h, c, CELL_BASE] = draw(st.sampled_from([0, 0, 1, 2]))
    return out


def _host_free(n: int) -> np.ndarray:
    return np.full((n, 4), 1 << 20, dtype=np.int64)


# ------------------------------------------------------------------ the rule's invariant


@pytest.mark.parametrize("cells", [1, 2, 4, 8])
@settings(max_examples=examples(0.4), deadline=None)
@given(data=st.data())
def test_placing_lowers_the_count_by_exactly_one(cells, data):
    spec = data.draw(flavors("t", max_cells=min(max(cells, 2), 4)))
    d = _demand(spec)
    free = data.draw(free_cells(3, cells))
    host = _host_free(3)
    count = vector.count(d, free, host)
    for row in range(3):
        one = free[row].tolist()
        assert scalar.count(d.rows, one, host[row].tolist()) == count[row]
        k = min(int(count[row]), 12)
        cur = free[row : row + 1].copy()
        for i in range(k):
            use, host_use = vector.place(d, cur, host[row : row + 1])
            assert scalar.place(d.rows, cur[0].tolist()) == use[0].tolist()
            assert (use >= 0).all()
            assert (use <= np.maximum(cur, 0)).all()
            cur = cur - use
            left = int(vector.count(d, cur, host[row : row + 1] - (i + 1) * host_use)[0])
            assert left == count[row] - i - 1, (row, i, left)
        if k == count[row]:
            assert not vector.fits(d, cur, host[row : row + 1] - k * d.host)[0]


@pytest.mark.parametrize("cells", [3, 4, 6, 8])
@settings(max_examples=examples(0.3), deadline=None)
@given(
    data=st.data(), k=st.integers(2, 4), slots=st.lists(st.integers(0, 6), min_size=8, max_size=8)
)
def test_even_closed_form_equals_the_search(cells, data, k, slots):
    """min_j floor(S_j / (k - j)) is the longest sequence of k-of-n placements."""
    units = slots[:cells]
    searcher = Searcher([[1]] * k, [0], [0])
    state = searcher.canonical([[u] for u in units])
    assert even_bound(units, k) == searcher.count(state)


@pytest.mark.parametrize("mode", [NumaMode.FIXED, NumaMode.EVEN])
@settings(max_examples=examples(0.3), deadline=None)
@given(data=st.data())
def test_two_cell_forms_equal_the_search(mode, data):
    """On two cells, the scan over orientations (FIXED) and min(u0, u1) (EVEN) are the exact
    search's counts."""
    d = _demand(data.draw(flavors("t", mode)))
    if d.pci.any():
        return
    free = data.draw(free_cells(4, 2))
    want = vector.cell_count(d, free)
    wide = np.concatenate([free, np.zeros((4, 2, WIDTH), dtype=np.int64)], axis=1)
    from berth.core.numa.wide import searcher_of

    searcher = searcher_of(d)
    for row in range(4):
        got = searcher.count(searcher.canonical(searcher.read(free[row].tolist())))
        assert got == want[row]
        assert vector.cell_count(d, wide[row : row + 1])[0] == want[row]  # padded: the same


# ------------------------------------------------------------------ table cases


def _table(
    cells_per_host: list[int], flavors_list: list[Flavor], gpus: list[int] | None = None
) -> HostTable:
    hosts = []
    for i, n in enumerate(cells_per_host):
        numa = [
            cell(vcpus=4, pcpus=8, mem=16384, pci={"gpu": gpus[c]} if gpus and gpus[c] else None)
            for c in range(n)
        ]
        hosts.append(host(f"h{i}", numa=numa))
    return HostTable.from_fleet(fleet(hosts, flavors_list, aliases={"gpu": "gpu"}))


CASES = [
    # (flavor, host cells, expected count)
    (flavor("t", vcpus=2, mem=2048, pinned=True, numa=1), 8, 32),
    (flavor("t", vcpus=2, mem=2048, pinned=True, numa=1), 1, 4),
    (flavor("t", vcpus=4, mem=4096, pinned=True, numa=2), 8, 16),
    (flavor("t", vcpus=4, mem=4096, pinned=True, numa=2), 1, 0),
    (flavor("t", vcpus=8, mem=8192, pinned=True, numa=4), 4, 4),
    (flavor("t", vcpus=8, mem=8192, pinned=True, numa=4), 2, 0),
    (flavor("t", vcpus=8, mem=8192, pinned=True, numa=8), 8, 8),
    (flavor("t", vcpus=6, mem=6144, pinned=True, numa=3), 4, 5),  # 4 slots a cell: 16 / 3
    (
        flavor(
            "t",
            vcpus=6,
            mem=6144,
            pinned=True,
            numa=2,
            numa_cpus=("0-3", "4-5"),
            numa_mem=(4096, 2048),
        ),
        4,
        5,  # 32 CPUs / 6, and 4 + 2 pairs fit around the four cells
    ),
    (
        flavor(
            "t",
            vcpus=6,
            mem=3072,
            pinned=True,
            numa=3,
            numa_cpus=("0-2", "3-4", "5"),
            numa_mem=(1024, 1024, 1024),
        ),
        8,
        10,
    ),
    (flavor("t", vcpus=4, mem=4096, pinned=True, numa=2, split="flexible"), 2, 4),
    (flavor("t", vcpus=4, mem=4096, pinned=True, numa=2, split="flexible"), 8, 16),  # 64 / 4
    (flavor("t", vcpus=12, mem=4096, pinned=True, numa=2, split="flexible"), 8, 5),  # 64 / 12
    (flavor("t", vcpus=12, mem=4096, pinned=True, numa=2, split="flexible"), 3, 2),  # 24 / 12
    (flavor("t", vcpus=4, mem=4096), 8, 8),  # floating: the host columns (32 vCPUs)
]


@pytest.mark.parametrize(("spec", "cells", "expected"), CASES)
def test_table_cases(spec, cells, expected):
    table = _table([cells], [spec])
    sched = SCHEDULERS["plain"]
    assert int(sched.capacity(table, "t", NOW)[0]) == expected
    for i in range(min(expected, 40)):
        table.claim(f"i{i}", "h0", "t")
        assert int(sched.capacity(table, "t", NOW)[0]) == expected - i - 1
    check_accounting(table)


@pytest.mark.parametrize(("policy", "expected"), [("required", 2), ("preferred", 4)])
def test_multi_cell_guest_devices_sit_in_its_cells(policy, expected):
    """Four GPUs on cell 0 of four: a two-cell guest with one GPU must take cell 0 (required);
    with `preferred` any cell's GPU will do (then CPUs bound it: 32 / 8)."""
    spec = flavor("t", vcpus=8, mem=8192, pinned=True, numa=2, pci="gpu:1", pci_policy=policy)
    table = _table([4], [spec], gpus=[4, 0, 0, 0])
    sched = SCHEDULERS["plain"]
    assert int(sched.capacity(table, "t", NOW)[0]) == expected
    for i in range(expected):
        alloc = table.claim(f"i{i}", "h0", "t")
        if policy == "required":
            assert alloc.cell_use[0, C_PCPU]
            assert alloc.cell_use[0, CELL_BASE] == 1
    assert int(sched.capacity(table, "t", NOW)[0]) == 0


def test_distances_steer_the_claim():
    """A two-cell guest on an eight-cell host with a distance matrix takes the closest pair."""
    dist = [
        [10 if a == b else (12 if a // 4 == b // 4 else 32) for b in range(8)] for a in range(8)
    ]
    dist[0][7] = dist[7][0] = 11  # cells 0 and 7 are the closest pair
    spec = flavor("t", vcpus=4, mem=4096, pinned=True, numa=2)
    h = host("h0", numa=[cell(pcpus=8, mem=16384) for _ in range(8)]).model_copy(
        update={"numa_distances": dist}
    )
    table = HostTable.from_fleet(fleet([h], [spec]))
    alloc = table.claim("i0", "h0", "t")
    assert [c for c in range(8) if alloc.cell_use[c, C_PCPU]] == [0, 7]


def test_a_wider_host_widens_the_table():
    spec = flavor("t", vcpus=2, mem=2048, pinned=True, numa=1)
    table = _table([2], [spec])
    table.claim("i0", "h0", "t")
    table.add_hosts([host("h8", numa=[cell(pcpus=8, mem=16384) for _ in range(8)])], {})
    assert table.cell_cap.shape[1] == 8
    assert table.allocations["i0"].cell_use.shape[0] == 8
    table.release("i0")
    check_accounting(table)


# ------------------------------------------------------------------ the loader


def _fleet_data(cells: int, distances: list[list[int]] | None = None) -> dict[str, Any]:
    h: dict[str, Any] = {
        "name": "big-01",
        "numa_cells": [{"dedicated_cpus": 4, "memory_mb": 1024}] * cells,
    }
    if distances is not None:
        h["numa_distances"] = distances
    return {"now": NOW, "hosts": [h], "flavors": []}


def test_loader_takes_eight_cells_and_refuses_nine():
    assert len(parse_fleet(_fleet_data(8)).hosts[0].numa_cells) == 8
    with pytest.raises(FleetFileError) as err:
        parse_fleet(_fleet_data(9), "fleet.yaml")
    message = str(err.value)
    assert "hosts[0]" in message
    assert "'big-01'" in message
    assert "numa_cells" in message
    assert "at most 8 NUMA cells, got 9" in message


def test_loader_checks_the_distance_matrix():
    ok = parse_fleet(_fleet_data(2, [[10, 21], [21, 10]]))
    assert isinstance(ok, Fleet)
    with pytest.raises(FleetFileError, match="numa_distances: must be a 2 x 2 matrix"):
        parse_fleet(_fleet_data(2, [[10, 21]]))


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
@pytest.mark.parametrize("cells", [4, 8])
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@settings(max_examples=examples(0.1), deadline=None)
@given(data=st.data())
def test_capacity_is_exact_on_wide_hosts(cells, mode, data):
    """`test_properties.test_capacity_is_exact` on hosts of `cells` cells (and two-cell
    ones beside them), guests of up to four cells."""
    table = data.draw(
        tables(target=mode, extra_flavors=1, cells=(cells, 2), max_hosts=3, max_guest_cells=4)
    )
    ids = Ids()
    prefill(data, table, ids, max_requests=4)
    sched = SCHEDULERS[data.draw(st.sampled_from(sorted(SCHEDULERS)))]
    capacity = sched.capacity(table, "t", NOW)
    for row, name in enumerate(table.names):
        k = int(capacity[row])
        others = tuple(n for n in table.names if n != name)
        trial = table.copy()
        for i in range(min(k, 12)):
            assert try_place(sched, trial, ids, "t", 1, i, ignore_hosts=others), (name, i, k)
            assert int(sched.capacity(trial, "t", NOW)[row]) == k - i - 1
        if k <= 12:
            assert not try_place(sched, trial, ids, "t", 1, k, ignore_hosts=others), (name, k)
        check_accounting(trial)


@settings(max_examples=examples(0.3), deadline=None)
@given(
    shapes=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 2)), min_size=2, max_size=3),
    cells=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 5)), min_size=2, max_size=5),
)
def test_all_at_once_equals_one_after_another(shapes, cells):
    """FIXED's count (t guests at once, by König's theorem) equals the longest sequence of
    single placements (depth-first search over every placement)."""
    searcher = Searcher([list(s) for s in shapes], [0, 0], [0, 1])
    memo: dict[State, int] = {}

    def longest(state: State) -> int:
        if state not in memo:
            children = {
                searcher.canonical(searcher.after(state, h, t))
                for h, t in searcher.placements(state)
            }
            memo[state] = max((1 + longest(c) for c in children), default=0)
        return memo[state]

    state = searcher.canonical(cells)
    assert searcher.count(state) == longest(state)


@pytest.mark.parametrize(
    ("spec", "mode", "cells"),
    [
        (flavor("f", vcpus=8, mem=8192, numa=4), NumaMode.EVEN, [(2, 2048)] * 4),
        (flavor("f", vcpus=8, mem=8192, numa=8), NumaMode.EVEN, [(1, 1024)] * 8),
        (
            flavor(
                "f",
                vcpus=6,
                mem=3072,
                numa=3,
                numa_cpus=("0-2", "3-4", "5"),
                numa_mem=(1024, 1024, 1024),
            ),
            NumaMode.FIXED,
            [(3, 1024), (2, 1024), (1, 1024)],
        ),
        (
            flavor(
                "f", vcpus=4, mem=4096, numa=4, numa_cpus=("0", "1", "2", "3"), numa_mem=(1024,) * 4
            ),
            NumaMode.EVEN,
            [(1, 1024)] * 4,
        ),
    ],
)
def test_guests_of_k_cells_parse(spec: Flavor, mode: NumaMode, cells: list[tuple[int, int]]):
    parsed = parse_flavor(spec, {})
    assert parsed.numa_mode == mode
    assert [(c.vcpus, c.memory_mb) for c in parsed.cells] == cells


@pytest.mark.parametrize(
    ("spec", "key", "why"),
    [
        (
            flavor("f", vcpus=4, mem=4096, numa=2, specs={"hw:numa_cpus.2": "3"}),
            "hw:numa_cpus.2",
            "names no guest cell (cells 0-1)",
        ),
        (
            flavor("f", vcpus=6, mem=6144, numa=3, split="flexible"),
            "berth:numa_split",
            "a flexible split is over exactly two cells",
        ),
        (
            flavor("f", vcpus=6, mem=6144, numa=3, numa_cpus=("0-2", "3-5"), numa_mem=(3072, 3072)),
            "hw:numa_cpus.2",
            "an explicit split needs numa_cpus and numa_mem for every cell",
        ),
    ],
)
def test_guests_of_k_cells_errors_name_the_key(spec: Flavor, key: str, why: str):
    from berth.core.errors import SpecError

    with pytest.raises(SpecError) as err:
        parse_flavor(spec, {})
    assert f"extra_specs[{key!r}]: {why}" in str(err.value)


def test_a_fixed_count_too_large_to_sweep_is_refused_and_stays_consistent():
    """Six distinct guest cell shapes on roomy cells: over `SWEEP_STATES`, count 0 (fit too);
    on small cells the same flavor is counted, and filling such a host lowers it one by one."""
    shapes = [[1, 1], [2, 1], [1, 2], [3, 1], [2, 2], [1, 3]]
    searcher = Searcher(shapes, [0, 0], [0, 1])
    roomy = searcher.canonical([[14, 48]] * 8)
    assert searcher.too_large(roomy)
    assert searcher.count(roomy) == 0
    assert searcher.count(roomy, limit=1) == 0
    cells = [[4, 8]] * 8
    state = searcher.canonical(cells)
    k = searcher.count(state)
    assert k > 0
    for i in range(k):
        hosts, takes = searcher.place(cells, None) or ((), [])
        cells = searcher.after(cells, hosts, takes)
        assert searcher.count(searcher.canonical(cells)) == k - i - 1
