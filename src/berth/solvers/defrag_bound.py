"""An upper bound on the defragmentation objective for fleets of hundreds of hosts (HiGHS).

`defrag_exact` gives every instance one variable per target host and shape, which stops at a
few dozen hosts. This model aggregates what is interchangeable and relaxes what only a real
plan must respect, so its optimum bounds every plan within the budget and it solves (or proves
a dual bound within its time limit) on clusters of a few hundred to a thousand hosts:

* instances with the same host, footprint and flavor form a group: an integer *removed* count
  (at most the group's size) per group;
* arrivals are counted per host, flavor and legal NUMA shape (one cell either way, an even
  split, both orientations of a fixed split): integer *received* counts on the hosts some
  instance of the flavor may go to (its request-independent filters, enabled, not draining);
  per flavor, as many arrive as leave;
* per host and target flavor, integer *slot* counts per shape (as `vector.count` counts
  them) fit beside the final use, every cell and host column (one copy per target flavor);
* removals <= the budget; the objective is the weighted slots on the hosts capacity counts.

Relaxed (so only the bound can gain): the dynamic filters, anti-affinity, the instances-per-host
limit, moves per host, the order of moves (intermediate states), an instance "moving" back to
its own host, and draining first. Flavors with flexible splits or host-level PCI devices are
not modelled (`None`), nor the empty-hosts objective.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.sparse import coo_array  # type: ignore[import-untyped]

from berth.core.defrag.model import Budget, Objective, Target
from berth.core.defrag.objective import HostValue, check_target
from berth.core.defrag.rules import TargetRules, immovable
from berth.core.defrag.shapes import fixed_shapes
from berth.core.engine import FilterScheduler
from berth.core.flavors import NumaMode
from berth.core.numa import vector
from berth.core.table import HostTable
from berth.solvers._highs import dual_bound, solve_milp

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


Use = dict[tuple[int, int], dict[int, float]]
"""(cell, column) -> {variable: coefficient}; cell -1 means the host columns."""


@dataclass(frozen=True)
class DefragBound:
    bound: float | None
    """No plan within the budget ends with a higher objective (None: no bound proven)."""
    relaxed: float | None
    """The best objective the relaxation found (a bound's witness; not a plan's value)."""
    optimal: bool
    status: str
    variables: int = 0


def _slot_shapes(table: HostTable, flavor: str) -> list[I64] | None:
    d = table.demand(flavor)
    if d.pci.any() or d.mode in (NumaMode.FLEX, NumaMode.NONE):
        return None
    return fixed_shapes(d)


class _Builder:
    """The relaxed model in triplet form, built group by group."""

    def __init__(self, n_hosts: int) -> None:
        self.cols: list[float] = []  # objective per variable (maximised)
        self.hi: list[float] = []
        self.rows: list[int] = []
        self.idx: list[int] = []
        self.vals: list[float] = []
        self.row_lo: list[float] = []
        self.row_hi: list[float] = []
        self.use: list[Use] = [{} for _ in range(n_hosts)]
        """Per host: the final use's terms beyond today's (removals and arrivals)."""
        self.slots: list[list[Use]] = [[] for _ in range(n_hosts)]
        """Per host: one set of slot terms per target flavor counted there."""

    def var(self, top: float, gain: float = 0.0) -> int:
        self.cols.append(gain)
        self.hi.append(top)
        return len(self.cols) - 1

    def add(self, h: int, cell_use: I64, host_use: I64, x: int, sign: float) -> None:
        for c, col in zip(*np.nonzero(cell_use), strict=True):
            terms = self.use[h].setdefault((int(c), int(col)), {})
            terms[x] = terms.get(x, 0.0) + sign * float(cell_use[c, col])
        for col in np.flatnonzero(host_use):
            terms = self.use[h].setdefault((-1, int(col)), {})
            terms[x] = terms.get(x, 0.0) + sign * float(host_use[col])

    def row(self, terms: dict[int, float], lo: float, top: float) -> None:
        r = len(self.row_hi)
        for x, v in terms.items():
            self.rows.append(r)
            self.idx.append(x)
            self.vals.append(v)
        self.row_lo.append(lo)
        self.row_hi.append(top)

    def moves(
        self, table: HostTable, groups: dict[tuple[int, str, bytes, bytes], int], budget: Budget
    ) -> dict[str, dict[int, float]]:
        """Removed counts per group, within the budget; per flavor, their (negative) terms."""
        removed: dict[str, dict[int, float]] = {}
        budget_terms: dict[int, float] = {}
        shape = table.cell_free.shape[1:]
        for (h, flavor, cu, hu), count in groups.items():
            x = self.var(float(count))
            cells = np.frombuffer(cu, dtype=np.int64).reshape(shape)
            self.add(h, cells, np.frombuffer(hu, dtype=np.int64), x, -1.0)
            removed.setdefault(flavor, {})[x] = -1.0
            budget_terms[x] = 1.0
        self.row(budget_terms, -np.inf, float(budget.max_migrations))
        return removed

    def arrivals(
        self, table: HostTable, flavor: str, mask: npt.NDArray[np.bool_], leaving: dict[int, float]
    ) -> None:
        """Received counts per allowed host and shape; as many arrive as leave."""
        d = table.demand(flavor)
        fits_empty = vector.count(d, table.cell_cap, table.host_cap, limit=1) >= 1
        terms = dict(leaving)
        for h in np.flatnonzero(mask & fits_empty).tolist():
            for shape in _slot_shapes(table, flavor) or []:
                x = self.var(float(1 << 20))
                self.add(h, shape, d.host, x, 1.0)
                terms[x] = 1.0
        self.row(terms, 0.0, 0.0)

    def slot_vars(self, table: HostTable, value: HostValue) -> None:
        """Per target flavor and host capacity counts it on, weighted slot counts per shape."""
        for f, flavor in enumerate(value.flavors):
            d = table.demand(flavor)
            tops = vector.count(d, table.cell_cap, table.host_cap)
            for h in np.flatnonzero(value.eligible[f] & (tops >= 1)).tolist():
                mine: Use = {}
                for shape in _slot_shapes(table, flavor) or []:
                    x = self.var(float(tops[h]), value.weights[f])
                    for c, col in zip(*np.nonzero(shape), strict=True):
                        mine.setdefault((int(c), int(col)), {})[x] = float(shape[c, col])
                    for col in np.flatnonzero(d.host):
                        mine.setdefault((-1, int(col)), {})[x] = float(d.host[col])
                self.slots[h].append(mine)

    def capacity_rows(self, table: HostTable) -> None:
        """Per host and target flavor: final use plus slots fit every cell and host column."""
        for h in range(len(table)):
            cell_free, host_free = table.cell_free[h], table.host_free[h]
            for extra in self.slots[h] or [{}]:
                for key in sorted(set(self.use[h]) | set(extra)):
                    terms = dict(self.use[h].get(key, {}))
                    for x, v in extra.get(key, {}).items():
                        terms[x] = terms.get(x, 0.0) + v
                    c, col = key
                    free = host_free[col] if c < 0 else cell_free[c, col]
                    self.row(terms, -np.inf, float(free))


def defrag_bound(
    table: HostTable,
    target: Target,
    budget: Budget,
    *,
    scheduler: FilterScheduler,
    now: float,
    time_limit: float = 30.0,
) -> DefragBound | None:
    """The relaxed model's optimum (or HiGHS's dual bound at the time limit); None when the
    target or a movable flavor is outside what the model covers (module docstring)."""
    check_target(table, target)
    if target.objective is Objective.EMPTY_HOSTS or table.cell_cap.shape[1] != 2:
        return None  # its shapes are two-cell ones (`fixed_shapes`): on wider hosts, no bound
    value = HostValue(table, target, scheduler, now)
    rules = TargetRules(scheduler, now, value.drain, target.keep_traits)
    groups: dict[tuple[int, str, bytes, bytes], int] = {}
    allowed: dict[str, npt.NDArray[np.bool_]] = {}
    for alloc in table.allocations.values():
        if immovable(table, alloc) is not None:
            continue
        h = table.index[alloc.host]
        key = (h, alloc.flavor, alloc.cell_use.tobytes(), alloc.host_use.tobytes())
        groups[key] = groups.get(key, 0) + 1
        mask = rules.static_mask(table, alloc)
        allowed[alloc.flavor] = allowed.get(alloc.flavor, mask) | mask
    if any(_slot_shapes(table, f) is None for f in [*allowed, *value.flavors]):
        return None
    model = _Builder(len(table))
    removed = model.moves(table, groups, budget)
    for flavor, mask in allowed.items():
        model.arrivals(table, flavor, mask, removed.get(flavor, {}))
    model.slot_vars(table, value)
    model.capacity_rows(table)
    m = model
    return _solve(m.cols, m.hi, m.rows, m.idx, m.vals, m.row_lo, m.row_hi, time_limit)


def _solve(
    cols: list[float],
    hi: list[float],
    rows: list[int],
    idx: list[int],
    vals: list[float],
    row_lo: list[float],
    row_hi: list[float],
    time_limit: float,
) -> DefragBound:
    a = coo_array((vals, (rows, idx)), shape=(len(row_hi), len(cols))).tocsr()
    cost = -np.asarray(cols, dtype=np.float64)
    res = solve_milp(cost, a, row_lo, row_hi, np.zeros(len(cols)), hi, time_limit)
    optimal = res.status == 0
    relaxed = None if res.x is None else float(-res.fun)
    if optimal and relaxed is not None:
        bound: float | None = relaxed
    else:
        dual = dual_bound(res)
        bound = None if dual is None else -dual
    return DefragBound(
        bound=None if bound is None else round(bound, 6),
        relaxed=relaxed,
        optimal=optimal,
        status=str(res.message),
        variables=len(cols),
    )
