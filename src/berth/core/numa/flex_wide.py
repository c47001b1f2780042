"""FLEX (Berth's flexible two-cell split) on hosts of more than two usable cells: the exact
count and the claim rule (docs/numa.md, "FLEX on more than two cells" has the proofs).

A guest takes two distinct cells of the host (the same pair for every resource) and gives
each resource r a share x_r on one and ``T_r - x_r`` on the other, ``m_r <= x_r <= T_r - m_r``.
Write the guests as a multigraph z on the host's cells (one edge per guest). Then z fits iff,
for every resource r and every set X of cells,

    ``T_r e(X) + m_r cut(X) <= F_r(X)``

(e(X): guests with both cells in X, cut(X): guests with one; F_r(X): the free amount of X).
Necessary: a guest inside X takes T_r from X, one across takes at least m_r. Sufficient: each
guest gives m_r to both of its cells and ``s_r = T_r - 2 m_r`` to either; with
``G_c = F_c - m_r deg(c)`` the shares exist iff ``s_r e(X) <= G(X)`` for every X (max-flow
min-cut on guests -> cells, as in Hakimi's orientation theorem), which is the line above.
So the count is the largest such z, whatever order the guests came in.

`upper` bounds it (each resource's free sum over T_r; the guests' ends, a cell holding at
most ``min_r F_r // m_r``; the guests' major shares, at least ``ceil(T_r / 2)`` on one cell),
and each of the three drops by at least one with every placement of the flavor. The count:

* certified: a greedy fill (`greedy`: guests one after another on the two cells with the most
  room) reaches `upper`; then count = `upper`, whatever its size;
* otherwise, when ``upper <= FLEX_LIMIT``: a depth-first search over multisets of pairs (in a
  fixed order, each at least the previous), keeping ``F_r(X) - T_r e(X) - m_r cut(X)`` for
  every X in one numpy array, pruning a branch as soon as an entry is negative (the
  conditions only tighten as guests are added) or when `upper` of the residual cannot beat
  the best found; it stops at `_by_ends`, a tighter bound that is not known to drop with
  each placement (so it never certifies);
* otherwise refused (count 0, no fit), never approximated.

The claim rule: on a certified state, the greedy's first guest (among cells of equal free
amounts, the closest pair); the greedy from the new state then reaches ``count - 1``, which
`upper` now is at most, so the new state is certified with count - 1. Otherwise, of the
largest multiset the search found, the guest on the closest pair (smallest NUMA distance,
index distance without a matrix, then the lowest pair), each resource split as evenly as the
multiset's other ``count - 1`` guests allow (the conditions above with this guest's shares
fixed); the new state's `upper` is at most the old, so it is counted again, exactly. Either
way placing one instance lowers the count by exactly one.

Memoised by canonical state (only the cells that can hold m_r of every resource, sorted), as
`search` is. With at most two usable cells the two-cell closed form is exact and used.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import numpy.typing as npt

from berth.core.numa.rule import BIG

I64 = npt.NDArray[np.int64]
State = tuple[tuple[int, ...], ...]
Pairs = list[tuple[int, int]]

FLEX_LIMIT = 8
"""The most guests `upper` may allow for the search to count a state the greedy fill does not
certify; beyond, the state is refused for the flavor (docs/numa.md measures the cost)."""

GREEDY_KINDS = (0, 1)
"""The greedy fills tried (`FlexSearch._step`); the first that reaches `upper` certifies."""

REFUSED: Pairs = []
"""The witness of a refused state (compared by identity)."""

MEMO_STATES = 200_000
"""At most this many states kept per flavor."""


class _Cells:
    """The subsets of n cells and what one guest on each pair takes from each (per resource)."""

    def __init__(self, n: int, total: I64, minimum: I64) -> None:
        masks = np.arange(1, 1 << n)
        self.member = ((masks[:, None] >> np.arange(n)[None, :]) & 1).astype(np.int64)
        self.pairs = list(combinations(range(n), 2))
        both = np.array([self.member[:, a] & self.member[:, b] for a, b in self.pairs])
        one = np.array([self.member[:, a] ^ self.member[:, b] for a, b in self.pairs])
        self.delta = both[:, :, None] * total[None, None, :] + one[:, :, None] * minimum
        self.single = (1 << np.arange(n)) - 1  # row of each one-cell subset
        self.full = (1 << n) - 2


class FlexSearch:
    """The exact count and claim of one FLEX flavor: `totals` T_r and `minimums` m_r over the
    table columns `cols`."""

    def __init__(self, cols: list[int], totals: list[int], minimums: list[int]) -> None:
        self.cols = cols
        self.total = np.array(totals, dtype=np.int64)
        self.minimum = np.array(minimums, dtype=np.int64)
        self.smallest = tuple(minimums)
        self.memo: dict[State, tuple[int, Pairs | int]] = {}
        """count and witness per state: the kind of the greedy fill that certifies the count,
        a largest multiset of pairs, or `REFUSED`."""
        self._cells: dict[int, _Cells] = {}

    # -------------------------------------------------------------- states
    def read(self, host_cells: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
        """A host's cells (full table width) restricted to the flavor's columns."""
        return [tuple(cell[c] for c in self.cols) for cell in host_cells]

    def usable(self, cell: Sequence[int]) -> bool:
        """Whether the cell can hold one guest's minimum of every resource."""
        return all(c >= m for c, m in zip(cell, self.smallest, strict=True))

    def canonical(self, cells: Sequence[Sequence[int]]) -> State:
        return tuple(sorted((tuple(c) for c in cells if self.usable(c)), reverse=True))

    def _geometry(self, n: int) -> _Cells:
        found = self._cells.get(n)
        if found is None:
            found = self._cells[n] = _Cells(n, self.total, self.minimum)
        return found

    # -------------------------------------------------------------- count
    def two_cell(self, state: State) -> int:
        """The two-cell closed form (docs/numa.md, FLEX) on at most two usable cells."""
        if len(state) < 2:
            return 0
        out = BIG
        for r, (t, m) in enumerate(zip(self.total.tolist(), self.minimum.tolist(), strict=True)):
            a, b = state[0][r], state[1][r]
            out = min(out, (a + b) // t, min(a, b) // m)
        return max(out, 0)

    def upper(self, state: State) -> int:
        """The bound of the module docstring on a canonical state."""
        if len(state) < 2:
            return 0
        return self._upper(np.array(state, dtype=np.int64))

    def _upper(self, free: I64) -> int:
        """`upper` on free amounts (cells, resources), negative ones read as 0."""
        if free.shape[0] < 2:
            return 0
        free = np.maximum(free, 0)
        ends = (free // self.minimum).min(axis=1)
        s = int(ends.sum())
        by_ends = min(s // 2, s - int(ends.max()))
        by_sum = int((free.sum(axis=0) // self.total).min())
        by_major = int((free // ((self.total + 1) // 2)).sum(axis=0).min())
        return max(min(by_ends, by_sum, by_major), 0)

    def _by_ends(self, free: I64, top: int) -> int:
        """A tighter bound for the search to stop at (not for certifying: it is not known to
        drop with each placement): the largest t <= `top` such that, for every resource, the
        2t ends placed where they hold the most (an end holds at most ``T_r - m_r``, a cell
        ``min(F_c, its ends (T_r - m_r))``, at most ``min(u_c, t)`` ends a cell) hold
        ``t T_r``. The ends of a cell add ever less, so placing them greedily is optimal."""
        free = np.maximum(free, 0)
        ends = (free // self.minimum).min(axis=1).tolist()
        for t in range(top, 0, -1):
            ok = True
            pairs = zip(self.total.tolist(), self.minimum.tolist(), strict=True)
            for r, (big, least) in enumerate(pairs):
                cap = big - least
                gains: list[int] = []
                for c, u in enumerate(ends):
                    have, f = 0, int(free[c, r])
                    for k in range(1, min(u, t) + 1):
                        now = min(f, k * cap)
                        gains.append(now - have)
                        have = now
                gains.sort(reverse=True)
                if sum(gains[: 2 * t]) < t * big:
                    ok = False
                    break
            if ok:
                return t
        return 0

    def refused(self, state: State) -> bool:
        """Whether the state is refused (count 0 although `upper` is above `FLEX_LIMIT`)."""
        return len(state) > 2 and self._solve(state)[1] is REFUSED

    def count(self, state: State) -> int:
        """How many more guests fit on the canonical `state` (0 when refused)."""
        if len(state) <= 2:
            return self.two_cell(state)
        return self._solve(state)[0]

    def _solve(self, state: State) -> tuple[int, Pairs | int]:
        """(count, k) when the greedy fill of kind k certifies it, else (count, a largest
        multiset of pairs of positions in `state`); (0, `REFUSED`) when refused."""
        found = self.memo.get(state)
        if found is None:
            free = np.array(state, dtype=np.int64)
            top = self._upper(free)
            best: Pairs = []
            for kind in GREEDY_KINDS:  # the first that reaches the bound
                fill = self.greedy(free, kind)
                if len(fill) > len(best):
                    best = fill
                if len(fill) >= top:
                    break
            if len(best) >= top:
                found = (top, kind)
            elif top > FLEX_LIMIT:
                found = (0, REFUSED)
            else:
                best = self._largest(free, self._by_ends(free, top), best)
                found = (len(best), best)
            if len(self.memo) >= MEMO_STATES:  # forgetting costs time, never exactness
                self.memo.clear()
            self.memo[state] = found
        return found

    def _largest(self, free: I64, goal: int, start: Pairs) -> Pairs:
        """The largest multiset of pairs that fits (the depth-first search of the module
        docstring), from the multiset `start` that fits."""
        cells = self._geometry(free.shape[0])
        best = [cells.pairs.index((min(p), max(p))) for p in start]
        path: list[int] = []
        full, total = cells.full, self.total

        def dfs(res: I64, first: int) -> bool:
            nonlocal best
            if len(path) > len(best):
                best = list(path)
                if len(best) >= goal:
                    return True
            bound = min(self._upper(res[cells.single]), int((res[full] // total).min()))
            if len(path) + bound <= len(best):
                return False
            after = res[None] - cells.delta[first:]  # every next pair at once
            for i in np.flatnonzero(after.min(axis=(1, 2)) >= 0).tolist():
                path.append(first + i)
                if dfs(after[i], first + i):
                    return True
                path.pop()
            return False

        if len(best) < goal:
            dfs(cells.member @ free, 0)  # the residual starts at F_r(X)
        return [cells.pairs[i] for i in best]

    def greedy(
        self, free: I64, kind: int, distance: Sequence[Sequence[int]] | None = None
    ) -> Pairs:
        """A fill, guest after guest by `_step` of `kind`, until its pair holds no guest. The
        pairs (a, b) in order."""
        left = free.copy()
        out: Pairs = []
        while (step := self._step(left, kind, distance)) is not None:
            (a, b), share = step
            left[a] -= share
            left[b] -= self.total - share
            out.append((a, b))
        return out

    def _step(
        self, left: I64, kind: int, distance: Sequence[Sequence[int]] | None
    ) -> tuple[tuple[int, int], I64] | None:
        """One guest of a greedy fill: cell a is the roomiest (ranked by ends, then free sum,
        then the free amounts themselves, so only equal cells tie); b the next roomiest, split
        by `_balanced` (kind 0), or the least roomy cell with an end left, which takes as
        little as the split allows (kind 1). Among equal cells, the closest pair."""
        ends = (np.maximum(left, 0) // self.minimum).min(axis=1)
        keys = [(int(ends[c]), int(left[c].sum()), *left[c].tolist()) for c in range(len(left))]
        ranked = sorted((c for c in range(len(left)) if ends[c] >= 1), key=lambda c: keys[c])
        ranked.reverse()  # roomiest first
        if len(ranked) < 2:
            return None
        tops = [c for c in ranked if keys[c] == keys[ranked[0]]]
        if kind == 0:
            rest = ranked[1:]
            seconds = [c for c in rest if keys[c] == keys[rest[0]]]
        else:
            rest = ranked[len(tops) :] or ranked[1:]
            seconds = [c for c in rest if keys[c] == keys[rest[-1]]]
        choices = [(a, b) for a in tops for b in seconds if a != b]
        a, b = min(choices, key=lambda p: (_distance(p, distance), sorted(p)))
        if kind == 0:
            share = self._balanced(left[a], left[b], None)
        else:
            lo = np.maximum(self.minimum, self.total - left[b])
            hi = np.minimum(self.total - self.minimum, left[a])
            share = None if (lo > hi).any() else hi
        return None if share is None else ((a, b), share)

    def _balanced(self, fa: I64, fb: I64, bounds: tuple[I64, I64] | None) -> I64 | None:
        """a's share of each resource: the two-cell rule's ``(F_a - F_b + T) // 2`` clamped
        into what both cells hold (and `bounds` (lo, hi) when given); None if none fits."""
        lo = np.maximum(self.minimum, self.total - fb)
        hi = np.minimum(self.total - self.minimum, fa)
        if bounds is not None:
            lo, hi = np.maximum(lo, bounds[0]), np.minimum(hi, bounds[1])
        if (lo > hi).any():
            return None
        out: I64 = np.clip((fa - fb + self.total) // 2, lo, hi)
        return out

    # -------------------------------------------------------------- claim
    def place(
        self, host_cells: Sequence[Sequence[int]], distance: Sequence[Sequence[int]] | None
    ) -> tuple[int, int, list[int]] | None:
        """The claim rule on a host (more than two usable cells: `wide` routes the others):
        (cell a, cell b, a's share of each resource; b takes the rest). None when nothing
        fits (or refused)."""
        cells = self.read(host_cells)
        state = self.canonical(cells)
        count, witness = self._solve(state) if len(state) > 2 else (self.two_cell(state), 0)
        if count == 0:
            return None
        live = sorted(
            (c for c in range(len(cells)) if self.usable(cells[c])),
            key=lambda c: cells[c],
            reverse=True,
        )  # position i of `state` is host cell live[i] (equal cells in any order)
        free = np.array([cells[c] for c in live], dtype=np.int64)
        near = [[distance[a][b] if distance else abs(a - b) for b in live] for a in live]
        share: I64 | None = None
        if isinstance(witness, int):  # certified (or two cells): the greedy's first guest
            step = self._step(free, witness, near)
            (i, j), share = step if step is not None else ((0, 1), None)
        else:
            rest = list(witness)
            k = min(
                range(len(rest)),
                key=lambda p: (_distance(rest[p], near), sorted(live[x] for x in rest[p])),
            )
            i, j = rest.pop(k)
            share = self._balanced(free[i], free[j], self._room(free, i, j, rest))
        assert share is not None  # the witness (or the greedy) holds this guest
        return live[i], live[j], [int(x) for x in share]

    def _room(self, free: I64, a: int, b: int, rest: Pairs) -> tuple[I64, I64]:
        """(lo, hi) of a's share that leaves room for the guests `rest`: x_r <= F_r(X) -
        load_r(X) for every X holding a but not b, ``T_r - x_r`` <= the same for X holding b
        but not a (the conditions of the module docstring with this guest's shares fixed)."""
        geo = self._geometry(free.shape[0])
        room = geo.member @ free
        for p in rest:
            room = room - geo.delta[geo.pairs.index(p)]
        has_a, has_b = geo.member[:, a] == 1, geo.member[:, b] == 1
        hi = room[has_a & ~has_b].min(axis=0)
        lo = self.total - room[has_b & ~has_a].min(axis=0)
        return lo, hi


def _distance(pair: tuple[int, int], distance: Sequence[Sequence[int]] | None) -> int:
    a, b = pair
    return distance[a][b] if distance is not None else abs(b - a)
