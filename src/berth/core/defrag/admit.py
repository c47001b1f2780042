"""Admission by migration: make room for one request that fits nowhere by moving a few instances.

When a request fails on every host, the free space is often there in total but split across
hosts (the 360 scheduler's own design notes name "resource consolidation" as the cure, seed
000 §future work). Instead of rejecting the request (or evicting preemptible instances), Berth
may migrate at most `max_migrations` instances off one host so that the request fits there.

The search is narrow and exact:

1. Hosts that pass the request's non-resource filters (zone, traits, groups, ...) and miss only
   resources, ranked by how little they miss (the shortfall per resource column, as a share of
   the host's capacity); the `max_hosts` closest are tried.
2. On each, single moves first: the smallest instance whose footprint covers the shortfall, to
   the host the migration rules allow (`TargetRules`: the scheduler's filters for that instance,
   same zone, not the source, kept pool traits) that it fits tightest; then, with a budget of 2
   or more, the largest instances one after another.
3. Every candidate is applied to the table through a `Journal`, the request is checked with the
   scheduler's own filters on the tentative state (NUMA-exact), and everything is rolled back.

The table is never changed: the caller applies `Admission.moves` (`apply_moves`) and then places
the request (the host in `Admission.host` is then the only new fit).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core.defrag.journal import Journal
from berth.core.defrag.model import Move
from berth.core.defrag.rules import TargetRules, immovable
from berth.core.engine import FilterScheduler
from berth.core.filters.base import Context
from berth.core.flavors import NumaMode
from berth.core.request import RequestSpec
from berth.core.resources import CELL_BASE
from berth.core.table import Allocation, HostTable

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]


MAX_ADMISSION = 4
"""Most live migrations one admission may plan (the simulator, the CLI and the service)."""


@dataclass(frozen=True)
class Admission:
    """Moves to apply (in order) after which the request fits on `host`."""

    host: str
    moves: tuple[Move, ...]


def plan_admission(
    table: HostTable,
    request: RequestSpec,
    *,
    scheduler: FilterScheduler,
    now: float,
    max_migrations: int = 1,
    max_hosts: int = 8,
    keep_traits: Iterable[str] = (),
    hosted: Mapping[str, Collection[str]] | None = None,
) -> Admission | None:
    """The fewest moves (at most `max_migrations`) that let `request` (one instance) fit on one
    host, or None. `hosted` (host -> instance ids) saves a pass over every allocation. The table
    ends as it was (allocations, free columns, generations; only the iteration order of
    `table.allocations` may change)."""
    if max_migrations < 1 or request.num_instances != 1:
        return None
    scope = fitting(table, request, scheduler, now, resources=False)
    need_cells, need_host = _need(table, request.flavor)
    cell_cap = table.cell_cap.sum(axis=1)  # (hosts, columns): both cells together
    could = (need_cells <= cell_cap).all(axis=1)
    could &= (need_host <= table.host_cap).all(axis=1)  # when empty: else no move can help
    candidates = np.flatnonzero(scope & could & (table.resource_counts(request.flavor) < 1))
    if candidates.size == 0:
        return None
    short = _shortfall(table, need_cells, need_host, cell_cap)[candidates]
    rows: list[int] = candidates[np.lexsort((candidates, short))[:max_hosts]].tolist()
    index = hosted if hosted is not None else _by_host(table)
    need = need_cells.tolist() + need_host.tolist()
    search = _Search(table, request, scheduler, now, keep_traits, need)
    for budget in range(1, max_migrations + 1):
        for row in rows:
            moves = search.host(row, index.get(table.names[row], ()), budget)
            if moves is not None:
                return Admission(host=table.names[row], moves=moves)
    return None


def fitting(
    table: HostTable,
    request: RequestSpec,
    scheduler: FilterScheduler,
    now: float,
    *,
    resources: bool = True,
) -> Mask:
    """Hosts that pass every one of the scheduler's filters for `request` now; with
    `resources=False` only those a NUMA-exact count does not imply (zone, traits, groups, ...),
    and the huge-page size: where the request could go if room were made."""
    demand = table.demand(request.flavor)
    ctx = Context(table, request, demand, now)
    mask = table.enabled.copy()
    if not resources:
        mask &= table.page_size_ok(demand.spec)
    for flt in scheduler.filters:
        if resources or not flt.implied_by_count:
            mask &= flt.mask(ctx)
    return mask


def _need(table: HostTable, flavor: str) -> tuple[I64, I64]:
    """What one instance of `flavor` takes: both cells' columns together, and host columns."""
    d = table.demand(flavor)
    cells = d.total.copy()
    cells[CELL_BASE:] += d.pci
    if d.mode == NumaMode.NONE:  # a floating guest takes host columns (and devices) only
        cells[:CELL_BASE] = 0
    return cells, d.host


def _shortfall(table: HostTable, need_cells: I64, need_host: I64, cell_cap: I64) -> F64:
    """Per host: what a request needing (`need_cells`, `need_host`) misses, summed over resource
    columns as shares of capacity (0 = enough in total, only the NUMA split is wrong)."""
    cell_free = table.cell_free.sum(axis=1)  # (hosts, columns): both cells together
    miss = np.maximum(need_cells - cell_free, 0) / np.maximum(cell_cap, 1)
    host_miss = np.maximum(need_host - table.host_free, 0) / np.maximum(table.host_cap, 1)
    out: F64 = miss.sum(axis=1) + host_miss.sum(axis=1)
    return out


def _by_host(table: HostTable) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for alloc in table.allocations.values():
        out.setdefault(alloc.host, []).append(alloc.instance_id)
    return out


class _Search:
    """One admission search: per-flavor sizes and per-shape destinations, computed once."""

    def __init__(
        self,
        table: HostTable,
        request: RequestSpec,
        scheduler: FilterScheduler,
        now: float,
        keep_traits: Iterable[str],
        need: list[int],
    ) -> None:
        self.table = table
        self.request = request
        self.scheduler = scheduler
        self.now = now
        self.rules = TargetRules(
            scheduler, now, np.zeros(len(table), dtype=bool), tuple(keep_traits)
        )
        self.need = need
        """What the request takes: cell columns of both cells, then host columns."""
        self._sizes: dict[str, list[int]] = {}
        self._allowed: dict[Hashable, I64 | None] = {}

    def size(self, flavor: str) -> list[int]:
        """What one instance of `flavor` frees: cell columns of both cells, then host columns
        (the same layout as `need`)."""
        got = self._sizes.get(flavor)
        if got is None:
            cells, host = _need(self.table, flavor)
            got = self._sizes[flavor] = cells.tolist() + host.tolist()
        return got

    def host(self, row: int, ids: Collection[str], budget: int) -> tuple[Move, ...] | None:
        table = self.table
        free = table.cell_free[row].sum(axis=0).tolist() + table.host_free[row].tolist()
        cap = table.cell_cap[row].sum(axis=0).tolist() + table.host_cap[row].tolist()
        miss = [(c, n - f) for c, (n, f) in enumerate(zip(self.need, free, strict=True)) if n > f]
        movable: list[tuple[float, str, Allocation]] = []
        for iid in ids:
            alloc = table.allocations.get(iid)
            if alloc is None or immovable(table, alloc) is not None:
                continue
            size = self.size(alloc.flavor)
            share = sum(v / c for v, c in zip(size, cap, strict=True) if v and c)
            movable.append((share, iid, alloc))
        if not movable:
            return None
        movable.sort(key=lambda m: (m[0], m[1]))
        if budget == 1:
            tried: set[tuple[str, bytes, str | None, str]] = set()
            for _, _, alloc in movable:
                size = self.size(alloc.flavor)
                shape = (
                    alloc.flavor,
                    alloc.cell_use.tobytes(),
                    alloc.server_group,
                    alloc.project,
                )
                if shape in tried or any(size[c] < gap for c, gap in miss):
                    continue
                tried.add(shape)  # same flavor, cells, group, project: same outcome
                moves = self.attempt(row, [alloc])
                if moves is not None:
                    return moves
            return None
        # several moves: the largest instances first, as few as the budget allows
        return self.attempt(row, [m[2] for m in reversed(movable[-budget:])])

    def destination(self, alloc: Allocation, source: int) -> int | None:
        """Where the instance may go: the allowed host it fits tightest, then the lowest row."""
        table = self.table
        key = (
            alloc.flavor,
            alloc.server_group,
            alloc.project,
            int(table.zone[source]),
            table.trait_bits[source].tobytes() if self.rules.keep_traits else b"",
        )
        if key not in self._allowed:
            mask = self.rules.mask(table, alloc, exclude_source=False)
            self._allowed[key] = np.flatnonzero(mask) if mask.any() else None
        allowed = self._allowed[key]
        if allowed is None:
            return None
        allowed = allowed[allowed != source]
        if allowed.size == 0:
            return None
        fit = table.resource_counts(alloc.flavor)[allowed]
        return int(allowed[int(np.argmin(fit))])

    def attempt(self, row: int, allocs: list[Allocation]) -> tuple[Move, ...] | None:
        """Move `allocs` off `row` one by one until the request fits there; the moves made, or
        None. The table is restored either way."""
        table = self.table
        journal = Journal(table)
        moves: list[Move] = []
        try:
            for alloc in allocs:
                dest = self.destination(alloc, row) if not moves else self._fresh(alloc, row)
                if dest is None:
                    return None
                cell_use, host_use = table.plan_for(alloc.flavor, dest)
                target = table.names[dest]
                moves.append(
                    Move(
                        step=len(moves),
                        wave=len(moves),
                        instance_id=alloc.instance_id,
                        flavor=alloc.flavor,
                        source=alloc.host,
                        target=target,
                        cell_use=tuple(tuple(int(x) for x in c) for c in cell_use),
                        host_use=tuple(int(x) for x in host_use),
                    )
                )
                journal.migrate(alloc, target, cell_use, host_use)
                if self.fits(row):
                    return tuple(moves)
            return None
        finally:
            journal.rollback()

    def _fresh(self, alloc: Allocation, source: int) -> int | None:
        """`destination` on a table already changed by earlier moves (not cached)."""
        allowed = np.flatnonzero(self.rules.mask(self.table, alloc))
        if allowed.size == 0:
            return None
        fit = self.table.resource_counts(alloc.flavor)[allowed]
        return int(allowed[int(np.argmin(fit))])

    def fits(self, row: int) -> bool:
        """The scheduler's own filters pass `row` for the request on the table as it is now."""
        return bool(fitting(self.table, self.request, self.scheduler, self.now)[row])
