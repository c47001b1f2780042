"""The defragmentation heuristic: drain first, then evacuate the hosts whose instances block the
most objective per migration, each instance to the target that loses the least (docs/defrag.md).

It works on a copy of the table with exact claims (`Journal`), so every state it reasons about
is a real one; a host's moves are kept only when the objective improves, and undone exactly
otherwise. The sequential moves are then packed into waves of concurrent moves, each wave
checked with its sources still held. Hot loops are columnar: a target is chosen from per-host
arrays (loss of objective, remaining slots) kept exact by the table's derived caches.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from berth.core import preview
from berth.core.defrag.execute import apply_moves, check_plan
from berth.core.defrag.journal import Journal
from berth.core.defrag.model import Budget, Objective, Plan, Target
from berth.core.defrag.objective import (
    HostValue,
    check_target,
    measure,
)
from berth.core.defrag.rules import PlanError, TargetRules, immovable
from berth.core.defrag.search import MoveSearch
from berth.core.defrag.waves import Step, pack_waves
from berth.core.engine import FilterScheduler
from berth.core.numa import scalar
from berth.core.resources import CELL_BASE
from berth.core.table import Allocation, HostTable

__all__ = ["PlanError", "apply_moves", "check_plan", "measure", "plan_defrag"]

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

_EPS = 1e-9
PATIENCE = 8
"""`removal_order` stops after this many removals without a better gain per migration."""
PREFIX = 4
"""`estimates` also values removing a host's (or a cell's) 1..PREFIX largest instances."""
SMALL_ROWS = 16
"""Up to this many changed hosts, the cached per-host arrays are recomputed in plain Python
(`HostValue.one`, `numa.scalar`): numpy's per-call overhead dominates on a few rows."""


def _size(table: HostTable, alloc: Allocation) -> tuple[int, int]:
    spec = table.flavors[alloc.flavor]
    return (spec.vcpus, spec.memory_mb)


class _Planner:
    """The heuristic's state: a private copy of the table, the moves so far, the budget spent."""

    def __init__(
        self,
        table: HostTable,
        target: Target,
        budget: Budget,
        scheduler: FilterScheduler,
        now: float,
        seed: int,
    ) -> None:
        self.work = table.copy()
        self.target = target
        self.budget = budget
        self.value = HostValue(self.work, target, scheduler, now)
        self.drain = self.value.drain
        self.rules = TargetRules(scheduler, now, self.drain, target.keep_traits)
        self.journal = Journal(self.work)
        n = len(table)
        self.tie = np.random.default_rng(seed).permutation(n)
        self.touches = np.zeros(n, dtype=np.int64)
        self.is_source = np.zeros(n, dtype=bool)
        self.is_target = np.zeros(n, dtype=bool)
        self.steps: list[Step] = []
        self._position: dict[str, int] = {}
        self._owner = self._sizes = np.zeros(0, dtype=np.int64)
        self._cell_use = self._host_use = np.zeros((0, 0), dtype=np.int64)
        self._losses: dict[tuple[object, ...], float] = {}
        """`loss` of one host by (flavor, host, free columns, instance count): a rolled-back
        try restores hosts to states already valued."""
        self._subsets: dict[tuple[object, ...], tuple[list[str], F64]] = {}
        """`removal_order` by everything it reads: the host, its movable instances (in order),
        its free columns, instance count and per-host budget left."""
        self.exclusive = True
        """Donors and receivers apart: sources are never targets and targets never sources
        (the first pass; a second one, with the budget left, mixes them)."""
        self.per_host = budget.max_per_host if budget.max_per_host is not None else 1 << 40
        self.movable: dict[int, list[str]] = {}
        self.pinned = np.zeros(n, dtype=bool)
        """Hosts holding an instance that may not move."""
        for alloc in self.work.allocations.values():
            row = self.work.index[alloc.host]
            if immovable(self.work, alloc) is None:
                self.movable.setdefault(row, []).append(alloc.instance_id)
            else:
                self.pinned[row] = True

    # ------------------------------------------------------------------ per-host arrays
    def loss(self, flavor: str) -> F64:
        """Per host: objective lost by placing one more `flavor` there (exact, cached)."""
        work, value = self.work, self.value
        d = work.demand(flavor)

        def compute(rows: I64 | None) -> F64:
            if rows is not None and rows.size <= SMALL_ROWS:
                rd, memo = d.rows, self._losses
                out = []
                for r in rows.tolist():
                    cells, hosts = work.cell_free[r], work.host_free[r]
                    k = int(work.n_instances[r])
                    key = (flavor, r, cells.tobytes(), hosts.tobytes(), k)
                    lost = memo.get(key)
                    if lost is None:
                        cf, hf = cells.tolist(), hosts.tolist()
                        cu = scalar.place(rd, cf, work.distance.get(r))
                        after_cf = [scalar.minus(f, u) for f, u in zip(cf, cu, strict=True)]
                        after_hf = scalar.minus(hf, rd.host_use)
                        lost = value.one(r, cf, hf, k) - value.one(r, after_cf, after_hf, k + 1)
                        memo[key] = lost
                    out.append(lost)
                return np.array(out, dtype=np.float64)
            rr = np.arange(len(work)) if rows is None else rows
            cell_free, host_free = work.free_rows(rows)
            cell_use, host_use = preview.place_rows(work, d, rows, (cell_free, host_free))
            n_inst = work.n_instances[rr].astype(np.int64)
            before = value.of(rr, cell_free, host_free, n_inst)
            after = value.of(rr, cell_free - cell_use, host_free - host_use, n_inst + 1)
            return before - after

        return work.derived(("berth.defrag.loss", flavor), compute)

    def current(self) -> F64:
        work, value = self.work, self.value

        def compute(rows: I64 | None) -> F64:
            if rows is not None and rows.size <= SMALL_ROWS:
                return np.array(
                    [
                        value.one(
                            r,
                            work.cell_free[r].tolist(),
                            work.host_free[r].tolist(),
                            int(work.n_instances[r]),
                        )
                        for r in rows.tolist()
                    ],
                    dtype=np.float64,
                )
            rr = np.arange(len(work)) if rows is None else rows
            return value.rows(work, rr)

        return work.derived(("berth.defrag.value",), compute)

    def left(self) -> int:
        return self.budget.max_migrations - len(self.steps)

    # ------------------------------------------------------------------ moves
    def best_target(self, alloc: Allocation) -> int | None:
        """The allowed host losing the least objective; then the tightest fit; then the seed."""
        work = self.work
        mask = self.rules.mask(work, alloc)
        if self.per_host <= self.budget.max_migrations:  # else no host can reach it
            mask &= self.touches < self.per_host
        if self.exclusive:
            mask &= ~self.is_source
        rows = np.flatnonzero(mask)
        if rows.size == 0:
            return None
        # narrow step by step (cheaper than sorting every allowed host)
        loss = self.loss(alloc.flavor)[rows]
        rows = rows[loss <= loss.min() + _EPS]
        fit = work.resource_counts(alloc.flavor)[rows]
        rows = rows[fit == fit.min()]
        return int(rows[np.argmin(self.tie[rows])])

    def move(self, alloc: Allocation, row: int, cell_use: I64 | None = None) -> None:
        """Move `alloc` to `row`, at `cell_use` (default: the claim rule's footprint)."""
        work = self.work
        name = work.names[row]
        rd = work.demand(alloc.flavor).rows  # the claim rule on one host (= `plan_for`)
        if cell_use is None:
            cell_free = work.cell_free[row].tolist()
            cell_use = np.array(scalar.place(rd, cell_free, work.distance.get(row)), dtype=np.int64)
        host_use = np.array(rd.host_use, dtype=np.int64)
        self.journal.migrate(alloc, name, cell_use, host_use)
        self.steps.append(Step(alloc, name, cell_use, host_use))
        src = work.index[alloc.host]
        self.touches[src] += 1
        self.touches[row] += 1
        self.is_source[src] = True
        self.is_target[row] = True

    def try_moves(
        self, row: int, ids: Sequence[str], need_all: bool, at_least: float = 0.0
    ) -> tuple[bool, float]:
        """Move these instances off `row`; keep them if the objective rises by more than
        `at_least` per migration, else undo all exactly.

        Returns (kept, objective gained per migration made; 0 when nothing moved).
        """
        work = self.work
        mark = self.journal.mark()
        n_steps = len(self.steps)
        saved = (self.touches.copy(), self.is_source.copy(), self.is_target.copy())
        before: dict[int, float] = {row: float(self.current()[row])}
        self.is_source[row] = True
        order = sorted(ids, key=lambda i: _size(work, work.allocations[i]), reverse=True)
        complete = True
        for iid in order:
            if self.left() <= 0 or self.touches[row] >= self.per_host:
                complete = False
                break
            alloc = work.allocations[iid]
            dest = self.best_target(alloc)
            if dest is None:
                complete = False
                break
            before.setdefault(dest, float(self.current()[dest]))
            self.move(alloc, dest)
        gain = -sum(before.values())
        if complete or not need_all:
            rows = np.fromiter(before, dtype=np.int64)
            gain += float(self.current()[rows].sum())
        made = len(self.steps) - n_steps
        ratio = gain / made if made and (complete or not need_all) else 0.0
        if made and (complete or not need_all) and gain > _EPS and ratio >= at_least - _EPS:
            moved = {s.alloc.instance_id for s in self.steps[n_steps:]}
            self.movable[row] = [i for i in self.movable.get(row, []) if i not in moved]
            return True, ratio
        self.journal.rollback(mark)
        del self.steps[n_steps:]
        self.touches, self.is_source, self.is_target = saved
        return False, ratio

    # ------------------------------------------------------------------ phases
    def drain_hosts(self) -> None:
        """Move every movable instance off the hosts being drained, largest first."""
        work = self.work
        for host in self.target.drain:
            row = work.index[host]
            ids = sorted(
                self.movable.get(row, []),
                key=lambda i: _size(work, work.allocations[i]),
                reverse=True,
            )
            self.is_source[row] = True
            for iid in ids:
                if self.left() <= 0:
                    return
                if self.touches[row] >= self.per_host:
                    break  # this host's share of the budget is spent; the next one may move
                alloc = work.allocations[iid]
                dest = self.best_target(alloc)
                if dest is not None:
                    self.move(alloc, dest)
            self.movable.pop(row, None)

    def candidates(self) -> Mask:
        """Hosts with instances that may still move (each instance moves at most once)."""
        n = len(self.work)
        has = np.zeros(n, dtype=bool)
        has[[r for r, ids in self.movable.items() if ids]] = True
        if self.exclusive:
            has &= ~self.is_source & ~self.is_target
        return has & ~self.drain

    def empty_hosts(self) -> None:
        """Evacuate whole hosts, fewest instances first (then least used), while it pays."""
        work = self.work
        rows = np.flatnonzero(self.candidates() & ~self.pinned & ~self.is_target)
        used = numa_load(work)[rows]
        order = np.lexsort((self.tie[rows], used, work.n_instances[rows]))
        for row in rows[order]:
            if self.left() <= 0:
                break
            ids = self.movable.get(int(row), [])
            if not ids or len(ids) > self.left():
                continue
            self.try_moves(int(row), ids, need_all=True)  # kept only if it pays

    def capacity(self) -> None:
        """Lazy greedy over hosts by objective gained per migration, the least loaded first
        among equals (an estimate is refreshed when its host comes up; stale ones go back)."""
        work = self.work
        rows = np.flatnonzero(self.candidates())
        if rows.size == 0:
            return
        estimate = self.estimates(rows)
        load = numa_load(work)
        heap = [
            (-float(estimate[i]), float(load[r]), int(self.tie[r]), int(r))
            for i, r in enumerate(rows)
            if estimate[i] > _EPS
        ]
        heapq.heapify(heap)
        stale: dict[int, bool] = {}
        """Hosts already re-queued at their real ratio: the next try keeps any gain."""
        while heap and self.left() > 0:
            _, used, tie, row = heapq.heappop(heap)
            if self.exclusive and (self.is_source[row] or self.is_target[row]):
                continue
            limit = min(self.left(), int(self.per_host - self.touches[row]))
            ids, gain = self.best_subset(row, limit)
            if not ids:
                continue
            ratio = gain / len(ids)
            if heap and ratio < -heap[0][0] - _EPS:
                heapq.heappush(heap, (-ratio, used, tie, row))
                continue
            # the targets' losses are known only by trying: keep the moves if they still beat
            # the next host's estimate, else undo them and queue the host at its real ratio
            best_next = -heap[0][0] if heap and not stale.get(row) else 0.0
            kept, real = self.try_moves(row, ids, need_all=False, at_least=best_next)
            if not kept and real > _EPS:
                stale[row] = True
                heapq.heappush(heap, (-real, used, tie, row))
            elif kept and not self.exclusive and self.movable.get(row):
                heapq.heappush(heap, (-ratio, used, tie, row))  # it may pay again; re-checked

    def footprints(self, ids: list[str]) -> I64:
        """Positions of these movable instances in the footprint arrays (`_owner`, `_sizes`,
        `_cell_use`, `_host_use`), built on first use for every instance movable then.

        A movable instance never changes host or footprint: a kept move takes it off `movable`,
        a rolled-back one restores it exactly; so the arrays stay true for what is left.
        """
        if not self._position:
            work = self.work
            every = [i for r in sorted(self.movable) for i in self.movable[r]]
            allocs = [work.allocations[i] for i in every]
            self._position = {iid: k for k, iid in enumerate(every)}
            self._owner = np.array([work.index[a.host] for a in allocs], dtype=np.int64)
            size = np.array([_size(work, a) for a in allocs], dtype=np.int64).reshape(-1, 2)
            self._sizes = size[:, 0] * (1 << 32) + size[:, 1]
            # np.array over the (resource-major) per-instance arrays: much faster than np.stack
            self._cell_use = np.array([a.cell_use for a in allocs], dtype=np.int64)
            self._host_use = np.array([a.host_use for a in allocs], dtype=np.int64)
        position = self._position
        return np.array([position[i] for i in ids], dtype=np.int64)

    def estimates(self, rows: I64) -> F64:
        """Per candidate host, a cheap ordering key: the best gain per migration among moving
        its single best instance, and removing the 1..`PREFIX` largest or all of its movable
        instances (on the whole host, or on one NUMA cell: opening that cell). The exact subset
        is found when the host comes up (`best_subset`)."""
        work, value = self.work, self.value
        ids = [i for r in rows for i in self.movable[int(r)]]
        pick = self.footprints(ids)
        owner, size = self._owner[pick], self._sizes[pick]
        cell_use, host_use = self._cell_use[pick], self._host_use[pick]
        now = self.current()
        cell_free, host_free = work.free_rows(owner)
        n_inst = work.n_instances[owner].astype(np.int64)
        single = value.of(owner, cell_free + cell_use, host_free + host_use, n_inst - 1)
        single -= now[owner]
        n = len(work)
        best_single = np.full(n, -np.inf)
        np.maximum.at(best_single, owner, single)
        best = best_single[rows]
        cf, hf = work.free_rows(rows)
        left = work.n_instances[rows].astype(np.int64)
        core: Mask = np.asarray(cell_use[:, :, :CELL_BASE].any(axis=2))  # instances x cells
        groups = [np.ones(len(ids), dtype=bool)]
        alone = core.sum(axis=1) == 1  # single-cell instances, by their cell
        groups += [core[:, c] & alone for c in range(core.shape[1])]
        for members in groups:
            idx = np.flatnonzero(members)
            if idx.size == 0:
                continue
            idx = idx[np.lexsort((-size[idx], owner[idx]))]  # by host, largest first
            own = owner[idx]
            first = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
            rank = np.arange(idx.size) - np.repeat(first, np.diff(np.r_[first, idx.size]))
            count = np.bincount(own, minlength=n)[rows]
            for j in (*range(1, PREFIX + 1), None):
                take_ = idx if j is None else idx[rank < j]
                cell_sum = np.zeros((n, *cell_use.shape[1:]), dtype=np.int64)
                host_sum = np.zeros((n, host_use.shape[1]), dtype=np.int64)
                # take_ is grouped by host: per-host sums of contiguous runs (exact integers)
                at = owner[take_]
                starts = np.flatnonzero(np.r_[True, at[1:] != at[:-1]])
                cell_sum[at[starts]] = np.add.reduceat(cell_use[take_], starts, axis=0)
                host_sum[at[starts]] = np.add.reduceat(host_use[take_], starts, axis=0)
                k = count if j is None else np.minimum(count, j)
                opened = value.of(rows, cf + cell_sum[rows], hf + host_sum[rows], left - k)
                ratio = np.where(k > 0, (opened - now[rows]) / np.maximum(k, 1), -np.inf)
                best = np.maximum(best, ratio)
        return best

    def best_subset(self, row: int, limit: int) -> tuple[list[str], float]:
        """The instances of `row` whose removal gains the most objective per migration, at most
        `limit` of them (`removal_order`, remembered per state of the host: the lazy greedy
        asks again for hosts it re-queued, and a rolled-back try restores a host's state)."""
        work = self.work
        ids = self.movable.get(row, [])
        key = (
            row,
            tuple(ids),
            work.cell_free[row].tobytes(),
            work.host_free[row].tobytes(),
            int(work.n_instances[row]),
            min(len(ids), int(self.per_host - self.touches[row])),
        )
        seen = self._subsets.get(key)
        if seen is None:
            seen = self._subsets[key] = self.removal_order(row)
        order, gains = seen
        k = min(len(order), limit)
        if k == 0:
            return [], 0.0
        ratios = gains[:k] / np.arange(1, k + 1)
        j = int(np.argmax(ratios))  # the first best: fewest migrations on ties
        if gains[j] <= _EPS:
            return [], 0.0
        return order[: j + 1], float(gains[j])

    def removal_order(self, row: int) -> tuple[list[str], F64]:
        """Greedy: remove, one at a time, the instance whose removal helps most (larger first on
        ties); the order and the objective gained by each prefix. Stops `PATIENCE` removals past
        the best gain per migration, or at the per-host budget.

        One host's hypothetical states, valued in plain Python numbers (`HostValue.one`, equal
        to the vectorised `HostValue.of`); instances with the same footprint share one value.
        """
        work, value = self.work, self.value
        ids = sorted(
            self.movable.get(row, []),
            key=lambda i: _size(work, work.allocations[i]),
            reverse=True,
        )
        limit = min(len(ids), int(self.per_host - self.touches[row]))
        if limit <= 0:
            return [], np.zeros(0)
        allocs = [work.allocations[i] for i in ids]
        uses: list[tuple[list[list[int]], list[int]]] = [
            (a.cell_use.tolist(), a.host_use.tolist()) for a in allocs
        ]
        cells = value.cell_dependent  # else the cell columns need not be kept
        shape: dict[tuple[tuple[int, ...], ...], int] = {}
        kind = [  # instances of one footprint (what the value reads of it) share their values
            shape.setdefault(
                (*(tuple(c) for c in cu), tuple(hu)) if cells else (tuple(hu),), len(shape)
            )
            for cu, hu in uses
        ]
        cell_free: list[list[int]] = work.cell_free[row].tolist()
        host_free: list[int] = work.host_free[row].tolist()
        n_inst = int(work.n_instances[row])
        v0 = float(self.current()[row])
        remaining = list(range(len(ids)))
        chosen: list[int] = []
        gains: list[float] = []
        best_ratio, best_j = 0.0, 0
        for j in range(1, limit + 1):
            states: dict[int, tuple[float, list[list[int]], list[int]]] = {}
            vals: list[float] = []
            for c in remaining:
                seen = states.get(kind[c])
                if seen is None:
                    cu, hu = uses[c]
                    cf = (
                        cell_free
                        if not cells
                        else [
                            [f + u for f, u in zip(fc, uc, strict=True)]
                            for fc, uc in zip(cell_free, cu, strict=True)
                        ]
                    )
                    hf = [f + u for f, u in zip(host_free, hu, strict=True)]
                    seen = states[kind[c]] = (value.one(row, cf, hf, n_inst - j), cf, hf)
                vals.append(seen[0])
            top = max(vals) - _EPS
            best = [i for i, v in enumerate(vals) if v >= top]
            if len(best) > 1:  # no removal gains more than another: the one closest to a slot
                closer: dict[int, float] = {}
                for i in best:
                    k = kind[remaining[i]]
                    if k not in closer:
                        _, cf, hf = states[k]
                        closer[k] = value.progress_one(cf, hf)
                near = max(closer.values()) - _EPS
                best = [i for i in best if closer[kind[remaining[i]]] >= near]
            pick = remaining.pop(best[0])
            chosen.append(pick)
            gain, cell_free, host_free = states[kind[pick]]
            gains.append(gain - v0)
            if gains[-1] > _EPS and gains[-1] / j > best_ratio + _EPS:
                best_ratio, best_j = gains[-1] / j, j
            elif j - best_j >= PATIENCE:
                break  # removals this far past the best prefix rarely pay per migration
        return [ids[c] for c in chosen], np.array(gains)


def numa_load(table: HostTable) -> F64:
    """Share of a host's capacity in use, averaged over its non-empty resource columns."""
    cap = np.concatenate([table.cell_cap.reshape(len(table), -1), table.host_cap], axis=1).astype(
        np.float64
    )
    free = np.concatenate([table.cell_free.reshape(len(table), -1), table.host_free], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(cap > 0, 1.0 - free / np.maximum(cap, 1.0), np.nan)
    counted = np.maximum((cap > 0).sum(axis=1), 1)
    return np.nansum(share, axis=1) / counted


def plan_defrag(
    table: HostTable,
    target: Target,
    budget: Budget,
    *,
    scheduler: FilterScheduler,
    now: float,
    seed: int = 0,
    should_stop: Callable[[], bool] | None = None,
) -> Plan:
    """Plan live migrations towards `target` within `budget`; the table is not changed.

    Hosts in `target.drain` are emptied first (as far as the budget and the fleet allow). Then
    two plans are made and the better kept (higher objective; fewer moves on a tie): the
    host-by-host heuristic followed by the improving search (`search.MoveSearch`) with the
    budget it left, and the improving search alone. `should_stop` is polled between the
    search's rounds (a deadline injected by the caller; the core reads no clock): the plan
    made so far is returned, valid at every step. Deterministic for a given seed and the same
    answers from `should_stop`.
    """
    check_target(table, target)
    stop = should_stop or _never
    planner = _heuristic(table, target, budget, scheduler, now, seed)
    MoveSearch(planner, stop).run()
    if target.objective is not Objective.EMPTY_HOSTS and not stop():
        greedy = _Planner(table, target, budget, scheduler, now, seed)
        greedy.drain_hosts()
        MoveSearch(greedy, stop).run()
        if _better(greedy, planner):
            planner = greedy
    moves = pack_waves(table, planner.steps, budget, planner.rules)
    touched = sorted({h for m in moves for h in (m.source, m.target)})
    return Plan(
        target=target,
        budget=budget,
        moves=tuple(moves),
        before=measure(table, target, scheduler=scheduler, now=now),
        after=measure(planner.work, target, scheduler=scheduler, now=now),
        generations={h: int(table.generation[table.index[h]]) for h in touched},
    )


def _never() -> bool:
    return False


def _heuristic(
    table: HostTable,
    target: Target,
    budget: Budget,
    scheduler: FilterScheduler,
    now: float,
    seed: int,
) -> _Planner:
    """Drain, then evacuate hosts (empty-hosts) or open slots host by host (capacity)."""
    planner = _Planner(table, target, budget, scheduler, now, seed)
    planner.drain_hosts()
    if target.objective is Objective.EMPTY_HOSTS:
        planner.empty_hosts()
    elif target.flavors:
        planner.capacity()
        planner.exclusive = False
        planner.capacity()
    return planner


def _better(a: _Planner, b: _Planner) -> bool:
    """Whether plan `a` ends better than `b`: fewer instances left to drain, then a higher
    objective, then fewer moves."""
    left_a = int(a.work.n_instances[a.drain].sum())
    left_b = int(b.work.n_instances[b.drain].sum())
    if left_a != left_b:
        return left_a < left_b
    va, vb = float(a.current().sum()), float(b.current().sum())
    if abs(va - vb) > _EPS:
        return va > vb
    return len(a.steps) < len(b.steps)
