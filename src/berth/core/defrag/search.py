"""The planner's improving search: the best single move, repeated, then short chains.

Each round takes the migration that gains the most objective of all (any movable instance, any
allowed target, the target's NUMA shape chosen by the objective: `shapes`), and when no single
move gains, the best pair of moves off one host (two removals that open a slot neither opens
alone). It stops when nothing gains, the budget is spent, or `should_stop()` says so (an
injected deadline: the core reads no clock). Every round is a real, exact state of the working
table, so the plan is valid whenever it stops.

Columnar and incremental: per movable instance the objective gained by removing it (`rem`), per
flavor and host the objective lost by adding one (`put`); a move changes two hosts, and only
their rows are recomputed. Candidates are ranked by an upper bound (removal gain plus the best
insertion over the hosts the request-independent filters allow) and checked exactly, best
first, against the full target rules until no bound can beat the best found.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from berth.core.defrag.journal import Journal
from berth.core.defrag.model import Budget
from berth.core.defrag.objective import HostValue
from berth.core.defrag.rules import TargetRules
from berth.core.defrag.shapes import (
    Shapes,
    footprint,
    insert_one,
    insert_values,
    landing_shapes,
    shape_lists,
)
from berth.core.defrag.waves import Step
from berth.core.table import Allocation, HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

EPS = 1e-9
TOP = 48
"""Candidates ranked per round before falling back to a full sort."""
PAIR_INSTANCES = 8
"""Pairs are formed among a host's this many largest movable instances."""
PAIR_TRIES = 24
"""Pair candidates checked exactly per round (the best upper bounds first)."""
SMALL_ROWS = 16
"""Up to this many changed hosts, their rows are recomputed in plain Python numbers."""
PUT_MEMO = 100_000
"""At most this many one-host insertion values remembered (forgetting costs time only)."""


class _Uses(dict[int, tuple[list[list[int]], list[int]]]):
    """An instance's footprint as lists, made on first use (most instances never need it)."""

    def __init__(self, search: MoveSearch) -> None:
        super().__init__()
        self.search = search

    def __missing__(self, i: int) -> tuple[list[list[int]], list[int]]:
        s = self.search
        out = (s.cell_use[i].tolist(), s.host_use[i].tolist())
        self[i] = out
        return out


class Planner(Protocol):
    """What the search reads and changes of the planner (`planner._Planner`)."""

    work: HostTable
    value: HostValue
    rules: TargetRules
    journal: Journal
    budget: Budget
    steps: list[Step]
    movable: dict[int, list[str]]
    touches: I64
    is_source: Mask
    is_target: Mask
    tie: I64
    per_host: int

    def left(self) -> int:
        """Moves the budget still allows."""
        raise NotImplementedError

    def current(self) -> F64:
        """Per host, its objective value now."""
        raise NotImplementedError

    def move(self, alloc: Allocation, row: int, cell_use: I64 | None = None) -> None:
        """Make one move on the working table and record it."""
        raise NotImplementedError


class MoveSearch:
    """Best-improvement local search over single moves and same-host pairs (module doc)."""

    def __init__(
        self,
        planner: Planner,
        should_stop: Callable[[], bool] | None = None,
        *,
        shapes: bool = True,
        pairs: bool = True,
    ) -> None:
        """`shapes=False` lands every move where the claim rule puts it and `pairs=False`
        makes single moves only: together, the plain "best single move, repeat" greedy that
        benchmarks compare with."""
        self.p = planner
        self.stop = should_stop or (lambda: False)
        self.pairs = pairs
        work = planner.work
        ids = [i for r in sorted(planner.movable) for i in planner.movable[r]]
        self.ids = ids
        allocs = [work.allocations[i] for i in ids]
        self.flavor_names = sorted({a.flavor for a in allocs})
        fl = {f: k for k, f in enumerate(self.flavor_names)}
        self.flavor_of = np.array([fl[a.flavor] for a in allocs], dtype=np.int64)
        self.owner = np.array([work.index[a.host] for a in allocs], dtype=np.int64)
        width = work.cell_free.shape[2]
        self.cell_use = np.array([a.cell_use for a in allocs], dtype=np.int64).reshape(
            len(ids), work.cell_free.shape[1], width
        )
        self.host_use = np.array([a.host_use for a in allocs], dtype=np.int64).reshape(
            len(ids), work.host_free.shape[1]
        )
        self.size = np.array(
            [
                work.flavors[a.flavor].vcpus * (1 << 32) + work.flavors[a.flavor].memory_mb
                for a in allocs
            ],
            dtype=np.int64,
        )
        self.alive = np.ones(len(ids), dtype=bool)
        self.by_host: dict[int, list[int]] = {}
        """Per host row, the positions of its movable instances (moved ones stay, not alive)."""
        for i, r in enumerate(self.owner.tolist()):
            self.by_host.setdefault(r, []).append(i)
        self.shapes: dict[str, Shapes] = {
            f: landing_shapes(work, f) if shapes else [] for f in self.flavor_names
        }
        # request-independent target masks, one per request shape (rules cache them)
        masks: dict[int, int] = {}
        shared: dict[tuple[object, ...], int] = {}
        self.static: list[Mask] = []
        group = []
        plain = not planner.rules.keep_traits  # else the source's traits are part of the key
        for a, row in zip(allocs, self.owner.tolist(), strict=True):
            key = (a.flavor, a.server_group, a.project, int(work.zone[row]))
            k = shared.get(key) if plain else None
            if k is None:
                m = planner.rules.static_mask(work, a)
                k = masks.get(id(m))
                if k is None:
                    k = masks[id(m)] = len(self.static)
                    self.static.append(m)
                shared[key] = k
            group.append(k)
        self.group = np.array(group, dtype=np.int64)
        self.group_flavor = np.zeros(len(self.static), dtype=np.int64)
        self.group_flavor[self.group] = self.flavor_of
        n = len(work)
        self.put = np.zeros((len(self.flavor_names), n))
        self.put_shape = np.zeros((len(self.flavor_names), n), dtype=np.int64)
        self.rem = np.zeros(len(ids))
        self.best = np.full(len(self.static), -np.inf)
        self.best_row = np.full(len(self.static), -1, dtype=np.int64)
        self._shape_lists = {f: shape_lists(v) for f, v in self.shapes.items()}
        self._uses: dict[int, tuple[list[list[int]], list[int]]] = _Uses(self)
        self._puts: dict[tuple[object, ...], tuple[float, int]] = {}
        """`insert_one` by flavor (and, under -1 - i, the value without movable instance i) and
        everything it reads of the host: a pair tried and undone restores its hosts exactly,
        to states already valued."""
        self.moves = 0
        self._refresh(np.arange(n))

    # ------------------------------------------------------------------ state
    def _refresh(self, rows: I64) -> None:
        """Recompute `put` and `rem` on these hosts (all of them at the start), then the best
        insertion per static mask (`_group_best`)."""
        if rows.size > SMALL_ROWS:
            self._refresh_many(rows)
            self._group_best(None)
            return
        p, work, value = self.p, self.p.work, self.p.value
        for r in rows.tolist():
            state: tuple[object, ...] = (
                r,
                work.cell_free[r].tobytes(),
                work.host_free[r].tobytes(),
                int(work.n_instances[r]),
            )
            for k, f in enumerate(self.flavor_names):
                seen = self._puts.get((k, *state))
                if seen is None:
                    if len(self._puts) >= PUT_MEMO:
                        self._puts.clear()
                    seen = self._puts[(k, *state)] = insert_one(
                        value, work, f, r, self._shape_lists[f]
                    )
                self.put[k, r], self.put_shape[k, r] = seen
            self.put[:, r] -= float(p.current()[r])
            alive = [i for i in self.by_host.get(r, ()) if self.alive[i]]
            if not alive:
                continue
            cf: list[list[int]] = work.cell_free[r].tolist()
            hf: list[int] = work.host_free[r].tolist()
            left = int(work.n_instances[r]) - 1
            now = float(p.current()[r])
            for i in alive:
                gone = self._puts.get((-1 - i, *state))  # the host's value without i
                if gone is None:
                    cu, hu = self._uses[i]
                    after_cf = [
                        [a + b for a, b in zip(x, y, strict=True)]
                        for x, y in zip(cf, cu, strict=True)
                    ]
                    after_hf = [a + b for a, b in zip(hf, hu, strict=True)]
                    if len(self._puts) >= PUT_MEMO:
                        self._puts.clear()
                    gone = self._puts[(-1 - i, *state)] = (
                        value.one(r, after_cf, after_hf, left),
                        0,
                    )
                self.rem[i] = gone[0] - now
        self._group_best(rows)

    def _group_best(self, rows: I64 | None) -> None:
        """Per static mask, the best `put` of its flavor over the hosts it allows: recomputed
        in full (rows None, or when the best host is among `rows`), else raised by `rows`."""
        for g, mask in enumerate(self.static):
            put = self.put[self.group_flavor[g]]
            if rows is None or int(self.best_row[g]) in rows.tolist():
                allowed = np.flatnonzero(mask)
                if allowed.size == 0:
                    self.best[g], self.best_row[g] = -np.inf, -1
                    continue
                j = int(np.argmax(put[allowed]))
                self.best[g], self.best_row[g] = float(put[allowed[j]]), int(allowed[j])
                continue
            for r in rows.tolist():
                if mask[r] and put[r] > self.best[g]:
                    self.best[g], self.best_row[g] = float(put[r]), r

    def _refresh_many(self, rows: I64) -> None:
        """`_refresh` for many hosts, vectorised."""
        p, work = self.p, self.p.work
        now = p.current()
        for k, f in enumerate(self.flavor_names):
            after, shape = insert_values(p.value, work, f, rows, self.shapes[f])
            self.put[k, rows] = after - now[rows]
            self.put_shape[k, rows] = shape
        if rows.size == len(work):
            on = np.flatnonzero(self.alive)
        else:
            on = np.array(
                [i for r in rows.tolist() for i in self.by_host.get(r, ()) if self.alive[i]],
                dtype=np.int64,
            )
        if on.size:
            owner = self.owner[on]
            cf, hf = work.free_rows(owner)
            n_left = work.n_instances[owner].astype(np.int64) - 1
            after = p.value.of(owner, cf + self.cell_use[on], hf + self.host_use[on], n_left)
            self.rem[on] = after - now[owner]

    def _allowed(self, alloc: Allocation) -> Mask:
        p = self.p
        mask = p.rules.mask(p.work, alloc)
        if p.per_host <= p.budget.max_migrations:
            mask &= p.touches < p.per_host
        return mask

    def _best_target(self, i: int) -> tuple[int, float]:
        """The allowed target gaining the most for instance `i` (-1 when none): its row and the
        objective change of the whole move; ties go to the tightest fit, then the seed."""
        p = self.p
        alloc = p.work.allocations[self.ids[i]]
        if p.touches[self.owner[i]] >= p.per_host:
            return -1, -np.inf
        mask = self._allowed(alloc)
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return -1, -np.inf
        put = self.put[self.flavor_of[i], rows]
        top = put.max()
        if not np.isfinite(top):
            return -1, -np.inf
        rows = rows[put >= top - EPS]
        fit = p.work.resource_counts(alloc.flavor)[rows]
        rows = rows[fit == fit.min()]
        return int(rows[np.argmin(p.tie[rows])]), float(self.rem[i] + top)

    def _apply(self, i: int, row: int) -> None:
        p = self.p
        alloc = p.work.allocations[self.ids[i]]
        k = int(self.put_shape[self.flavor_of[i], row])
        cell_use = footprint(p.work, alloc.flavor, row, self.shapes[alloc.flavor], k)
        source = int(self.owner[i])
        p.move(alloc, row, cell_use)
        self.alive[i] = False
        p.movable[source] = [x for x in p.movable.get(source, []) if x != alloc.instance_id]
        self.moves += 1
        self._refresh(np.array([source, row], dtype=np.int64))

    def _bounds(self) -> F64:
        """Per instance: removal gain plus the best insertion its static mask allows."""
        ub = self.rem + self.best[self.group]
        ub[~self.alive] = -np.inf
        return ub

    # ------------------------------------------------------------------ rounds
    def single(self) -> bool:
        """Make the best improving single move; False when none gains."""
        ub = self._bounds()
        live = np.flatnonzero(ub > EPS)
        if live.size == 0:
            return False
        if live.size > TOP:
            live = live[np.argpartition(-ub[live], TOP)[:TOP]]
        order = live[np.lexsort((self.size[live], -ub[live]))]
        best_i, best_row, best = -1, -1, EPS
        for i in order.tolist():
            if ub[i] <= best + EPS:
                break
            row, gain = self._best_target(i)
            if row >= 0 and gain > best + EPS:
                best_i, best_row, best = i, row, gain
        if best_i < 0 and live.size < int((ub > EPS).sum()):
            return self._single_all(ub, best)
        if best_i < 0:
            return False
        self._apply(best_i, best_row)
        return True

    def _single_all(self, ub: F64, best: float) -> bool:
        """`single` past the first `TOP` bounds (rare: many bounds that do not hold)."""
        live = np.flatnonzero(ub > EPS)
        order = live[np.lexsort((self.size[live], -ub[live]))]
        best_i, best_row = -1, -1
        for i in order.tolist():
            if ub[i] <= best + EPS:
                break
            row, gain = self._best_target(i)
            if row >= 0 and gain > best + EPS:
                best_i, best_row, best = i, row, gain
        if best_i < 0:
            return False
        self._apply(best_i, best_row)
        return True

    def pair(self) -> bool:
        """Two moves off one host whose removals together open what neither opens alone: the
        best such pair by an upper bound, checked exactly by trying it (kept only if the
        objective rises; undone exactly otherwise)."""
        p = self.p
        if p.left() < 2:
            return False
        cand = self._pairs()
        if cand is None:
            return False
        a, b, ub = cand
        order = np.argsort(-ub, kind="stable")[:PAIR_TRIES]
        for k in order.tolist():
            if ub[k] <= EPS or self.stop():
                break
            i, j = int(a[k]), int(b[k])
            if not (self.alive[i] and self.alive[j]):
                continue
            source = int(self.owner[i])
            mark, n_steps = p.journal.mark(), len(p.steps)
            saved = (p.touches.copy(), p.is_source.copy(), p.is_target.copy())
            before = float(p.current().sum())
            row_i, _ = self._best_target(i)
            if row_i < 0:
                continue
            self._apply(i, row_i)
            row_j, _ = self._best_target(j)
            if row_j >= 0:
                self._apply(j, row_j)
                if float(p.current().sum()) > before + EPS:
                    return True
            # undo exactly: the journal restores the table, the search its own rows
            p.journal.rollback(mark)
            del p.steps[n_steps:]
            p.touches, p.is_source, p.is_target = saved
            for x in (i, j):
                if not self.alive[x]:
                    self.alive[x] = True
                    self.moves -= 1
            p.movable[source] = [
                self.ids[x] for x in np.flatnonzero(self.alive & (self.owner == source))
            ]
            touched = {source, row_i} | ({row_j} if row_j >= 0 else set())
            self._refresh(np.array(sorted(touched), dtype=np.int64))
        return False

    def _pairs(self) -> tuple[I64, I64, F64] | None:
        """Candidate pairs (a, b) on one host and their upper bounds."""
        p, work = self.p, self.p.work
        live = np.flatnonzero(self.alive & (p.touches[self.owner] + 2 <= p.per_host))
        if live.size < 2:
            return None
        live = live[np.lexsort((-self.size[live], self.owner[live]))]
        owner = self.owner[live]
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        ends = np.r_[starts[1:], live.size]
        a_list: list[int] = []
        b_list: list[int] = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            members = live[s : min(e, s + PAIR_INSTANCES)].tolist()
            for x, y in itertools.combinations(members, 2):
                a_list.append(x)
                b_list.append(y)
        if not a_list:
            return None
        a = np.array(a_list, dtype=np.int64)
        b = np.array(b_list, dtype=np.int64)
        host = self.owner[a]
        cf, hf = work.free_rows(host)
        n_left = work.n_instances[host].astype(np.int64) - 2
        after = p.value.of(
            host,
            cf + self.cell_use[a] + self.cell_use[b],
            hf + self.host_use[a] + self.host_use[b],
            n_left,
        )
        gain = after - p.current()[host]
        ub_single = self._bounds() - self.rem  # best insertion of each
        ub = gain + ub_single[a] + ub_single[b]
        # only pairs that beat both singles alone (else `single` would have found them)
        return a, b, np.where(np.isfinite(ub), ub, -np.inf)

    def run(self) -> int:
        """Rounds until nothing gains, the budget is spent or `should_stop()`; moves made."""
        p = self.p
        while p.left() > 0 and not self.stop():
            if self.single():
                continue
            if not self.pairs or not self.pair():
                break
        return self.moves
