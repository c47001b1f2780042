"""The search behind `preemption.plan_preemption`: for one instance, the least-damage victims.

Candidate hosts, the exact search over victim subsets, the bounded heuristic past the subset
budget, and the verification with the real scheduler, as the steps 2 and 3 of the
`berth.policy.preemption` module docstring describe them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from itertools import combinations
from math import comb

import numpy as np
import numpy.typing as npt

from berth.core.demand import Demand
from berth.core.engine import Decision, FilterScheduler
from berth.core.explain import NoValidHost
from berth.core.filters.base import Context
from berth.core.numa import vector
from berth.core.request import RequestSpec
from berth.core.resources import CELL_BASE
from berth.core.table import Allocation, HostTable
from berth.policy.restrict import only_hosts

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_CHUNK = 400_000  # values per vectorised batch of subsets (bounds memory)
_PER_HOST = 2  # fitting subsets kept per host and subset size for verification


@dataclass(frozen=True)
class Choice:
    """One instance's victims, the decision placing it once they are gone, and its measure."""

    victims: tuple[Allocation, ...]
    decision: Decision
    idle: float
    lost: float
    search: str


AgeOf = Callable[[Allocation], float]
"""Run time an eviction loses (0 when creation times are unknown)."""


class Victims:
    """Preemptible instances per host, gathered only for the hosts the search looks at.

    With the caller's index (`candidates`: host -> instance ids) nothing else is scanned; without
    it, every allocation is classified once, on first use.
    """

    def __init__(
        self,
        preemptible: Callable[[Allocation], bool],
        candidates: Mapping[str, Collection[str]] | None,
        protected: set[str],
    ) -> None:
        self.preemptible = preemptible
        self.candidates = candidates
        self.protected = protected
        self.evicted: set[str] = set()
        self._scanned: dict[str, list[str]] | None = None

    def _index(self, table: HostTable) -> Mapping[str, Collection[str]]:
        if self.candidates is not None:
            return self.candidates
        if self._scanned is None:
            self._scanned = {}
            for alloc in table.allocations.values():
                if alloc.instance_id not in self.protected and self.preemptible(alloc):
                    self._scanned.setdefault(alloc.host, []).append(alloc.instance_id)
        return self._scanned

    def any(self, table: HostTable) -> bool:
        return any(self._index(table).values())

    def hosts(self, table: HostTable) -> list[str]:
        return [h for h, ids in self._index(table).items() if ids and h in table.index]

    def on(self, table: HostTable, host: str) -> list[Allocation]:
        """The host's evictable instances, by id."""
        out = []
        for iid in sorted(self._index(table).get(host, ())):
            if iid in self.protected or iid in self.evicted:
                continue
            alloc = table.allocations.get(iid)
            if alloc is not None and alloc.host == host and self.preemptible(alloc):
                out.append(alloc)
        return out


@cache
def _subsets(m: int, k: int) -> F64:
    """All k-subsets of range(m) as rows of a 0/1 matrix (C(m, k), m), lexicographic."""
    rows = np.zeros((0, m), dtype=np.float64)
    combos = list(combinations(range(m), k))
    if combos:
        rows = np.zeros((len(combos), m), dtype=np.float64)
        for i, combo in enumerate(combos):
            rows[i, list(combo)] = 1.0
    return rows


@dataclass
class _Host:
    """One candidate host, its victims and their contributions as flat resource vectors."""

    row: int
    name: str
    cells: int  # the table's cell axis
    width: int  # columns per cell
    victims: list[Allocation]
    use: F64  # (m, X): what each victim frees, cells then host columns, flattened
    idle_w: F64  # (m,): each victim's contribution to the idle measure
    lost: F64  # (m,)
    base: F64  # (X,): free now
    base_idle: float  # the idle measure if the request were placed with no eviction
    lower_bound: int  # victims needed at least


class EvictionSearch:
    def __init__(
        self,
        scheduler: FilterScheduler,
        now: float,
        lost: AgeOf,
        exact_limit: int,
        subset_budget: int,
        max_verifications: int,
        rounds: int,
    ) -> None:
        self.scheduler = scheduler
        self.now = now
        self.lost = lost
        self.exact_limit = exact_limit
        self.subset_budget = subset_budget
        self.max_verifications = max_verifications
        self.rounds = rounds

    # ------------------------------------------------------------------ one instance
    def one(self, table: HostTable, request: RequestSpec, source: Victims) -> Choice | None:
        d = table.demand(request.flavor)
        hosts = self._candidates(table, request, d, source)
        if not hosts:
            return None
        exact = [h for h in hosts if len(h.victims) <= self.exact_limit]
        large = [h for h in hosts if len(h.victims) > self.exact_limit]
        # (k, idle, lost, row, subset index order) -> candidate
        found: dict[int, list[tuple[float, float, int, int, tuple[int, ...], str]]] = {}
        by_row = {h.row: h for h in hosts}
        top = max(len(h.victims) for h in hosts)
        verifications = 0
        greedy: set[int] = set()  # large hosts handed to the heuristic
        for k in range(1, top + 1):
            now_exact = [h for h in exact if h.lower_bound <= k]
            for h in large:
                if h.row in greedy or h.lower_bound > k or k > len(h.victims):
                    continue
                if comb(len(h.victims), k) <= self.subset_budget:
                    now_exact.append(h)  # few subsets of this size: still exact
                    continue
                # too many subsets: the heuristic's answer (never smaller than k, since no
                # smaller set fits) waits in `found` for its own size
                greedy.add(h.row)
                best = self._heuristic(d, h)
                if best is not None:
                    subset, idle, lost = best
                    found.setdefault(len(subset), []).append(
                        (idle, lost, h.row, 0, subset, "heuristic")
                    )
            cands = found.get(k, []) + self._exact_at(d, now_exact, k)
            cands.sort(key=lambda c: (round(c[0], 9), round(c[1], 6), c[2], c[3]))
            for idle, lost, row, _, subset, kind in cands:
                if verifications >= self.max_verifications:
                    return None
                verifications += 1
                host = by_row[row]
                victims = tuple(host.victims[j] for j in subset)
                decision = self._verify(table, request, host.row, victims)
                if decision is not None:
                    return Choice(victims, decision, idle, lost, kind)
        return None

    def _candidates(
        self,
        table: HostTable,
        request: RequestSpec,
        d: Demand,
        source: Victims,
    ) -> list[_Host]:
        """Hosts that pass the non-resource filters and fit once all their victims are gone."""
        ctx = Context(table, request, d, self.now)
        screen = np.ones(len(table), dtype=bool)
        for flt in self.scheduler.filters:
            if not flt.relaxable_by_eviction:
                screen &= flt.mask(ctx)
            elif (part := flt.static_part(ctx)) is not None:
                screen &= part  # what no eviction changes (the NUMA filter's page size)
        # hosts where the instance could not fit even empty are out before victims are looked at
        screen &= vector.count(d, table.cell_cap, table.host_cap, limit=1) >= 1
        names = [h for h in source.hosts(table) if screen[table.index[h]]]
        by_host = {h: source.on(table, h) for h in names}
        names = [h for h in names if by_host[h]]
        if not names:
            return []
        rows = np.array([table.index[h] for h in names], dtype=np.int64)
        width, cells = table.width, table.cell_cap.shape[1]
        cf = vector.take(table.cell_free, rows).reshape(rows.size, -1).astype(np.float64)
        hf = vector.take(table.host_free, rows).astype(np.float64)
        base = np.concatenate([cf, hf], axis=1)  # (H, X)
        flat = [a for name in names for a in by_host[name]]
        every = np.concatenate(
            [
                np.array([a.cell_use for a in flat]).reshape(len(flat), -1),
                np.array([a.host_use for a in flat]),
            ],
            axis=1,
        ).astype(np.float64)
        sizes = np.array([len(by_host[name]) for name in names])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        freed = np.add.reduceat(every, starts, axis=0)
        uses = [every[a : a + m] for a, m in zip(starts, sizes, strict=True)]
        fits_all = self._fits(d, base + freed, cells, width)
        weights, need_idle = _idle_weights(table, d, rows)
        bounds = _lower_bounds(base, every, sizes, starts, _need(d, cells, width), cells, width)
        out: list[_Host] = []
        for i in np.flatnonzero(fits_all):
            name = names[i]
            victims = by_host[name]
            use = uses[i]
            lost = np.array([self.lost(a) for a in victims], dtype=np.float64)
            out.append(
                _Host(
                    row=int(rows[i]),
                    name=name,
                    cells=cells,
                    width=width,
                    victims=victims,
                    use=use,
                    idle_w=use @ weights[i],
                    lost=lost,
                    base=base[i],
                    base_idle=float(base[i] @ weights[i] - need_idle[i]),
                    lower_bound=int(bounds[i]),
                )
            )
        return out

    @staticmethod
    def _fits(d: Demand, states: F64, cells: int, width: int) -> npt.NDArray[np.bool_]:
        """Rows of flat (cells, host) free vectors where one more instance fits (`cells`: the
        table's cell axis, two or as wide as its widest host)."""
        n = states.shape[0]
        cell = np.rint(states[:, : cells * width]).astype(np.int64).reshape(n, cells, width)
        host = np.rint(states[:, cells * width :]).astype(np.int64)
        return vector.count(d, cell, host, limit=1) >= 1

    def _exact_at(
        self, d: Demand, hosts: list[_Host], k: int
    ) -> list[tuple[float, float, int, int, tuple[int, ...], str]]:
        """The best fitting k-subsets (at most `_PER_HOST` per host), with their measure."""
        out: list[tuple[float, float, int, int, tuple[int, ...], str]] = []
        for h in hosts:
            m = len(h.victims)
            if k > m:
                continue
            subsets = _subsets(m, k)
            step = max(1, _CHUNK // h.base.size)
            for start in range(0, subsets.shape[0], step):
                chunk = subsets[start : start + step]
                states = h.base[None, :] + chunk @ h.use
                ok = np.flatnonzero(self._fits(d, states, h.cells, h.width))
                if ok.size == 0:
                    continue
                idle = np.round(h.base_idle + chunk[ok] @ h.idle_w, 9)
                lost = np.round(chunk[ok] @ h.lost, 6)
                for j in np.lexsort((ok, lost, idle))[:_PER_HOST]:
                    i = int(ok[j])
                    subset = tuple(int(x) for x in np.flatnonzero(chunk[i]))
                    out.append((float(idle[j]), float(lost[j]), h.row, start + i, subset, "exact"))
        return out

    def _heuristic(self, d: Demand, h: _Host) -> tuple[tuple[int, ...], float, float] | None:
        """Multi-start greedy, prune, then improve by exchanges (bounded).

        Starts: victims by how much of the deficit they cover (largest first); those of each
        NUMA cell first, one start per cell (a one-cell guest needs one cell freed); smallest
        first.
        Each start adds victims in its order until the instance fits, then every start is
        improved by removals and 1-for-1 / 2-for-1 exchanges while the measure improves.
        """
        width, n_cells = h.width, h.cells
        m = len(h.victims)
        need = _summed(_need(d, n_cells, width), n_cells, width)
        deficit = np.maximum(need - _summed(h.base, n_cells, width), 0.0)
        per = _summed(h.use, n_cells, width)  # (m, R)
        cover = (np.minimum(per, deficit) / np.maximum(deficit, 1.0)).sum(axis=1)
        cells = h.use[:, : n_cells * width].reshape(m, n_cells, width).sum(axis=2)  # (m, cells)

        def cell_first(c: int) -> list[int]:
            return sorted(range(m), key=lambda j: (-cells[j, c], -cover[j], h.lost[j], j))

        orders = [
            sorted(range(m), key=lambda j: (-cover[j], h.idle_w[j], h.lost[j], j)),
            *(cell_first(c) for c in range(n_cells) if c < 2 or cells[:, c].any()),
            sorted(range(m), key=lambda j: (h.idle_w[j], h.lost[j], j)),
        ]
        starts: list[frozenset[int]] = []
        for order in orders:
            prefix = np.cumsum(h.use[order], axis=0) + h.base
            ok = np.flatnonzero(self._fits(d, prefix, n_cells, width))
            if ok.size:
                starts.append(frozenset(order[: int(ok[0]) + 1]))
        if not starts:
            return None

        def key(s: Iterable[int]) -> tuple[int, float, float]:
            idx = list(s)
            return (
                len(idx),
                round(h.base_idle + float(h.idle_w[idx].sum()), 9),
                round(float(h.lost[idx].sum()), 6),
            )

        def fits_many(sets: list[frozenset[int]]) -> list[bool]:
            if not sets:
                return []
            mat = np.zeros((len(sets), m))
            for r, s in enumerate(sets):
                mat[r, list(s)] = 1.0
            states = h.base[None, :] + mat @ h.use
            return [bool(x) for x in self._fits(d, states, n_cells, width)]

        def improve(current: frozenset[int]) -> frozenset[int]:
            for _ in range(max(1, self.rounds)):
                outside = [j for j in range(m) if j not in current]
                moves: list[frozenset[int]] = [current - {v} for v in current]
                moves += [(current - {v}) | {u} for v in current for u in outside]
                moves += [
                    (current - {v, w}) | {u}
                    for v, w in combinations(sorted(current), 2)
                    for u in outside
                ]
                best = current
                best_key = key(current)
                for s, good in zip(moves, fits_many(moves), strict=True):
                    if good and key(s) < best_key:
                        best, best_key = s, key(s)
                if best == current:
                    break
                current = best
            return current

        current = min(
            (improve(s) for s in dict.fromkeys(starts)), key=lambda s: (key(s), sorted(s))
        )
        _, idle, lost = key(current)
        return tuple(sorted(current)), idle, lost

    def _verify(
        self, table: HostTable, request: RequestSpec, row: int, victims: tuple[Allocation, ...]
    ) -> Decision | None:
        trial = table.copy()
        for v in victims:
            trial.release(v.instance_id)
        sched = only_hosts(self.scheduler, len(trial), [row])
        try:
            return sched.select_destinations(trial, request, self.now)
        except NoValidHost:
            return None


def _need(d: Demand, cells: int, width: int) -> F64:
    """What one instance takes, as a flat (cells, host) vector with the cell part in cell 0.

    Only sums over cells are meaningful (the lower bound and the heuristic's deficit use it
    through `_summed`).
    """
    cell = np.zeros((cells, width), dtype=np.float64)
    cell[0] = d.total
    cell[0, CELL_BASE:] += d.pci
    return np.concatenate([cell.reshape(-1), d.host.astype(np.float64)])


def _summed(vec: F64, cells: int, width: int) -> F64:
    """Flat (cells, host) vectors -> per resource totals (cells summed) + host columns."""
    lead = vec.shape[:-1]
    per = vec[..., : cells * width].reshape(*lead, cells, width).sum(axis=-2)
    return np.concatenate([per, vec[..., cells * width :]], axis=-1)


def _lower_bounds(
    base: F64, every: F64, sizes: I64, starts: I64, need: F64, cells: int, width: int
) -> I64:
    """Per host, victims needed at least: for each resource, the largest victims first must
    cover the deficit (cells summed). Vectorised over hosts with victims padded to the most."""
    hosts, most = len(sizes), int(sizes.max(initial=0))
    per = _summed(every, cells, width)  # (victims, R)
    padded = np.zeros((hosts, max(most, 1), per.shape[1]))
    owner = np.repeat(np.arange(hosts), sizes)
    slot = np.arange(per.shape[0]) - np.repeat(starts, sizes)
    padded[owner, slot] = per
    cum = np.cumsum(-np.sort(-padded, axis=1), axis=1)  # largest first
    deficit = _summed(need, cells, width)[None, :] - _summed(base, cells, width)  # (H, R)
    reach = cum >= deficit[:, None, :]
    first = np.where(reach.any(axis=1), reach.argmax(axis=1) + 1, most + 1)  # (H, R)
    bound = np.where(deficit > 0, first, 0).max(axis=1, initial=0)
    return np.maximum(bound, 1)


def _idle_weights(table: HostTable, d: Demand, rows: I64) -> tuple[F64, F64]:
    """Per host, the weights turning a flat free vector into the idle measure, and the
    measure's value for the request's own demand (subtracted: idle is measured after placing).
    """
    width, cells = table.width, table.cell_cap.shape[1]
    cell_cap = vector.take(table.cell_cap, rows).astype(np.float64).sum(axis=1)  # (H, w)
    host_cap = vector.take(table.host_cap, rows).astype(np.float64)  # (H, HR)
    need_cells = d.total.astype(np.float64).copy()
    need_cells[CELL_BASE:] += d.pci
    cell_w = np.where(
        (need_cells > 0)[None, :] & (cell_cap > 0), 1.0 / np.maximum(cell_cap, 1.0), 0.0
    )
    host_w = np.where((d.host > 0)[None, :] & (host_cap > 0), 1.0 / np.maximum(host_cap, 1.0), 0.0)
    weights = np.concatenate(
        [np.repeat(cell_w[:, None, :], cells, axis=1).reshape(len(rows), -1), host_w], axis=1
    )
    need_idle = cell_w @ need_cells + host_w @ d.host.astype(np.float64)
    assert weights.shape[1] == cells * width + host_cap.shape[1]
    return weights, need_idle
