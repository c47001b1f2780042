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

`hosts` is the largest of these, `method` names which. The LP and the MIP are solver code, in
`berth.solvers.bounds`; this module turns a fleet and a load into their arrays.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from berth.core.resources import C_HUGE, C_PCPU, CELL_BASE, H_HDD, H_MEM, H_SSD, H_VCPU
from berth.core.table import HostTable
from berth.solvers.bounds import EPS, bin_packing_mip, configuration_lp

F64 = npt.NDArray[np.float64]


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
    fits = (items[:, None, :] <= types[None, :, :] + EPS).all(axis=2)  # (items, types)
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
    big = (items > largest / 2 + EPS).T  # (resources, items)
    large = int(max((counts[row].sum() for row in big), default=0))

    best, method = volume, "volume"
    if large > best:
        best, method = large, "large items"
    lp_hosts: int | None = None
    lp_value: float | None = None
    converged = False
    deadline = time.monotonic() + time_limit
    if lp:
        value, converged = configuration_lp(
            items, counts, types, fits, deadline, max_columns, beat=best
        )
        if value > 0:
            lp_value = value
            lp_hosts = math.ceil(value - EPS)
        if lp_hosts is not None and lp_hosts > best:
            best, method = lp_hosts, "lp"
    mip_hosts: int | None = None
    mip_optimal = False
    if total <= mip_instances:
        solved = bin_packing_mip(
            items, counts, types, per_type, fits, max(1.0, deadline - time.monotonic())
        )
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
    if demand <= EPS:
        return 0
    cum = np.cumsum(caps_desc)
    k = int(np.searchsorted(cum, demand - EPS))
    if k < caps_desc.size:
        return k + 1
    top = float(caps_desc[0]) if caps_desc.size else 0.0
    if top <= 0:
        return caps_desc.size
    return caps_desc.size + math.ceil((demand - float(cum[-1])) / top - EPS)
