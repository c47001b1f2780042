"""The claim rule's count and placement on ONE host by exact search, where no closed form exists.

Which cases (`wide.needs_search`): a guest with explicit unequal cells (FIXED) on a host with
more than two cells that still have room, a FIXED guest of more than two cells, and a
multi-cell guest whose PCI devices must sit in its own cells (`required` policy) on a host with
more cells in use than the guest has. There, which cells one guest takes changes what the next
can take, and the count is the longest sequence of placements (docs/numa.md).

The search: ``count(state) = 0`` when no placement fits, else ``1 + max count(state - p)``
over every distinct placement p (an injective map of the guest's cells to host cells, and
every split of its PCI devices over them). It is exact by definition and memoised by the
host's free state, canonicalised: only the columns the flavor reads, only the cells that can
hold one of its guest cells, sorted (the count does not depend on which cell is which; cell
distances only steer the claim rule's choice). It stops early once a branch reaches an upper
bound (the columns' totals, and the even k-of-n bound on the smallest guest cell), which the
first, roomiest branch usually does.

The claim rule on these hosts (`place`): among the placements that keep the count at
``count - 1`` (there is one: the first step of a longest sequence), the one with the smallest
sum of NUMA distances between its cells, then the first in enumeration order. So placing one
instance lowers the count by exactly one, by construction.

Cost: states are memoised per flavor (`Searcher.memo`), so equal hosts (empty, or filled alike)
cost one search; a new state costs its own subtree. Measured in docs/numa.md; it stays cheap
while counts per host are small (tens) and guests have few distinct cell shapes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import combinations

import numpy as np

from berth.core.numa.rule import BIG

State = tuple[tuple[int, ...], ...]

SWEEP_STATES = 20_000
"""The most states (used counts per shape type) one feasibility sweep may hold; see
`Searcher.too_large`. Two shape types: up to 140 guests a host; three: 26; four: 11."""

DEVICE_WORK = 10_000
"""The most `upper(state) x placements(state)` a device search may start from; see
`Searcher.too_large`. Eight even cells: a two-cell guest with one device up to 178 guests a
host (56 placements), a four-cell guest with one device and four devices a cell up to 35."""

MEMO_STATES = 200_000
"""At most this many states kept per flavor (tens of MB at most)."""


def even_bound(units: Sequence[int], k: int) -> int:
    """How many guests of k equal cells fit on cells with `units` slots each (docs/numa.md:
    ``min over j < k of floor(S_j / (k - j))``, S_j the sum of all but the j largest)."""
    u = sorted((max(x, 0) for x in units), reverse=True)
    total = sum(u)
    best = BIG
    for j in range(k):
        if j:
            total -= u[j - 1] if j - 1 < len(u) else 0
        q = total // (k - j)
        if q < best:
            best = q
    return max(best, 0)


class Searcher:
    """The exact search for one flavor: guest cell `shapes` (rows over the flavor's columns) and
    `pci` devices (per PCI column index into the same rows) that must come from the guest's cells.

    `cols` are the table columns the rows use (cell resources, then PCI columns)."""

    def __init__(self, shapes: list[list[int]], pci: list[int], cols: list[int]) -> None:
        self.cols = cols
        self.shapes = [tuple(s) for s in sorted(shapes, reverse=True)]
        self.k = len(shapes)
        self.pci = [(i, p) for i, p in enumerate(pci) if p]
        self.smallest = tuple(min(s[i] for s in self.shapes) for i in range(len(cols)))
        self.total = tuple(sum(s[i] for s in self.shapes) + pci[i] for i in range(len(cols)))
        self.memo: dict[State, int] = {}
        kinds: dict[tuple[int, ...], int] = {}
        for shape in self.shapes:
            kinds[shape] = kinds.get(shape, 0) + 1
        self.types = list(kinds.items())
        """(shape, how many of the guest's cells have it)."""

    # -------------------------------------------------------------- states
    def usable(self, cell: Sequence[int]) -> bool:
        """Whether the cell can hold the smallest guest cell (else it can give nothing)."""
        return all(c >= s for c, s in zip(cell, self.smallest, strict=True) if s > 0)

    def canonical(self, cells: Sequence[Sequence[int]]) -> State:
        return tuple(sorted((tuple(c) for c in cells if self.usable(c)), reverse=True))

    def read(self, host_cells: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """A host's cells (full table width) restricted to the flavor's columns."""
        return [tuple(cell[c] for c in self.cols) for cell in host_cells]

    # -------------------------------------------------------------- placements
    def _assignments(self, cells: Sequence[Sequence[int]]) -> Iterator[tuple[int, ...]]:
        """Injective maps guest cell -> host cell where each guest cell fits; equal guest
        shapes are interchangeable, so each gets increasing host cells."""
        n, shapes = len(cells), self.shapes
        fits = [
            [all(c >= s for c, s in zip(cells[h], shape, strict=True)) for h in range(n)]
            for shape in shapes
        ]
        chosen: list[int] = []

        def rec(i: int) -> Iterator[tuple[int, ...]]:
            if i == self.k:
                yield tuple(chosen)
                return
            start = chosen[-1] + 1 if i and shapes[i] == shapes[i - 1] else 0
            for h in range(start, n):
                if fits[i][h] and h not in chosen:
                    chosen.append(h)
                    yield from rec(i + 1)
                    chosen.pop()

        yield from rec(0)

    def _pci_splits(
        self, cells: Sequence[Sequence[int]], hosts: tuple[int, ...]
    ) -> Iterator[list[tuple[int, int, int]]]:
        """Every way to take the PCI devices from the guest's cells: (host cell, column, n)."""
        if not self.pci:
            yield []
            return
        options: list[list[list[tuple[int, int, int]]]] = []
        for col, need in self.pci:
            ways = []
            for cut in _compositions(need, [cells[h][col] for h in hosts]):
                ways.append([(h, col, x) for h, x in zip(hosts, cut, strict=True) if x])
            if not ways:
                return
            options.append(ways)
        yield from _product(options)

    def placements(
        self, cells: Sequence[Sequence[int]]
    ) -> Iterator[tuple[tuple[int, ...], list[tuple[int, int, int]]]]:
        """(host cell of each guest cell, PCI takes) for every placement on these cells."""
        for hosts in self._assignments(cells):
            for takes in self._pci_splits(cells, hosts):
                yield hosts, takes

    def after(
        self,
        cells: Sequence[Sequence[int]],
        hosts: tuple[int, ...],
        takes: list[tuple[int, int, int]],
    ) -> list[list[int]]:
        out = [list(c) for c in cells]
        for shape, h in zip(self.shapes, hosts, strict=True):
            for i, v in enumerate(shape):
                out[h][i] -= v
        for h, col, x in takes:
            out[h][col] -= x
        return out

    # -------------------------------------------------------------- count
    def upper(self, state: State) -> int:
        best = BIG
        for i, t in enumerate(self.total):
            if t > 0:
                best = min(best, sum(c[i] for c in state) // t)
        units = [
            min((c[i] // s for i, s in enumerate(self.smallest) if s > 0), default=BIG)
            for c in state
        ]
        for col, _ in self.pci:  # each guest draws a device from a cell holding one of its cells
            best = min(best, sum(min(u, c[col]) for u, c in zip(units, state, strict=True)))
        return max(min(best, even_bound(units, self.k)), 0)

    def _balance(self, state: State) -> tuple[int, int]:
        """Child order after `upper`: the state with the most upper bound, then the most even
        (smallest sums of squares of the cells' slots and devices): a longest sequence keeps
        the cells even, so the first branch usually reaches the bound and the search stops."""
        units = [
            min((c[i] // s for i, s in enumerate(self.smallest) if s > 0), default=BIG)
            for c in state
        ]
        devices = sum(c[col] * c[col] for c in state for col, _ in self.pci)
        return self.upper(state), -sum(u * u for u in units) - devices

    def count(self, state: State, limit: int | None = None) -> int:
        """How many more guests fit on the canonical `state` (at most `limit` when given)."""
        if self.too_large(state):
            return 0  # refused: see `too_large`
        if limit is not None and limit <= 1:
            return min(limit, 1) if any(True for _ in self.placements(state)) else 0
        return self._count(state)

    def too_large(self, state: State) -> bool:
        """Whether counting `state` exactly would sweep more than `SWEEP_STATES` states (FIXED
        guests of several distinct cell shapes on a roomy host) or, for guests with cell-local
        devices, start a search of more than `DEVICE_WORK` (its bound times its placements:
        the work of the first branch, which with `_balance`'s order reached the bound in every
        measured case; docs/numa.md). Such a host is refused for the flavor (count 0, so
        nothing is placed and no count is wrong); both measures only shrink as the host fills
        (fewer placements fit a fuller host, the bound does not grow), so a host counted once
        stays counted, and placing one instance still lowers its count by exactly one."""
        top = self.upper(state)
        if self.pci:
            work = 0
            for _ in self.placements(state):
                work += top
                if work > DEVICE_WORK:
                    return True
            return False
        space = 1
        for _, mult in self.types:
            space *= top * mult + 1
        return space > SWEEP_STATES

    def _count(self, state: State) -> int:
        found = self.memo.get(state)
        if found is None:
            found = self._longest(state) if self.pci else self._largest(state)
            if len(self.memo) >= MEMO_STATES:  # forgetting costs time, never exactness
                self.memo.clear()
            self.memo[state] = found
        return found

    def _longest(self, state: State) -> int:
        """The longest sequence of placements, depth first (guests with local devices)."""
        top = self.upper(state)
        best = 0
        if top > 0:
            children = {self.canonical(self.after(state, h, t)) for h, t in self.placements(state)}
            for child in sorted(children, key=self._balance, reverse=True):
                best = max(best, 1 + self._count(child))
                if best >= top:
                    break
        return best

    def _largest(self, state: State) -> int:
        """The largest t with `feasible(state, t)` (feasibility is monotone in t)."""
        lo, hi = 0, self.upper(state)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.feasible(state, mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def feasible(self, state: State, t: int) -> bool:
        """Whether t guests fit at once (no devices). With x[i][c] guest cells of shape type i
        on host cell c, they do iff ``sum_c x[i][c] = t * mult_i``, ``sum_i x[i][c] <= t``
        and each cell's columns hold its x: then the bipartite multigraph (guest cell slots,
        host cells) has degree at most t and König's edge-colouring theorem splits it into t
        guests, each on distinct cells (docs/numa.md). Decided by a reachability sweep over the
        cells, one boolean array over the types' used counts."""
        if t <= 0:
            return True
        types = self.types
        need = tuple(t * m for _, m in types)
        reach = np.zeros(tuple(n + 1 for n in need), dtype=bool)
        reach[(0,) * len(need)] = True
        for cell in state:
            nxt = np.zeros_like(reach)
            for x in _cell_options(cell, types, t, need):
                src = tuple(slice(0, n + 1 - xi) for n, xi in zip(need, x, strict=True))
                dst = tuple(slice(xi, n + 1) for n, xi in zip(need, x, strict=True))
                nxt[dst] |= reach[src]
            reach = nxt
            if not reach.any():
                return False
        return bool(reach[need])

    def place(
        self, host_cells: Sequence[Sequence[int]], distance: Sequence[Sequence[int]] | None
    ) -> tuple[tuple[int, ...], list[tuple[int, int, int]]] | None:
        """The claim rule on these hosts: a placement keeping ``count - 1``, the closest cells
        (smallest sum of pairwise distances; index distance where the host reports none), then
        the first in enumeration order. None when nothing fits."""
        cells = self.read(host_cells)
        if self.count(self.canonical(cells)) == 0:  # nothing fits, or refused (`too_large`)
            return None
        want = self._count(self.canonical(cells)) - 1
        options = list(self.placements(cells))
        options.sort(key=lambda o: spread(o[0], distance))  # stable: enumeration order next
        for hosts, takes in options:
            child = self.canonical(self.after(cells, hosts, takes))
            if (self._count(child) if self.pci else want) == want and (
                self.pci or self.feasible(child, want)
            ):
                return hosts, takes
        return None


def spread(cells: Sequence[int], distance: Sequence[Sequence[int]] | None) -> int:
    """The sum of NUMA distances between the cells a guest takes (|i - j| without a matrix)."""
    out = 0
    for a, b in combinations(sorted(set(cells)), 2):
        out += distance[a][b] if distance is not None else b - a
    return out


def _compositions(need: int, caps: list[int]) -> Iterator[list[int]]:
    """Every way to write `need` as a sum over the caps' slots, each at most its cap."""
    if not caps:
        if need == 0:
            yield []
        return
    first, rest = caps[0], caps[1:]
    room = sum(max(c, 0) for c in rest)
    for x in range(min(need, max(first, 0)), -1, -1):
        if need - x <= room:
            for tail in _compositions(need - x, rest):
                yield [x, *tail]


def _product(
    options: list[list[list[tuple[int, int, int]]]],
) -> Iterator[list[tuple[int, int, int]]]:
    if not options:
        yield []
        return
    for head in options[0]:
        for tail in _product(options[1:]):
            yield head + tail


def _cell_options(
    cell: tuple[int, ...], types: list[tuple[tuple[int, ...], int]], t: int, need: tuple[int, ...]
) -> Iterator[tuple[int, ...]]:
    """Every vector x (guest cells of each type this host cell takes) that the cell's columns
    hold, with at most t in all (one per guest) and at most `need` of each type."""
    chosen: list[int] = []

    def rec(i: int, left: list[int], room: int) -> Iterator[tuple[int, ...]]:
        if i == len(types):
            yield tuple(chosen)
            return
        shape = types[i][0]
        top = min(room, need[i])
        for j, v in enumerate(shape):
            if v > 0:
                top = min(top, left[j] // v)
        for x in range(max(top, -1) + 1):
            chosen.append(x)
            yield from rec(i + 1, [a - x * v for a, v in zip(left, shape, strict=True)], room - x)
            chosen.pop()

    yield from rec(0, list(cell), t)
