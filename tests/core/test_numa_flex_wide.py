"""FLEX (the flexible two-cell split) on hosts of more than two cells (docs/numa.md, "FLEX on
more than two cells"):

* the count equals a depth-first search over every sequence of placements (every pair of
  cells, every split of every resource) on 3-, 4- and 8-cell hosts (Hypothesis, small sizes);
* each claim lowers the count by exactly one, its split within the minimums, at the search
  and through `vector` (with the two-cell path's counts untouched);
* refused states count 0 and fit nowhere; the filter's rejection is left for FLEX guests
  whose devices must sit in their cells; distances steer the claim.
"""

from __future__ import annotations

from functools import cache
from itertools import combinations, product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import profile
from berth.core.demand import Demand, build_demand
from berth.core.engine import FilterScheduler
from berth.core.flavors import parse_flavor
from berth.core.model import Flavor
from berth.core.numa import vector
from berth.core.numa.flex_wide import FLEX_LIMIT, FlexSearch, State
from berth.core.resources import C_MEM, C_PCPU, CELL_BASE
from berth.core.table import HostTable
from tests.builders import NOW, cell, flavor, fleet, host
from tests.core.strategies import examples


def _brute(search: FlexSearch, cells: list[list[int]]) -> int:
    """The longest sequence of placements: every pair, every split of every resource."""
    total, least = search.total.tolist(), search.minimum.tolist()

    @cache
    def longest(state: State) -> int:
        best = 0
        for a, b in combinations(range(len(state)), 2):
            ranges = []
            for r, (t, m) in enumerate(zip(total, least, strict=True)):
                lo, hi = max(m, t - state[b][r]), min(t - m, state[a][r])
                ranges.append(range(lo, hi + 1))
            for shares in product(*ranges):
                after = [list(c) for c in state]
                for r, x in enumerate(shares):
                    after[a][r] -= x
                    after[b][r] -= total[r] - x
                best = max(best, 1 + longest(tuple(sorted(map(tuple, after), reverse=True))))
        return best

    return longest(tuple(sorted(map(tuple, cells), reverse=True)))


@st.composite
def flex_cases(draw: st.DrawFn, cells: int) -> tuple[FlexSearch, list[list[int]]]:
    """A flexible flavor of one or two resources and a host of `cells` small cells."""
    resources = draw(st.integers(1, 2))
    totals = [draw(st.integers(2, 5)) for _ in range(resources)]
    minimums = [draw(st.integers(1, t // 2)) for t in totals]
    top = 7 if cells <= 4 else 3
    free = [[draw(st.integers(0, top)) for _ in range(resources)] for _ in range(cells)]
    return FlexSearch(list(range(resources)), totals, minimums), free


def _apply(search: FlexSearch, cells: list[list[int]], got: tuple[int, int, list[int]]) -> None:
    a, b, shares = got
    for r, (x, t, m) in enumerate(
        zip(shares, search.total.tolist(), search.minimum.tolist(), strict=True)
    ):
        assert m <= x <= t - m
        cells[a][r] -= x
        cells[b][r] -= t - x
        assert cells[a][r] >= 0
        assert cells[b][r] >= 0


@pytest.mark.parametrize("cells", [3, 4, 8])
@settings(max_examples=examples(0.5), deadline=None)
@given(data=st.data())
def test_count_is_the_longest_sequence_and_each_claim_lowers_it_by_one(cells, data):
    search, free = data.draw(flex_cases(cells))
    state = search.canonical(free)
    count = search.count(state)
    if search.refused(state):
        assert count == 0
        assert search.upper(state) > FLEX_LIMIT
        assert search.place(free, None) is None
        return
    assert count == _brute(search, free)
    for i in range(count):
        got = search.place(free, None)
        assert got is not None
        _apply(search, free, got)
        assert search.count(search.canonical(free)) == count - i - 1
    assert search.place(free, None) is None


def test_cut_conditions_need_every_pair_not_only_the_sums():
    """Five cells of 4 hold 20 in all but no guest of 10 (every pair holds 8); the fleet's
    sum would say 2."""
    search = FlexSearch([0], [10], [1])
    assert search.count(search.canonical([[4]] * 5)) == 0
    assert search.count(search.canonical([[4]] * 4 + [[6]])) == 1


def test_a_hub_and_small_cells():
    """One roomy cell and four of one minimum each: four guests, each on the roomy cell."""
    search = FlexSearch([0], [10], [1])
    cells = [[100], [1], [1], [1], [1]]
    assert search.count(search.canonical(cells)) == 4
    for _ in range(4):
        got = search.place(cells, None)
        assert got is not None
        assert 0 in got[:2]
        _apply(search, cells, got)
    assert search.count(search.canonical(cells)) == 0


def test_a_refused_state_counts_zero_and_fits_nowhere():
    """Beyond `FLEX_LIMIT`, a state no greedy fill certifies is refused (here 9 would fit:
    the cost of the bound); smaller, the same shape is counted exactly."""
    search = FlexSearch([0], [4], [1])
    roomy = [[11], [11], [7], [7]]
    assert _brute(search, roomy) == 9 > FLEX_LIMIT
    assert search.refused(search.canonical(roomy))
    assert search.count(search.canonical(roomy)) == 0
    assert search.place(roomy, None) is None
    small = [[5], [5], [4]]
    assert not search.refused(search.canonical(small))
    assert search.count(search.canonical(small)) == _brute(search, small) == 3


# ------------------------------------------------------------------ through `vector`

DEVICES = ["gpu"]


def _flex_demand(vcpus: int, mem: int) -> Demand:
    f = flavor("f", vcpus=vcpus, mem=mem, pinned=True, numa=2, split="flexible")
    return build_demand(parse_flavor(f, {"gpu": "gpu"}), DEVICES)


@pytest.mark.parametrize("cells", [3, 4, 8])
@settings(max_examples=examples(0.3), deadline=None)
@given(data=st.data())
def test_vector_counts_and_claims_on_wide_hosts(cells, data):
    vcpus = data.draw(st.integers(2, 6))
    d = _flex_demand(vcpus, vcpus * 512)
    free = np.zeros((2, max(cells, 2), CELL_BASE + 1), dtype=np.int64)
    for h in range(2):
        for c in range(cells):
            free[h, c, C_PCPU] = data.draw(st.integers(0, 8))
            free[h, c, C_MEM] = data.draw(st.integers(0, 8)) * 512
    host = np.full((2, 4), 1 << 20, dtype=np.int64)
    count = vector.count(d, free, host)
    for row in range(2):
        cur = free[row : row + 1].copy()
        for i in range(int(count[row])):
            use, _ = vector.place(d, cur, host[row : row + 1])
            assert (use >= 0).all()
            assert (use <= cur).all()
            assert (use[0, :, C_PCPU] > 0).sum() == 2  # two cells, the same for memory
            assert ((use[0, :, C_PCPU] > 0) == (use[0, :, C_MEM] > 0)).all()
            assert use[0, :, C_PCPU].sum() == vcpus
            cur = cur - use
            assert int(vector.count(d, cur, host[row : row + 1])[0]) == count[row] - i - 1
        assert not vector.fits(d, cur, host[row : row + 1])[0]


def _table(
    n: int, spec: Flavor, distances: list[list[int]] | None = None, gpus: int = 0
) -> HostTable:
    numa = [cell(pcpus=8, mem=16384, pci={"gpu": gpus} if gpus else None) for _ in range(n)]
    h = host("h0", numa=numa)
    if distances is not None:
        h = h.model_copy(update={"numa_distances": distances})
    return HostTable.from_fleet(fleet([h], [spec], aliases={"gpu": "gpu"}))


def test_distances_steer_the_flexible_claim():
    dist = [[10 if a == b else 12 if a // 4 == b // 4 else 32 for b in range(8)] for a in range(8)]
    dist[2][5] = dist[5][2] = 11  # the closest pair
    spec = flavor("t", vcpus=4, mem=4096, pinned=True, numa=2, split="flexible")
    table = _table(8, spec, dist)
    alloc = table.claim("i0", "h0", "t")
    assert [c for c in range(8) if alloc.cell_use[c, C_PCPU]] == [2, 5]


@pytest.mark.parametrize(("policy", "expected"), [("required", 0), ("preferred", 8)])
def test_flexible_guests_with_devices_on_wide_hosts(policy, expected):
    """Devices that must sit in the guest's two cells: refused on more than two cells (the
    filter's `numa_flex_cells`); `preferred` devices come from any cell (8 GPUs, 1 a guest)."""
    spec = flavor(
        "t",
        vcpus=4,
        mem=4096,
        pinned=True,
        numa=2,
        split="flexible",
        pci="gpu:1",
        pci_policy=policy,
    )
    table = _table(4, spec, gpus=2)
    sched = FilterScheduler.from_config(profile("berth"))
    assert int(sched.capacity(table, "t", NOW)[0]) == expected
