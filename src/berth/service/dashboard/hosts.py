"""Hosts as the dashboard shows them: a cluster's hosts a page at a time, one host's NUMA cells,
and the fleet's heatmaps of free capacity and fragmentation.

Every figure is a column over a whole table computed once (numpy); only the rows of the page
asked for become Python values, so a cluster of thousands of hosts costs one page of rows.
Fragmentation is `berth.core.fragmentation`'s formula host by host: the share of a host's free
CPU (in the column the flavor consumes) that no more instance of the flavor can use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.fragmentation import eligible_hosts, flavor_cpu_free
from berth.core.resources import C_HUGE, C_MEM, C_PCPU, C_VCPU, CELL_BASE, H_HDD, H_SSD
from berth.service.dashboard.fleet import (
    STATES,
    capacity_column,
    host_states,
    pool_codes,
    usage_columns,
)
from berth.service.replica import ClusterView, Replica

PAGE = 50
BUCKETS = 10
F64 = npt.NDArray[np.float64]


@dataclass
class HostPage:
    cluster: str
    pool: str | None
    page: int
    pages: int
    total: int
    rows: list[dict[str, Any]]


def cluster_hosts(
    replica: Replica,
    cluster: str,
    flavors: list[str],
    *,
    pool: str | None = None,
    page: int = 0,
    size: int = PAGE,
) -> HostPage | None:
    """One page of a cluster's hosts (by name), optionally of one pool; None: no such cluster."""
    now = replica.clock()
    with replica.lock:
        view = replica.clusters.get(cluster)
        if view is None:
            return None
        table = view.table
        pools, codes = pool_codes(view)
        rows = np.arange(len(table))
        if pool is not None:
            rows = rows[codes == pools.index(pool)] if pool in pools else rows[:0]
        order = rows[np.argsort(np.asarray(table.names, dtype=object)[rows], kind="stable")]
        pages = max(1, -(-len(order) // size))
        page = min(max(page, 0), pages - 1)
        shown = order[page * size : (page + 1) * size]
        state = host_states(table, replica.draining, now, replica.config.service_down_time)
        usage = {k: v[shown] for k, v in usage_columns(table).items()}
        counts = {f: capacity_column(replica, table, f, now)[shown] for f in flavors}
        out = [
            {
                "name": table.names[r],
                "pool": pools[codes[r]] if len(pools) else "-",
                "state": STATES[state[r]],
                "instances": int(table.n_instances[r]),
                "usage": {k: int(v[i]) for k, v in usage.items()},
                "capacity": {f: int(c[i]) for f, c in counts.items()},
            }
            for i, r in enumerate(shown.tolist())
        ]
    return HostPage(cluster, pool, page, pages, len(order), out)


def host_detail(replica: Replica, name: str, flavors: list[str]) -> dict[str, Any] | None:
    """A host's NUMA cells (capacity and free of each resource), host-wide disks, state and
    capacity per flavor, from the replica's table; None when no active table holds it."""
    now = replica.clock()
    with replica.lock:
        cl = replica.host_cluster.get(name)
        if cl is None:
            return None
        view = replica.clusters[cl]
        t = view.table
        r = t.index[name]
        state = host_states(t, replica.draining, now, replica.config.service_down_time)[r]
        cells = []
        for c in range(int(t.n_cells[r])):
            cap, free = t.cell_cap[r, c], t.cell_free[r, c]
            cells.append(
                {
                    "cell": c,
                    "shared": _pair(cap[C_VCPU], free[C_VCPU]),
                    "pinned": _pair(cap[C_PCPU], free[C_PCPU]),
                    "memory_mb": _pair(cap[C_MEM], free[C_MEM]),
                    "hugepages_mb": _pair(cap[C_HUGE], free[C_HUGE]),
                    "pci": {
                        d: _pair(cap[CELL_BASE + i], free[CELL_BASE + i])
                        for i, d in enumerate(t.device_types)
                        if cap[CELL_BASE + i]
                    },
                }
            )
        usage = {k: int(v[r]) for k, v in usage_columns(t).items()}
        return {
            "name": name,
            "cluster": cl,
            "pool": view.pool_of[r] or "-",
            "state": STATES[state],
            "generation": int(t.generation[r]),
            "instances": int(t.n_instances[r]),
            "page_kb": int(t.page_kb[r]),
            "heartbeat": None if np.isnan(t.heartbeat[r]) else float(t.heartbeat[r]),
            "cells": cells,
            "disk": {
                "hdd_gb": _pair(t.host_cap[r, H_HDD], t.host_free[r, H_HDD]),
                "ssd_gb": _pair(t.host_cap[r, H_SSD], t.host_free[r, H_SSD]),
            },
            "usage": usage,
            "capacity": {f: int(capacity_column(replica, t, f, now)[r]) for f in flavors},
        }


def _pair(cap: Any, free: Any) -> dict[str, int]:
    return {"total": int(cap), "free": int(free), "used": int(cap) - int(free)}


@dataclass
class Heatmap:
    """Hosts counted per (cluster/pool row, bucket of a share 0..1), plus the hosts that have
    no free CPU (`full`) and, for fragmentation, those that could never hold the flavor."""

    metric: str
    flavor: str | None
    rows: list[str]
    counts: list[list[int]]
    full: list[int]
    hosts: int
    fleet_value: float | None


def heatmap(
    replica: Replica, metric: str, flavor: str | None, *, by_cluster: bool = False
) -> Heatmap:
    """`metric` "free": each host's share of free CPU (shared and pinned together);
    "fragmentation": each eligible host's share of free CPU that `flavor` cannot use. One row
    per cluster/pool, or per cluster (`by_cluster`, for fleets of many pools)."""
    rows: list[str] = []
    counts: list[list[int]] = []
    full: list[int] = []
    free_sum = usable_sum = 0.0
    total = 0
    with replica.lock:
        for view in sorted(replica.clusters.values(), key=lambda v: v.name):
            if view.state != "active" or len(view.table) == 0:
                continue
            share, has_free, keep, free, usable = _shares(view, metric, flavor)
            free_sum += free
            usable_sum += usable
            if by_cluster:
                names, codes = ["*"], np.zeros(len(view.table), dtype=np.int64)
            else:
                names, codes = pool_codes(view)
            bucket = np.minimum((share * BUCKETS).astype(np.int64), BUCKETS - 1)
            grid = np.zeros((len(names), BUCKETS), dtype=np.int64)
            ok = keep & has_free
            np.add.at(grid, (codes[ok], bucket[ok]), 1)
            empty = np.bincount(codes[keep & ~has_free], minlength=len(names))
            total += int(keep.sum())
            for i, pool in enumerate(names):
                rows.append(view.name if by_cluster else f"{view.name}/{pool}")
                counts.append([int(x) for x in grid[i]])
                full.append(int(empty[i]))
    if metric == "free":
        value = None
    else:
        value = (free_sum - usable_sum) / free_sum if free_sum > 0 else 0.0
    return Heatmap(metric, flavor, rows, counts, full, total, value)


def _shares(
    view: ClusterView, metric: str, flavor: str | None
) -> tuple[F64, npt.NDArray[np.bool_], npt.NDArray[np.bool_], float, float]:
    """(share per host, has free CPU, host counted, free CPU, usable CPU) of one table."""
    t = view.table
    if metric == "free" or flavor is None or flavor not in t.flavors:
        cap = t.host_cap[:, 0] + t.cell_cap[:, :, C_PCPU].sum(axis=1)
        free = t.host_free[:, 0] + t.cell_free[:, :, C_PCPU].sum(axis=1)
        has = free > 0
        share = np.where(cap > 0, free / np.maximum(cap, 1), 0.0)
        keep = np.ones(len(t), dtype=bool) if metric == "free" else np.zeros(len(t), bool)
        return share, has, keep, 0.0, 0.0
    keep = eligible_hosts(t, flavor)
    free = flavor_cpu_free(t, flavor).astype(np.float64)
    usable = t.resource_counts(flavor).astype(np.float64) * t.flavors[flavor].vcpus
    has = free > 0
    share = np.where(has, (free - np.minimum(usable, free)) / np.maximum(free, 1.0), 0.0)
    return share, has, keep, float(free[keep].sum()), float(usable[keep].sum())
