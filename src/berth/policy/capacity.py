"""Per-host creatable counts per cluster and pool, and the capacity report (B6, B8).

The numbers are the core's: `HostTable.resource_counts` (NUMA-exact `numa.count`, cached per
flavor and recomputed only for hosts changed since) capped by the instances-per-host limit, on
the hosts the scheduler's request-independent filters accept, restricted to the flavor's pool.
`FilterScheduler.capacity` computes the same; this module only caches the parts that do not
change between calls (the flavor-dependent static filter masks and the pool membership, until
hosts are added) so that every flavor over every cluster stays within a dashboard's budget. The
compute filter (enabled, heartbeat fresh at `now`) is evaluated on every call.
`tests/policy/test_capacity.py` checks equality with `FilterScheduler.capacity`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.engine import FilterScheduler
from berth.core.filters.base import Context
from berth.core.filters.compute import ComputeFilter
from berth.core.filters.num_instances import NumInstancesFilter
from berth.core.filters.numa_topology import NumaTopologyFilter, page_size_ok
from berth.core.request import RequestSpec
from berth.policy.catalogue import Candidate, Catalogue
from berth.policy.topology import Cluster, Topology

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


class CapacityCounter:
    """Creatable counts of (flavor, pool) per host of a cluster, cached where exact."""

    def __init__(self, scheduler: FilterScheduler, catalogue: Catalogue) -> None:
        self.scheduler = scheduler
        self.catalogue = catalogue
        self._static: dict[tuple[int, str, str], tuple[int, Mask]] = {}
        self._compute = [f for f in scheduler.filters if isinstance(f, ComputeFilter)]
        self._limit = min(
            (f.limit() for f in scheduler.filters if isinstance(f, NumInstancesFilter)),
            default=None,
        )
        self._numa = any(isinstance(f, NumaTopologyFilter) for f in scheduler.filters)

    def static_mask(self, cluster: Cluster, flavor: str, pool: str) -> Mask:
        """Pool members that the flavor-dependent, time-independent static filters accept."""
        table = cluster.table
        key = (id(table), flavor, pool)
        cached = self._static.get(key)
        if cached is not None and cached[0] == len(table):
            return cached[1]
        ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), 0.0)
        mask = cluster.pool_mask(tuple(self.catalogue.pools[pool].traits)).copy()
        for flt in self.scheduler.filters:
            if flt.static and not isinstance(flt, ComputeFilter):
                mask &= flt.mask(ctx)
        if self._numa:
            mask &= page_size_ok(ctx)
        self._static[key] = (len(table), mask)
        return mask

    def live(self, cluster: Cluster, now: float) -> Mask | None:
        """The compute filter's mask at `now` (None when the scheduler has none)."""
        if not self._compute:
            return None
        table = cluster.table
        first = next(iter(table.flavors), None)
        if first is None:
            return np.zeros(len(table), dtype=bool)
        ctx = Context(table, RequestSpec(flavor=first), table.demand(first), now)
        mask = np.ones(len(table), dtype=bool)
        for flt in self._compute:
            mask &= flt.mask(ctx)
        return mask

    def per_host(
        self, cluster: Cluster, flavor: str, pool: str, now: float, live: Mask | None = None
    ) -> I64:
        """How many more instances of `flavor` each host of the cluster takes, in `pool`."""
        table = cluster.table
        counts = table.resource_counts(flavor)
        if self._limit is not None:
            counts = np.minimum(counts, self._limit - table.n_instances.astype(np.int64))
        ok = self.static_mask(cluster, flavor, pool)
        if live is None:
            live = self.live(cluster, now)
        if live is not None:
            ok = ok & live
        return np.where(ok, np.maximum(counts, 0), 0)

    def forget(self, cluster: Cluster) -> None:
        """Drop cached masks of a cluster that left."""
        table_id = id(cluster.table)
        for key in [k for k in self._static if k[0] == table_id]:
            del self._static[key]


# ---------------------------------------------------------------------------- report
@dataclass(frozen=True)
class ClusterCapacity:
    cluster: str
    idc: str
    region: str
    hosts: tuple[str, ...]
    counts: I64
    """(flavors, hosts) creatable counts, flavor order as in the report."""


@dataclass(frozen=True)
class CapacityReport:
    """For every (base flavor, variant): how many more fit per host, pool, cluster, IDC."""

    entries: tuple[Candidate, ...]
    entry_bases: tuple[str, ...]
    """The base flavor of each entry."""
    bases: tuple[str, ...]
    clusters: tuple[ClusterCapacity, ...]
    now: float

    @property
    def flavors(self) -> list[str]:
        return [e.flavor for e in self.entries]

    def by_cluster(self) -> dict[str, dict[str, int]]:
        return {
            c.cluster: {
                e.flavor: int(t) for e, t in zip(self.entries, c.counts.sum(axis=1), strict=True)
            }
            for c in self.clusters
        }

    def _group(self, key: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for c in self.clusters:
            name = c.idc if key == "idc" else c.region
            acc = out.setdefault(name, dict.fromkeys(self.flavors, 0))
            for e, total in zip(self.entries, c.counts.sum(axis=1), strict=True):
                acc[e.flavor] += int(total)
        return out

    def by_idc(self) -> dict[str, dict[str, int]]:
        return self._group("idc")

    def by_region(self) -> dict[str, dict[str, int]]:
        return self._group("region")

    def by_pool(self) -> dict[str, dict[str, int]]:
        """{'cluster/pool': {flavor: count}}: each flavor counts in its own pool."""
        out: dict[str, dict[str, int]] = {}
        for c in self.clusters:
            totals = c.counts.sum(axis=1)
            for e, total in zip(self.entries, totals, strict=True):
                acc = out.setdefault(f"{c.cluster}/{e.pool}", {})
                acc[e.flavor] = int(total)
        return out

    def by_host(self, nonzero: bool = True) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for c in self.clusters:
            for h, host in enumerate(c.hosts):
                column = c.counts[:, h]
                if nonzero and not column.any():
                    continue
                out[host] = {
                    e.flavor: int(n)
                    for e, n in zip(self.entries, column, strict=True)
                    if n or not nonzero
                }
        return out

    def by_base(self) -> dict[str, dict[str, int]]:
        """{base flavor: {variant: count over all clusters}}."""
        out: dict[str, dict[str, int]] = {b: {} for b in self.bases}
        for i, e in enumerate(self.entries):
            total = sum(int(c.counts[i].sum()) for c in self.clusters)
            out[self.entry_bases[i]][e.variant] = total
        return out

    def to_dict(self, by: str) -> dict[str, Any]:
        groups = {
            "idc": self.by_idc,
            "region": self.by_region,
            "cluster": self.by_cluster,
            "pool": self.by_pool,
            "host": self.by_host,
            "flavor": self.by_base,
        }[by]()
        return {"by": by, "counts": groups, "now": self.now}


def capacity_report(
    topology: Topology,
    counter: CapacityCounter,
    now: float,
    bases: Sequence[str] | None = None,
) -> CapacityReport:
    """Counts for every applicable (base flavor, variant) in its pool, over every cluster."""
    catalogue = topology.catalogue
    names = list(bases) if bases is not None else list(catalogue.bases)
    for name in names:
        catalogue.base(name)
    entries: list[Candidate] = []
    entry_bases: list[str] = []
    for name in names:
        for cand in catalogue.variants_of(name):
            entries.append(cand)
            entry_bases.append(name)
    clusters = []
    for cluster in topology.clusters.values():
        n = len(cluster.table)
        counts = np.zeros((len(entries), n), dtype=np.int64)
        if cluster.enabled:
            live = counter.live(cluster, now)
            for i, cand in enumerate(entries):
                counts[i] = counter.per_host(cluster, cand.flavor, cand.pool, now, live)
        clusters.append(
            ClusterCapacity(
                cluster=cluster.name,
                idc=cluster.idc,
                region=cluster.region,
                hosts=tuple(cluster.table.names),
                counts=counts,
            )
        )
    return CapacityReport(tuple(entries), tuple(entry_bases), tuple(names), tuple(clusters), now)
