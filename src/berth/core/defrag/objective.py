"""The planner's objective, host by host, and the before/after figures of a plan.

CAPACITY: sum over the target flavors of weight x the number of instances the scheduler would
still place on the host (`FilterScheduler.capacity` semantics: NUMA-exact count, zero on hosts a
request-independent filter rejects, capped by the instances-per-host limit). EMPTY_HOSTS: 1 for
an empty host. Hosts being drained are worth nothing (they are leaving). Both are sums of
per-host values, so a move changes the objective only on its source and target.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.defrag.model import Figures, Objective, Target
from berth.core.demand import Demand
from berth.core.engine import FilterScheduler
from berth.core.errors import SpecError
from berth.core.filters.base import Context
from berth.core.flavors import NumaMode
from berth.core.fragmentation import eligible_hosts, fragmentation_rate
from berth.core.numa import scalar, vector
from berth.core.numa.rule import BIG
from berth.core.request import RequestSpec
from berth.core.resources import CELL_BASE
from berth.core.table import HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def check_target(table: HostTable, target: Target) -> None:
    """Errors naming the field for flavors or hosts the fleet does not have."""
    for i, name in enumerate(target.flavors):
        if name not in table.flavors:
            raise SpecError(f"target.flavors[{i}]: unknown flavor {name!r}")
    for i, name in enumerate(target.drain):
        if name not in table.index:
            raise SpecError(f"target.drain[{i}]: unknown host {name!r}")


def drain_mask(table: HostTable, drain: tuple[str, ...] | frozenset[str]) -> Mask:
    out = np.zeros(len(table), dtype=bool)
    out[[table.index[h] for h in drain]] = True
    return out


def capacity_eligible(
    scheduler: FilterScheduler, table: HostTable, flavor: str, now: float
) -> Mask:
    """Hosts where `scheduler.capacity` may count `flavor` at all (request-independent filters)."""
    return scheduler.capacity_eligible(table, flavor, now)


def active_hosts(scheduler: FilterScheduler, table: HostTable, now: float) -> Mask:
    """Hosts that the scheduler's request-independent host-state filters accept (enabled, up)."""
    out = table.enabled.copy()
    if not table.flavors:
        return out
    flavor = next(iter(table.flavors))
    ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), now)
    for flt in scheduler.filters:
        if flt.kind == "host_state" and flt.static:
            out &= flt.mask(ctx)
    return out


def instance_limit(scheduler: FilterScheduler) -> int | None:
    """The tightest per-host instance limit the scheduler's filters declare (None: none)."""
    limits = [n for f in scheduler.filters if (n := f.per_host_limit()) is not None]
    return min(limits) if limits else None


class HostValue:
    """The objective's value of hosts, for the table's rows or for hypothetical free columns."""

    def __init__(
        self, table: HostTable, target: Target, scheduler: FilterScheduler, now: float
    ) -> None:
        self.objective = target.objective
        self.flavors = list(target.flavors) if target.objective is not Objective.EMPTY_HOSTS else []
        weights = target.weights or tuple(1.0 for _ in target.flavors)
        self.weights = list(weights) if self.flavors else []
        self.drain = drain_mask(table, target.drain)
        self.counted = active_hosts(scheduler, table, now) & ~self.drain
        """Hosts whose emptiness counts (EMPTY_HOSTS): active and not being drained."""
        self.eligible = [
            capacity_eligible(scheduler, table, f, now) & ~self.drain for f in self.flavors
        ]
        self.limit = instance_limit(scheduler)
        self.demands = [table.demand(f) for f in self.flavors]
        self._counted_list: list[bool] = self.counted.tolist()
        self._terms = [
            (
                weight,
                eligible.tolist(),
                d.rows.host,
                d.rows.pci,
                d.rows if d.mode != NumaMode.NONE else None,
            )
            for d, weight, eligible in zip(self.demands, self.weights, self.eligible, strict=True)
        ]
        """Per flavor, what `one` reads: weight, eligible hosts, host columns, host-level PCI,
        and the `RowDemand` when the cells count (NUMA modes other than NONE)."""
        self._progress = [_progress_terms(d) for d in self.demands]
        self.cell_dependent = any(d.mode != NumaMode.NONE or d.pci.any() for d in self.demands)
        """Whether values (and `progress`) read the cell columns at all; the EMPTY_HOSTS value
        and floating flavors without PCI devices read only host columns and instance counts."""

    def of(self, rows: I64, cell_free: I64, host_free: I64, n_instances: I64) -> F64:
        """Values of `rows` if they had these free columns and instance counts."""
        if self.objective is Objective.EMPTY_HOSTS:
            return ((n_instances == 0) & self.counted[rows]).astype(np.float64)
        out = np.zeros(rows.size, dtype=np.float64)
        for d, weight, eligible in zip(self.demands, self.weights, self.eligible, strict=True):
            counts = vector.count(d, cell_free, host_free)
            if self.limit is not None:
                counts = np.minimum(counts, self.limit - n_instances)
            out += weight * np.where(eligible[rows], np.maximum(counts, 0), 0)
        return out

    def one(
        self, row: int, cell_free: scalar.Cells, host_free: list[int], n_instances: int
    ) -> float:
        """`of` for one host, in plain Python numbers (cells as `numa.scalar` takes them).

        Why: the planner values many hypothetical states of a single host (`removal_order`),
        where numpy's per-call overhead dominates. Same operations in the same order on IEEE
        doubles, so the result equals `of` bit for bit (tests/core/test_defrag_rows.py).
        """
        if self.objective is Objective.EMPTY_HOSTS:
            return 1.0 if n_instances == 0 and self._counted_list[row] else 0.0
        out = 0.0
        limit = self.limit
        for weight, eligible, host_cols, pci_cols, rd in self._terms:
            if not eligible[row]:
                continue  # an ineligible host adds 0.0
            c = BIG  # scalar.count, inlined: host columns, host-level PCI, then the cells
            for col, v in host_cols:
                q = host_free[col] // v
                if q < c:
                    c = q
            for col, v in pci_cols:
                q = (
                    cell_free[0][col] + cell_free[1][col]
                    if len(cell_free) == 2
                    else sum(cell[col] for cell in cell_free)
                ) // v
                if q < c:
                    c = q
            if rd is not None:
                q = scalar.cell_count(rd, cell_free)
                if q < c:
                    c = q
            if limit is not None and limit - n_instances < c:
                c = limit - n_instances
            if c > 0:
                out += weight * c
        return out

    def progress_one(self, cell_free: scalar.Cells, host_free: list[int]) -> float:
        """`progress` for one host, in plain Python numbers (equal bit for bit: numpy's
        int64 / float64 is this IEEE division, min and max pick the same double)."""
        out = 0.0
        for (mode, cols), weight in zip(self._progress, self.weights, strict=True):
            if mode == NumaMode.NONE:
                frac = BIG_F
                for col, need in cols:
                    x = host_free[col] / need
                    if x < frac:
                        frac = x
            else:
                per_cell = []
                for free in cell_free:
                    m = BIG_F
                    for col, need in cols:
                        x = free[col] / need
                        if x < m:
                            m = x
                    per_cell.append(m)
                frac = max(per_cell) if mode == NumaMode.SINGLE else min(per_cell)
            out += weight * frac
        return out

    def progress(self, cell_free: I64, host_free: I64) -> F64:
        """A smooth tie-breaker for `of`: the target flavors' slots counted without rounding
        down (per cell for guests with a NUMA topology, per host otherwise), so that of two
        removals that open no slot yet, the one that brings a slot closer counts more."""
        out = np.zeros(cell_free.shape[0], dtype=np.float64)
        for d, weight in zip(self.demands, self.weights, strict=True):
            if d.mode == NumaMode.NONE:
                need = d.host.astype(np.float64)
                cols = np.flatnonzero(need)
                frac = (host_free[:, cols] / need[cols]).min(axis=1)
            else:
                need = d.total[:CELL_BASE].astype(np.float64) / (
                    1 if d.mode == NumaMode.SINGLE else 2
                )
                cols = np.flatnonzero(need)
                per_cell = (cell_free[:, :, cols] / need[cols]).min(axis=2)
                frac = per_cell.max(axis=1) if d.mode == NumaMode.SINGLE else per_cell.min(axis=1)
            out += weight * frac
        return out

    def rows(self, table: HostTable, rows: I64) -> F64:
        """Current values of some rows."""
        cell_free, host_free = table.free_rows(rows)
        return self.of(rows, cell_free, host_free, table.n_instances[rows].astype(np.int64))

    def total(self, table: HostTable) -> float:
        return float(self.rows(table, np.arange(len(table))).sum())


BIG_F = float("inf")
"""The start of a minimum over a flavor's columns (each flavor asks for at least one)."""


def _progress_terms(d: Demand) -> tuple[NumaMode, list[tuple[int, float]]]:
    """`HostValue.progress`'s divisors for one flavor: (mode, [(column, need)])."""
    if d.mode == NumaMode.NONE:
        need = d.host.astype(np.float64)
    else:
        need = d.total[:CELL_BASE].astype(np.float64) / (1 if d.mode == NumaMode.SINGLE else 2)
    return d.mode, [(int(c), float(need[c])) for c in np.flatnonzero(need)]


def measure(table: HostTable, target: Target, *, scheduler: FilterScheduler, now: float) -> Figures:
    """Capacity and fragmentation of each target flavor, empty hosts, instances left to drain.

    Capacity is the sum of `scheduler.capacity`; fragmentation is `core.fragmentation`'s rate
    over the same hosts (those where capacity may count the flavor: enabled, up, passing the
    request-independent filters); empty hosts count only active ones. All three leave out the
    hosts being drained (they are leaving the fleet).
    """
    check_target(table, target)
    drain = drain_mask(table, target.drain)
    capacity: dict[str, int] = {}
    fragmentation: dict[str, float] = {}
    for flavor in target.flavors:
        counts = scheduler.capacity(table, flavor, now)
        capacity[flavor] = int(counts[~drain].sum())
        eligible = capacity_eligible(scheduler, table, flavor, now)
        eligible &= eligible_hosts(table, flavor, now) & ~drain
        fragmentation[flavor] = fragmentation_rate(table, flavor, eligible)
    empty = int(((table.n_instances == 0) & ~drain & active_hosts(scheduler, table, now)).sum())
    left = int(table.n_instances[drain].sum())
    return Figures(
        capacity=capacity, fragmentation=fragmentation, empty_hosts=empty, drained_left=left
    )
