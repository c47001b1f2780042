"""The device search's size bound (`numa.search.DEVICE_WORK`, docs/numa.md "Cost, and where the
search stops being cheap"): beyond it a host is refused (count 0, no fit), never approximated;
below it the count is exact, and since the bound only shrinks as a host fills, a counted host
stays counted while each placement lowers its count by exactly one."""

from __future__ import annotations

import pytest

from berth.core.numa.search import DEVICE_WORK, Searcher

EVEN2_GPU = ([[1, 0], [1, 0]], [0, 1])
"""Two guest cells of one pinned CPU, one device that must sit in one of them."""


def _work(searcher: Searcher, cells: list[list[int]]) -> int:
    state = searcher.canonical(cells)
    return searcher.upper(state) * sum(1 for _ in searcher.placements(state))


def test_a_device_search_too_large_is_refused() -> None:
    searcher = Searcher(*EVEN2_GPU, [0, 1])
    roomy = [[48, 24]] * 8  # 192 guests by the columns, 56 placements
    assert _work(searcher, roomy) > DEVICE_WORK
    state = searcher.canonical(roomy)
    assert searcher.too_large(state)
    assert searcher.count(state) == 0
    assert searcher.count(state, limit=1) == 0
    assert searcher.place(roomy, None) is None


@pytest.mark.parametrize(
    ("shapes", "pci", "cells"),
    [
        (*EVEN2_GPU, [[6, 3]] * 8),
        ([[2, 0], [1, 0]], [0, 1], [[6, 3]] * 6),
        ([[1, 0]] * 3, [0, 2], [[7, 5], [5, 3], [8, 1], [3, 4], [8, 2], [6, 6], [4, 0], [8, 3]]),
    ],
)
def test_below_the_bound_each_placement_lowers_the_count_by_one(
    shapes: list[list[int]], pci: list[int], cells: list[list[int]]
) -> None:
    searcher = Searcher(shapes, pci, [0, 1])
    assert not searcher.too_large(searcher.canonical(cells))
    k = searcher.count(searcher.canonical(cells))
    assert k > 0
    work = _work(searcher, cells)
    for i in range(k):
        got = searcher.place(cells, None)
        assert got is not None
        cells = searcher.after(cells, *got)
        state = searcher.canonical(cells)
        assert not searcher.too_large(state)  # counted hosts stay counted
        assert _work(searcher, cells) <= work  # the measure only shrinks as the host fills
        work = _work(searcher, cells)
        assert searcher.count(state) == k - i - 1
    assert searcher.place(cells, None) is None


def test_the_balanced_order_does_not_change_the_count() -> None:
    """The longest sequence by brute force (no memo, no early stop) equals the count."""
    searcher = Searcher(*EVEN2_GPU, [0, 1])
    cells = [[3, 2], [2, 0], [3, 1], [1, 1], [2, 1]]

    def longest(state: list[list[int]]) -> int:
        best = 0
        for hosts, takes in searcher.placements(state):
            best = max(best, 1 + longest(searcher.after(state, hosts, takes)))
        return best

    assert searcher.count(searcher.canonical(cells)) == longest(cells)
