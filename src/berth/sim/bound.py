"""Lower bounds on the number of hosts a set of instances needs (docs/simulator.md, "Bound").

The load is a multiset of flavors; each flavor is a vector over the fleet's resources (shared
vCPUs, pinned CPUs, memory, huge pages, HDD, SSD, PCI devices by type) and each host type a
capacity vector. NUMA cells, traits, zones and anti-affinity are ignored: dropping constraints
can only lower the optimum, so every number here is a valid lower bound for the real problem.

* **volume**: per resource r, the fewest hosts whose largest capacities add up to the demand;
  the bound is the maximum over resources.
* **large items**: instances needing more than half of the largest host in some resource
  cannot share a host with each other.
* **lp**: the Gilmore-Gomory configuration LP (one column per feasible host filling), solved by
  column generation with HiGHS (`scipy.optimize.linprog` for the master, `milp` for the
  knapsack pricing). Any iterate gives Farley's bound z / max(1, v*), where v* bounds the best
  reduced value, so stopping early stays valid; at convergence it is the LP optimum, usually
  within one host of the integer optimum.
* **mip**: on small instances (few instances, few hosts) the exact bin-packing MIP (HiGHS);
  its optimum, or its dual bound when the time limit stops it.

`hosts` is the largest of these, `method` names which.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy.optimize import (  # type: ignore[import-untyped]
    Bounds,
    LinearConstraint,
    linprog,
    milp,
)
from scipy.sparse import coo_array  # type: ignore[import-untyped]

from berth.core.resources import C_HUGE, C_PCPU, CELL_BASE, H_HDD, H_MEM, H_SSD, H_VCPU
from berth.core.table import HostTable

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

_EPS = 1e-6


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence HiGHS: some MIP code paths print to the process's stdout whatever `disp` says."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real stdout (embedded interpreter): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@dataclass(frozen=True)
class Bound:
    hosts: int
    method: str
    volume: int
    volume_by_resource: dict[str, int]
    large_items: int
    lp: int | None = None
    lp_value: float | None = None
    lp_converged: bool = False
    mip: int | None = None
    mip_optimal: bool = False
    instances: int = 0
    unplaceable: int = 0
    """Instances that fit no host type at all (left out of every bound)."""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "hosts": self.hosts,
            "method": self.method,
            "volume": self.volume,
            "volume_by_resource": self.volume_by_resource,
            "large_items": self.large_items,
            "lp": self.lp,
            "lp_value": self.lp_value,
            "lp_converged": self.lp_converged,
            "mip": self.mip,
            "mip_optimal": self.mip_optimal,
            "instances": self.instances,
            "unplaceable": self.unplaceable,
        }


RESOURCE_NAMES = ("vCPUs", "pinned CPUs", "memory MB", "huge-page MB", "HDD GB", "SSD GB")


def flavor_vectors(table: HostTable, flavors: list[str]) -> F64:
    """(flavors, resources) demand of one instance of each flavor, summed over NUMA cells."""
    out = np.zeros((len(flavors), len(RESOURCE_NAMES) + len(table.device_types)))
    for i, name in enumerate(flavors):
        d = table.demand(name)
        out[i, 0] = d.host[H_VCPU]
        out[i, 1] = d.total[C_PCPU]
        out[i, 2] = d.host[H_MEM]
        out[i, 3] = d.total[C_HUGE]
        out[i, 4] = d.host[H_HDD]
        out[i, 5] = d.host[H_SSD]
        out[i, len(RESOURCE_NAMES) :] = d.total[CELL_BASE:] + d.pci
    return out


def host_vectors(table: HostTable) -> F64:
    """(hosts, resources) capacity of every enabled host (disabled hosts get zeros)."""
    cells = table.cell_cap.sum(axis=1)
    out = np.zeros((len(table), len(RESOURCE_NAMES) + len(table.device_types)))
    out[:, 0] = table.host_cap[:, H_VCPU]
    out[:, 1] = cells[:, C_PCPU]
    out[:, 2] = table.host_cap[:, H_MEM]
    out[:, 3] = cells[:, C_HUGE]
    out[:, 4] = table.host_cap[:, H_HDD]
    out[:, 5] = table.host_cap[:, H_SSD]
    out[:, len(RESOURCE_NAMES) :] = cells[:, CELL_BASE:]
    out[~table.enabled] = 0
    return out


def resource_names(table: HostTable) -> list[str]:
    return [*RESOURCE_NAMES, *(f"PCI {d}" for d in table.device_types)]


def lower_bound(
    table: HostTable,
    load: Mapping[str, int],
    *,
    lp: bool = True,
    mip_instances: int = 40,
    time_limit: float = 20.0,
    max_columns: int = 400,
) -> Bound:
    """Lower bounds on the hosts needed to hold `load` (flavor -> instances) on this fleet."""
    names = [f for f, c in load.items() if c > 0]
    counts = np.array([load[f] for f in names], dtype=np.float64)
    items = flavor_vectors(table, names)
    caps_all = host_vectors(table)
    dims = np.flatnonzero(items.sum(axis=0) > 0) if names else np.zeros(0, dtype=np.int64)
    rnames = resource_names(table)
    items = items[:, dims]
    caps_all = caps_all[:, dims]
    types, per_type = np.unique(caps_all, axis=0, return_counts=True)
    keep_types = types.sum(axis=1) > 0 if types.size else np.zeros(0, dtype=bool)
    types, per_type = types[keep_types], per_type[keep_types]
    fits = (items[:, None, :] <= types[None, :, :] + _EPS).all(axis=2)  # (items, types)
    placeable = fits.any(axis=1) if types.size else np.zeros(len(names), dtype=bool)
    unplaceable = int(counts[~placeable].sum())
    items, counts = items[placeable], counts[placeable]
    fits = fits[placeable]
    total = int(counts.sum())
    if total == 0 or types.size == 0:
        return Bound(0, "empty", 0, {}, 0, instances=total, unplaceable=unplaceable)

    demand = counts @ items  # per resource
    volume_by: dict[str, int] = {}
    fleet_caps = caps_all[caps_all.sum(axis=1) > 0]
    for j, r in enumerate(dims):
        caps = np.sort(fleet_caps[:, j])[::-1]
        volume_by[rnames[int(r)]] = _hosts_for(float(demand[j]), caps)
    volume = max(volume_by.values(), default=0)
    largest = types.max(axis=0)
    big = (items > largest / 2 + _EPS).T  # (resources, items)
    large = int(max((counts[row].sum() for row in big), default=0))

    best, method = volume, "volume"
    if large > best:
        best, method = large, "large items"
    lp_hosts: int | None = None
    lp_value: float | None = None
    converged = False
    deadline = time.monotonic() + time_limit
    if lp:
        value, converged = _column_generation(
            items, counts, types, fits, deadline, max_columns, beat=best
        )
        if value > 0:
            lp_value = value
            lp_hosts = math.ceil(value - _EPS)
        if lp_hosts is not None and lp_hosts > best:
            best, method = lp_hosts, "lp"
    mip_hosts: int | None = None
    mip_optimal = False
    if total <= mip_instances:
        solved = _exact(items, counts, types, per_type, fits, max(1.0, deadline - time.monotonic()))
        if solved is not None:
            mip_hosts, mip_optimal = solved
            if mip_hosts >= best:
                best, method = mip_hosts, "mip" if mip_optimal else "mip bound"
    return Bound(
        hosts=best,
        method=method,
        volume=volume,
        volume_by_resource=volume_by,
        large_items=large,
        lp=lp_hosts,
        lp_value=lp_value,
        lp_converged=converged,
        mip=mip_hosts,
        mip_optimal=mip_optimal,
        instances=total,
        unplaceable=unplaceable,
    )


def _hosts_for(demand: float, caps_desc: F64) -> int:
    """Fewest hosts (largest first) whose capacities sum to `demand`; beyond the fleet, more
    hosts of the largest size."""
    if demand <= _EPS:
        return 0
    cum = np.cumsum(caps_desc)
    k = int(np.searchsorted(cum, demand - _EPS))
    if k < caps_desc.size:
        return k + 1
    top = float(caps_desc[0]) if caps_desc.size else 0.0
    if top <= 0:
        return caps_desc.size
    return caps_desc.size + math.ceil((demand - float(cum[-1])) / top - _EPS)


def _column_generation(
    items: F64,
    counts: F64,
    types: F64,
    fits: npt.NDArray[np.bool_],
    deadline: float,
    max_cols: int,
    beat: int = 0,
) -> tuple[float, bool]:
    """Farley lower bound of the configuration LP; (bound, converged).

    Stops early once the restricted master's value z (an upper bound on the LP optimum) shows
    that the LP cannot give more than `beat` hosts.
    """
    m = items.shape[0]
    columns: list[F64] = []
    for i in range(m):
        best = 0.0
        for t in np.flatnonzero(fits[i]):
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(
                    items[i] > 0, types[t] / np.where(items[i] > 0, items[i], 1), np.inf
                )
            best = max(best, min(float(np.floor(ratio.min() + _EPS)), float(counts[i])))
        col = np.zeros(m)
        col[i] = max(best, 1.0)
        columns.append(col)
    columns.extend(_ffd_columns(items, counts, types, fits))
    bound = 0.0
    converged = False
    while True:
        a = np.array(columns).T  # (items, columns)
        res = linprog(
            c=np.ones(a.shape[1]),
            A_ub=-a,
            b_ub=-counts,
            bounds=(0, None),
            method="highs",
        )
        if res.status != 0:
            break
        z = float(res.fun)
        if math.ceil(z - _EPS) <= beat:
            return bound, False
        duals = np.maximum(-np.asarray(res.ineqlin.marginals, dtype=np.float64), 0.0)
        v_upper = 0.0
        new: list[F64] = []
        for k in range(types.shape[0]):
            found = _price(items, counts, types[k], fits[:, k], duals, deadline)
            if found is None:
                return bound, False
            value_upper, pattern = found
            v_upper = max(v_upper, value_upper)
            if pattern is not None and float(duals @ pattern) > 1 + 1e-9:
                new.append(pattern)
        bound = max(bound, z / max(1.0, v_upper))
        if v_upper <= 1 + 1e-9:
            converged = True
            bound = max(bound, z)
            break
        if not new or len(columns) >= max_cols or time.monotonic() > deadline:
            break
        columns.extend(new)
    return bound, converged


def _ffd_columns(
    items: F64, counts: F64, types: F64, fits: npt.NDArray[np.bool_], limit: int = 200_000
) -> list[F64]:
    """Host fillings from first-fit decreasing on the largest host type: starting columns
    that put the restricted master near the optimum at once (the early stop then usually fires
    on the first iteration when the volume bound is tight)."""
    if counts.sum() > limit:
        return []
    t = int(np.argmax((types / np.maximum(types.max(axis=0), 1)).sum(axis=1)))
    cap = types[t]
    ok = fits[:, t]
    size = (items / np.maximum(cap, 1)).max(axis=1)
    order = [i for i in np.argsort(-size, kind="stable") if ok[i]]
    free = np.zeros((0, cap.size))
    content: list[dict[int, int]] = []
    for i in order:
        need = items[i]
        for _ in range(int(counts[i])):
            room = np.flatnonzero((free >= need - _EPS).all(axis=1))
            if room.size:
                b = int(room[0])
            else:
                free = np.vstack([free, cap[None, :]])
                content.append({})
                b = len(content) - 1
            free[b] -= need
            content[b][i] = content[b].get(i, 0) + 1
    out: dict[tuple[tuple[int, int], ...], F64] = {}
    for c in content:
        key = tuple(sorted(c.items()))
        if key not in out:
            col = np.zeros(items.shape[0])
            for i, k in c.items():
                col[i] = k
            out[key] = col
    return list(out.values())


def _price(
    items: F64,
    counts: F64,
    cap: F64,
    fits: npt.NDArray[np.bool_],
    duals: F64,
    deadline: float,
) -> tuple[float, F64 | None] | None:
    """Best filling of one host of capacity `cap` by dual values: (upper bound, pattern)."""
    use = np.flatnonzero(fits & (duals > 1e-12))
    if use.size == 0:
        return 0.0, None
    a = items[use].T  # (resources, k)
    upper = counts[use].copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(a > 0, cap[:, None] / np.where(a > 0, a, 1), np.inf)
    upper = np.minimum(upper, np.floor(ratio.min(axis=0) + _EPS))
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    with _quiet():
        res = milp(
            c=-duals[use],
            constraints=LinearConstraint(a, -np.inf, cap),
            integrality=np.ones(use.size),
            bounds=Bounds(np.zeros(use.size), upper),
            options={"time_limit": max(0.5, min(remaining, 10.0)), "disp": False},
        )
    if res.x is None:
        dual = getattr(res, "mip_dual_bound", None)
        if dual is None or not np.isfinite(dual):
            return None
        return -float(dual), None
    pattern = np.zeros(items.shape[0])
    pattern[use] = np.round(res.x)
    if res.status == 0:
        return float(duals @ pattern), pattern
    dual = getattr(res, "mip_dual_bound", None)
    upper_value = -float(dual) if dual is not None and np.isfinite(dual) else math.inf
    return max(upper_value, float(duals @ pattern)), pattern


def _exact(
    items: F64,
    counts: F64,
    types: F64,
    per_type: I64,
    fits: npt.NDArray[np.bool_],
    time_limit: float,
) -> tuple[int, bool] | None:
    """Exact bin packing on the fleet's host types: (hosts, optimal).

    Variables: x[i, h] instances of flavor i on candidate host h, y[h] host h used. Candidate
    hosts are, per type, as many copies as instances (the bound says what the load needs, even
    beyond the fleet), used in order (symmetry breaking).
    """
    m, r = items.shape
    total = int(counts.sum())
    hosts: list[int] = []  # type of each candidate host: as many as instances, fleet or not
    for t in range(len(per_type)):
        hosts.extend([t] * total)
    nh = len(hosts)
    nx = m * nh
    nvar = nx + nh
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    row = 0
    for i in range(m):  # every instance placed
        for h in range(nh):
            rows.append(row)
            cols.append(i * nh + h)
            vals.append(1.0)
        lo.append(float(counts[i]))
        hi.append(float(counts[i]))
        row += 1
    for h, t in enumerate(hosts):  # capacity, only when used
        for j in range(r):
            for i in range(m):
                if items[i, j] > 0:
                    rows.append(row)
                    cols.append(i * nh + h)
                    vals.append(float(items[i, j]))
            rows.append(row)
            cols.append(nx + h)
            vals.append(-float(types[t, j]))
            lo.append(-np.inf)
            hi.append(0.0)
            row += 1
    for h in range(nh - 1):  # same-type hosts are used in order
        if hosts[h] == hosts[h + 1]:
            rows.extend([row, row])
            cols.extend([nx + h, nx + h + 1])
            vals.extend([1.0, -1.0])
            lo.append(0.0)
            hi.append(np.inf)
            row += 1
    a = coo_array((vals, (rows, cols)), shape=(row, nvar)).tocsr()
    upper = np.zeros(nvar)
    for i in range(m):
        for h, t in enumerate(hosts):
            upper[i * nh + h] = counts[i] if fits[i, t] else 0.0
    upper[nx:] = 1.0
    c = np.zeros(nvar)
    c[nx:] = 1.0
    with _quiet():
        res = milp(
            c=c,
            constraints=LinearConstraint(a, np.array(lo), np.array(hi)),
            integrality=np.ones(nvar),
            bounds=Bounds(np.zeros(nvar), upper),
            options={"time_limit": time_limit, "disp": False},
        )
    if res.status == 0 and res.x is not None:
        return round(float(res.fun)), True
    dual = getattr(res, "mip_dual_bound", None)
    if dual is not None and np.isfinite(dual):
        return math.ceil(float(dual) - _EPS), False
    return None
