"""The best final state reachable within a migration budget, as a MIP (HiGHS via SciPy).

For small fleets this measures the heuristic planner (`berth.core.defrag.plan_defrag`): the
optimum is an upper bound on the objective of any plan within the same budget, so
``gap = (exact - heuristic) / exact`` says how much the heuristic leaves on the table.

Model (docs/defrag.md has it in full):

* every movable instance takes exactly one *option*: stay at home with its current footprint,
  or move to an allowed host (the scheduler's request-independent filters, same zone, enabled,
  not draining) with one of its flavor's legal NUMA shapes: a cell for single-cell guests, both
  orientations of an uneven split, integer per-cell amounts (above the minimums) for flexible
  splits, and an integer split of host-level PCI devices between the cells;
* instances that may not move (not migratable, affinity members) are fixed load;
* per host and cell column the final use fits the capacity; so do the host columns;
* for each target flavor, integer *slot* variables per host (per cell or per orientation,
  as `vector.count` counts them) must fit in the final free space: one copy of the capacity
  constraints per flavor, since each flavor's count uses all the free room on its own;
* moved instances <= max_migrations; per host, moves out + moves in <= max_per_host;
  anti-affinity members per host <= max_server_per_host; the instances-per-host limit caps
  instances and slots.

Intermediate states (waves) are not modelled: only the final state counts, which can only
raise the optimum, so it stays an upper bound for plans. Instances on hosts being drained earn
a large reward for leaving, so the optimum drains first, as the heuristic does.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.sparse import coo_array  # type: ignore[import-untyped]

from berth.core.defrag.model import Budget, Objective, Plan, Target
from berth.core.defrag.objective import (
    HostValue,
    capacity_eligible,
    check_target,
    drain_mask,
    instance_limit,
)
from berth.core.defrag.rules import TargetRules, immovable
from berth.core.demand import Demand
from berth.core.engine import FilterScheduler
from berth.core.flavors import NumaMode
from berth.core.model import GroupPolicy
from berth.core.numa import vector
from berth.core.resources import CELL_BASE, CELLS, HOST_RESOURCES
from berth.core.table import Allocation, HostTable
from berth.solvers import defrag_cells
from berth.solvers._highs import dual_bound, solve_milp
from berth.solvers._mip import Model as _Model
from berth.solvers._mip import Use
from berth.solvers._mip import add as _add

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ExactResult:
    value: float
    """Objective of the best final state found (weighted capacity, or empty hosts)."""
    bound: float | None
    """Upper bound on the objective within the budget (= value when `optimal`; None when the
    solver stopped without one)."""
    optimal: bool
    moved: int
    placement: dict[str, str] = field(default_factory=dict)
    """Final host of every instance the optimum moves."""
    drained: int = 0
    """Instances the optimum moves off hosts being drained."""
    status: str = ""


def heuristic_gap(exact: ExactResult, heuristic: float) -> float | None:
    """(bound - heuristic) / bound: the share of the best objective the heuristic may miss
    (the true gap when the optimum was proven; None without a bound)."""
    if exact.bound is None:
        return None
    if exact.bound <= 0:
        return 0.0
    return max(0.0, (exact.bound - heuristic) / exact.bound)


# ---------------------------------------------------------------------------- model building


def _split(model: _Model, use: Use, x: int, col: int, total: int, least: int) -> None:
    """`total` of column `col` split between the cells of x's host, at least `least` each."""
    s = model.var(hi=float(total - least))  # the part on cell 0; bounds tied to x below
    model.row({s: 1.0, x: -float(total - least)}, -np.inf, 0.0)
    model.row({s: 1.0, x: -float(least)}, 0.0, np.inf)
    _add(use, 0, col, s, 1.0)
    _add(use, 1, col, s, -1.0)
    _add(use, 1, col, x, float(total))


def _options(model: _Model, d: Demand, use: Use, n_cells: int) -> list[int]:
    """Variables for one instance of `d` placed on one host, one per NUMA shape; their
    footprints go to `use`. Host-level PCI devices get an integer split between the cells."""
    xs: list[int] = []
    core = slice(0, CELL_BASE)
    mode = d.mode
    if mode == NumaMode.SINGLE:
        for c in range(n_cells):
            x = model.var(1.0)
            for col in np.flatnonzero(d.cells[0]):
                _add(use, c, int(col), x, float(d.cells[0, col]))
            xs.append(x)
    elif mode == NumaMode.EVEN or (mode == NumaMode.FIXED and n_cells == 2):
        shapes = [(0, 1)] if mode == NumaMode.EVEN else [(0, 1), (1, 0)]
        for first, second in shapes:
            x = model.var(1.0)
            for c, g in ((0, first), (1, second)):
                for col in np.flatnonzero(d.cells[g]):
                    _add(use, c, int(col), x, float(d.cells[g, col]))
            xs.append(x)
    elif mode == NumaMode.FLEX:
        x = model.var(1.0)
        for col in np.flatnonzero(d.total[core]):
            _split(model, use, x, int(col), int(d.total[col]), int(d.cells[0, col]))
        xs.append(x)
    elif mode == NumaMode.NONE:
        xs.append(model.var(1.0))
    for x in xs:
        for col in np.flatnonzero(d.host):
            _add(use, -1, int(col), x, float(d.host[col]))
        for p in np.flatnonzero(d.pci):
            _split(model, use, x, CELL_BASE + int(p), int(d.pci[p]), 0)
    return xs


def _home(model: _Model, alloc: Allocation, use: Use) -> int:
    """Staying put: the instance's current footprint, unchanged."""
    x = model.var(1.0)
    for c in range(alloc.cell_use.shape[0]):
        for col in np.flatnonzero(alloc.cell_use[c]):
            _add(use, c, int(col), x, float(alloc.cell_use[c, col]))
    for col in np.flatnonzero(alloc.host_use):
        _add(use, -1, int(col), x, float(alloc.host_use[col]))
    return x


def _slots(
    model: _Model, d: Demand, weight: float, n_cells: int, top: float
) -> tuple[Use, list[int]]:
    """Slot variables counting how many more `d` fit, as `vector.count` counts them."""
    use: Use = {}
    xs: list[int] = []
    mode = d.mode
    if mode == NumaMode.SINGLE:
        for c in range(n_cells):
            x = model.var(top, cost=weight)
            for col in np.flatnonzero(d.cells[0]):
                _add(use, c, int(col), x, float(d.cells[0, col]))
            xs.append(x)
    elif mode in (NumaMode.EVEN, NumaMode.FIXED):
        shapes = [(0, 1)] if mode == NumaMode.EVEN else [(0, 1), (1, 0)]
        for first, second in shapes if n_cells == 2 else []:
            x = model.var(top, cost=weight)
            for c, g in ((0, first), (1, second)):
                for col in np.flatnonzero(d.cells[g]):
                    _add(use, c, int(col), x, float(d.cells[g, col]))
            xs.append(x)
    else:  # NONE, or FLEX (its cell rules are added by the caller on the free space)
        xs.append(model.var(top, cost=weight))
    for x in xs:
        for col in np.flatnonzero(d.host):
            _add(use, -1, int(col), x, float(d.host[col]))
    return use, xs


def exact_optimum(
    table: HostTable,
    target: Target,
    budget: Budget,
    *,
    scheduler: FilterScheduler,
    now: float,
    time_limit: float = 30.0,
) -> ExactResult:
    """The best objective of a final state within the budget (module docstring)."""
    check_target(table, target)
    model = _Model()
    drain = drain_mask(table, target.drain)
    rules = TargetRules(scheduler, now, drain, target.keep_traits)
    value = HostValue(table, target, scheduler, now)
    limit = instance_limit(scheduler)
    terms = _Terms.for_table(table)
    reward = 1.0 + _objective_ceiling(table, target, value)
    for alloc in table.allocations.values():
        _add_instance(model, terms, table, alloc, rules, drain, limit, reward)
    _budget_rows(model, terms, table, budget, limit)
    _slot_rows(model, terms, table, value, scheduler, now, drain, limit)
    if target.objective is Objective.EMPTY_HOSTS:
        _empty_host_vars(model, terms, ~value.counted)
    tiny = _tie_break(model, terms, value, budget)
    return _result(model, terms, _solve(model, time_limit), reward, tiny, budget)


@dataclass
class _Terms:
    """The model's terms gathered instance by instance, before they become rows."""

    fixed_cell: I64
    """(hosts, cells, columns) load of the instances that may not move."""
    fixed_host: I64
    fixed_count: I64
    use: list[Use]
    """Per host: final use by the instances that may move."""
    on_host: list[dict[int, float]]
    """Per host: the options that leave an instance there (instance count terms)."""
    touches: list[dict[int, float]]
    touch_base: I64
    fixed_groups: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))
    group_terms: dict[tuple[str, int], dict[int, float]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    moved: dict[int, float] = field(default_factory=dict)
    drain: dict[int, float] = field(default_factory=dict)
    option_of: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Move variable -> (instance, target host)."""

    @classmethod
    def for_table(cls, table: HostTable) -> _Terms:
        n = len(table)
        width = CELL_BASE + len(table.device_types)
        return cls(
            fixed_cell=np.zeros((n, table.cell_cap.shape[1], width), dtype=np.int64),
            fixed_host=np.zeros((n, HOST_RESOURCES), dtype=np.int64),
            fixed_count=np.zeros(n, dtype=np.int64),
            use=[{} for _ in range(n)],
            on_host=[{} for _ in range(n)],
            touches=[{} for _ in range(n)],
            touch_base=np.zeros(n, dtype=np.int64),
        )

    def free(self, table: HostTable, h: int) -> tuple[I64, I64]:
        """Host h's cell and host columns left by the instances that may not move."""
        return table.cell_cap[h] - self.fixed_cell[h], table.host_cap[h] - self.fixed_host[h]


def _add_instance(
    model: _Model,
    terms: _Terms,
    table: HostTable,
    alloc: Allocation,
    rules: TargetRules,
    drain: npt.NDArray[np.bool_],
    limit: int | None,
    reward: float,
) -> None:
    """One instance: fixed load when it may not move, else exactly one of its options (stay,
    or a NUMA shape on an allowed host)."""
    home = table.index[alloc.host]
    group = table.groups.get(alloc.server_group) if alloc.server_group else None
    anti = group is not None and group.policy == GroupPolicy.ANTI_AFFINITY
    if immovable(table, alloc) is not None:
        terms.fixed_cell[home] += alloc.cell_use
        terms.fixed_host[home] += alloc.host_use
        terms.fixed_count[home] += 1
        if anti and group is not None:
            terms.fixed_groups[(group.id, home)] += 1
        return
    d = table.demand(alloc.flavor)
    stay = _home(model, alloc, terms.use[home])
    choice = {stay: 1.0}
    terms.on_host[home][stay] = 1.0
    terms.touches[home][stay] = -1.0
    terms.touch_base[home] += 1
    if anti and group is not None:
        terms.group_terms[(group.id, home)][stay] = 1.0
    if drain[home]:
        terms.drain[stay] = -reward
    allowed = rules.static_mask(table, alloc) & (_tops(table, d) >= 1)
    allowed[home] = False
    for row in np.flatnonzero(allowed):
        h = int(row)
        n_cells = int(table.n_cells[h])
        shapes = _options if n_cells <= CELLS else defrag_cells.options
        for x in shapes(model, d, terms.use[h], n_cells):
            choice[x] = 1.0
            terms.moved[x] = 1.0
            terms.on_host[h][x] = 1.0
            terms.touches[h][x] = 1.0
            terms.option_of[x] = (alloc.instance_id, table.names[h])
            if anti and group is not None:
                terms.group_terms[(group.id, h)][x] = 1.0
    model.row(choice, 1.0, 1.0)


def _budget_rows(
    model: _Model, terms: _Terms, table: HostTable, budget: Budget, limit: int | None
) -> None:
    """The migration budget, anti-affinity, moves per host, instances per host, capacity."""
    model.row(terms.moved, -np.inf, float(budget.max_migrations))
    for key, group_terms in terms.group_terms.items():
        gid, _ = key
        room = table.groups[gid].max_server_per_host - terms.fixed_groups.get(key, 0)
        model.row(group_terms, -np.inf, float(room))
    for h in range(len(table)):
        if budget.max_per_host is not None and terms.touches[h]:
            model.row(terms.touches[h], -np.inf, float(budget.max_per_host - terms.touch_base[h]))
        if limit is not None and terms.on_host[h]:
            model.row(terms.on_host[h], -np.inf, float(limit - terms.fixed_count[h]))
        free_cell, free_host = terms.free(table, h)
        _capacity_rows(model, terms.use[h], {}, free_cell, free_host)


def _slot_rows(
    model: _Model,
    terms: _Terms,
    table: HostTable,
    value: HostValue,
    scheduler: FilterScheduler,
    now: float,
    drain: npt.NDArray[np.bool_],
    limit: int | None,
) -> None:
    """Per target flavor and eligible host, slot variables (weighted in the objective) that
    must fit in the final free space beside the final use."""
    for f, name in enumerate(value.flavors):
        d = table.demand(name)
        weight = value.weights[f]
        eligible = capacity_eligible(scheduler, table, name, now) & ~drain
        tops = _tops(table, d)
        for row in np.flatnonzero(eligible & (tops >= 1)):
            h = int(row)
            top = float(min(int(tops[h]), 1 << 20))
            n_cells = int(table.n_cells[h])
            shapes = _slots if n_cells <= CELLS else defrag_cells.slots
            slot_use, xs = shapes(model, d, weight, n_cells, top)
            free_cell, free_host = terms.free(table, h)
            _capacity_rows(model, terms.use[h], slot_use, free_cell, free_host)
            if d.mode == NumaMode.FLEX:
                _flex_rows(model, terms.use[h], d, xs[0], free_cell)
            _pci_rows(model, terms.use[h], d, xs, free_cell)
            if limit is not None:
                count = dict(terms.on_host[h])
                count.update(dict.fromkeys(xs, 1.0))
                model.row(count, -np.inf, float(limit - terms.fixed_count[h]))


def _tops(table: HostTable, d: Demand) -> I64:
    """Per host, at least how many of `d` fit on it empty: `vector.count` on hosts of up to
    two cells (and for flexible splits), the columns' bound on wider ones (which the search may
    refuse when roomy, docs/numa.md; the model still counts them: `defrag_cells`)."""
    out = vector.count(d, table.cell_cap, table.host_cap)
    wide = table.n_cells > CELLS
    if wide.any() and d.mode != NumaMode.FLEX:
        out = np.where(wide, defrag_cells.top(d, table.cell_cap, table.host_cap), out)
    return out


def _empty_host_vars(model: _Model, terms: _Terms, drain: npt.NDArray[np.bool_]) -> None:
    """Objective *empty hosts*: one variable per host without fixed load, at most 1 minus
    any instance left there."""
    for row in np.flatnonzero(~drain & (terms.fixed_count == 0)):
        e = model.var(1.0, cost=1.0)
        for x in terms.on_host[int(row)]:
            model.row({e: 1.0, x: 1.0}, -np.inf, 1.0)


def _tie_break(model: _Model, terms: _Terms, value: HostValue, budget: Budget) -> float:
    """The drain rewards, and among optimal final states the one with the fewest moves: a
    penalty per move too small to trade any objective (less than half the smallest weight over
    the whole budget). Returns that penalty."""
    for x, coef in terms.drain.items():
        model.cost[x] += coef
    unit = min(value.weights) if value.weights else 1.0
    tiny = 0.5 * unit / (budget.max_migrations + 1)
    for x in terms.moved:
        model.cost[x] -= tiny
    return tiny


def _result(
    model: _Model,
    terms: _Terms,
    solved: tuple[F64, bool, float, str] | None,
    reward: float,
    tiny: float,
    budget: Budget,
) -> ExactResult:
    """The objective without the drain rewards and move penalties, and the moves."""
    if solved is None:
        return ExactResult(0.0, None, False, 0, status="no solution")
    sol, optimal, dual, status = solved
    drained = -sum(round(sol[x]) for x in terms.drain) + len(terms.drain)
    moved = {terms.option_of[x] for x in terms.option_of if sol[x] > 0.5}
    lifted = reward * (len(terms.drain) - drained)
    objective = float(np.dot(model.cost, sol)) + lifted + tiny * len(moved)
    bound: float | None = objective
    if not optimal:
        extra = lifted + tiny * budget.max_migrations
        bound = dual + extra if np.isfinite(dual) else None
    return ExactResult(
        value=round(objective, 9),
        bound=None if bound is None else round(max(bound, objective), 9),
        optimal=optimal,
        moved=len(moved),
        placement=dict(moved),
        drained=int(drained),
        status=status,
    )


def _objective_ceiling(table: HostTable, target: Target, value: HostValue) -> float:
    """The objective of an empty fleet: no final state can beat it."""
    if target.objective is Objective.EMPTY_HOSTS:
        return float(len(table))
    rows = np.arange(len(table))
    return float(
        value.of(rows, table.cell_cap, table.host_cap, np.zeros(len(table), np.int64)).sum()
    )


def _capacity_rows(model: _Model, use: Use, extra: Use, free_cell: I64, free_host: I64) -> None:
    """Final use (plus `extra`, one flavor's slots) fits each cell column and host column."""
    keys = set(use) | set(extra)
    for cell, col in sorted(keys):
        terms = dict(use.get((cell, col), {}))
        for var, coef in extra.get((cell, col), {}).items():
            terms[var] = terms.get(var, 0.0) + coef
        cap = free_host[col] if cell < 0 else free_cell[cell, col]
        model.row(terms, -np.inf, float(cap))


def _flex_rows(model: _Model, use: Use, d: Demand, x: int, free_cell: I64) -> None:
    """`vector.count` for a flexible split: n x total <= free0 + free1, n x least <= each cell."""
    for column in np.flatnonzero(d.total[:CELL_BASE]):
        col = int(column)
        total, least = float(d.total[col]), float(d.cells[0, col])
        both = dict(use.get((0, col), {}))
        for var, coef in use.get((1, col), {}).items():
            both[var] = both.get(var, 0.0) + coef
        both[x] = both.get(x, 0.0) + total
        model.row(both, -np.inf, float(free_cell[0, col] + free_cell[1, col]))
        for c in range(CELLS):
            terms = dict(use.get((c, col), {}))
            terms[x] = terms.get(x, 0.0) + least
            model.row(terms, -np.inf, float(free_cell[c, col]))


def _pci_rows(model: _Model, use: Use, d: Demand, xs: list[int], free_cell: I64) -> None:
    """Host-level PCI devices of the slots come from any cell: bound by the cells' sum."""
    for p in np.flatnonzero(d.pci):
        col = CELL_BASE + int(p)
        both: dict[int, float] = {}
        for c in range(free_cell.shape[0]):
            for var, coef in use.get((c, col), {}).items():
                both[var] = both.get(var, 0.0) + coef
        for x in xs:
            both[x] = both.get(x, 0.0) + float(d.pci[p])
        model.row(both, -np.inf, float(free_cell[:, col].sum()))


def _solve(model: _Model, time_limit: float) -> tuple[F64, bool, float, str] | None:
    if not model.cost:
        model.var(0.0)  # HiGHS wants at least one variable
    n_vars = len(model.cost)
    if not model.row_lo:
        model.row({}, -np.inf, np.inf)
    shape = (len(model.row_lo), n_vars)
    a = coo_array((model.vals, (model.rows, model.cols)), shape=shape).tocsr()
    res = solve_milp(
        -np.asarray(model.cost, dtype=np.float64),
        a,
        model.row_lo,
        model.row_hi,
        model.lo,
        model.hi,
        time_limit,
    )
    if res.x is None:
        return None
    dual = dual_bound(res)
    bound = -dual if dual is not None else np.inf
    return np.round(res.x), res.status == 0, bound, str(res.message)


def plan_value(plan: Plan) -> float:
    """The objective of a plan's final state, from its figures (to compare with the optimum)."""
    after = plan.after
    if plan.target.objective is Objective.EMPTY_HOSTS:
        return float(after.empty_hosts)
    weights = plan.target.weights or tuple(1.0 for _ in plan.target.flavors)
    return float(
        sum(w * after.capacity[f] for f, w in zip(plan.target.flavors, weights, strict=True))
    )
