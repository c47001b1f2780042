"""Per-host creatable counts per cluster and pool, and the capacity report (B6, B8).

The numbers are the core's: `HostTable.resource_counts` (NUMA-exact `vector.count`, cached per
flavor and recomputed only for hosts changed since) capped by the instances-per-host limit, on
the hosts the scheduler's request-independent filters accept, restricted to the flavor's pool.
`FilterScheduler.capacity` computes the same; this module only caches the parts that do not
change between calls (the flavor-dependent static filter masks and the pool membership, until
hosts are added) so that every flavor over every cluster stays within a dashboard's budget. The
compute filter (enabled, heartbeat fresh at `now`) is evaluated on every call.
`tests/policy/test_capacity.py` checks equality with `FilterScheduler.capacity`.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.engine import FilterScheduler
from berth.core.filters.base import Context
from berth.core.numa import vector
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.policy.catalogue import Candidate, Catalogue
from berth.policy.topology import Cluster, Topology

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass
class _Counts:
    """One cluster's `vector.count` per concrete flavor, each row tagged with the table version
    it was computed at; only hosts changed since (the table's `touched`) are recomputed."""

    hosts: int
    counts: I64  # (flavors, hosts)
    seen: I64  # (flavors,) table version per row; -1 = never computed


class CapacityCounter:
    """Creatable counts of (flavor, pool) per host of a cluster, cached where exact.

    Resource counts are the core's `vector.count` on the table's free columns, kept per cluster
    for every concrete flavor of the catalogue and refreshed incrementally by the table's
    `touched` versions (the mechanism of `HostTable.derived`, without its 128-key LRU, which
    the catalogue's flavors times the fragmentation weigher's keys would thrash). A full report
    refreshes each flavor for all stale clusters in one vectorised call.
    """

    def __init__(self, scheduler: FilterScheduler, catalogue: Catalogue) -> None:
        self.scheduler = scheduler
        self.catalogue = catalogue
        self.flavors = list(catalogue.flavors)
        self.index = {f: i for i, f in enumerate(self.flavors)}
        # per table (weakly held: a table that is dropped takes its caches with it)
        self._counts: weakref.WeakKeyDictionary[HostTable, _Counts] = weakref.WeakKeyDictionary()
        self._static: weakref.WeakKeyDictionary[
            HostTable, dict[tuple[str, str], tuple[int, Mask]]
        ] = weakref.WeakKeyDictionary()
        self._static_matrix: weakref.WeakKeyDictionary[
            HostTable, dict[tuple[tuple[str, str], ...], tuple[int, Mask]]
        ] = weakref.WeakKeyDictionary()
        # static filters of the host's live state (the compute filter) are evaluated per call
        self._compute = [f for f in scheduler.filters if f.static and f.kind == "host_state"]
        self._limit = min(
            (n for f in scheduler.filters if (n := f.per_host_limit()) is not None),
            default=None,
        )

    # ------------------------------------------------------------------ resource counts
    def _state(self, table: HostTable) -> _Counts:
        state = self._counts.get(table)
        if state is None or state.hosts != len(table):
            n = len(table)
            state = _Counts(
                n,
                np.zeros((len(self.flavors), n), dtype=np.int64),
                np.full(len(self.flavors), -1, dtype=np.int64),
            )
            self._counts[table] = state
        return state

    def resource_counts(self, table: HostTable, flavor: str) -> I64:
        """`vector.count` of the flavor on every host of the table (what `resource_counts` is)."""
        state = self._state(table)
        f = self.index[flavor]
        seen = int(state.seen[f])
        if seen != table.version:
            rows = None if seen < 0 else table.changed_since(seen)
            d = table.demand(flavor)
            if rows is None:
                state.counts[f] = vector.count(d, table.cell_free, table.host_free)
            elif rows.size:
                state.counts[f, rows] = vector.count(
                    d, vector.take(table.cell_free, rows), vector.take(table.host_free, rows)
                )
            state.seen[f] = table.version
        return state.counts[f]

    def refresh_all(self, tables: Sequence[HostTable], flavors: Sequence[str]) -> None:
        """Bring every (table, flavor) up to date, one `vector.count` call per flavor over the
        changed hosts of all tables together (tables grouped by their PCI device types)."""
        # per (flavor, device types): pieces (state, rows, their cell_free, their host_free)
        pending: dict[tuple[int, tuple[str, ...]], list[tuple[_Counts, Any, I64, I64]]] = {}
        for table in tables:
            state = self._state(table)
            idx = np.array([self.index[f] for f in flavors], dtype=np.int64)
            stale = idx[state.seen[idx] != table.version]
            if stale.size == 0:
                continue
            kinds = tuple(table.device_types)
            for seen in np.unique(state.seen[stale]):
                group = stale[state.seen[stale] == seen]
                state.seen[group] = table.version
                if seen < 0:
                    rows: Any = slice(None)
                    piece = (state, rows, table.cell_free, table.host_free)
                else:
                    rows = table.changed_since(int(seen))
                    if rows.size == 0:
                        continue
                    piece = (
                        state,
                        rows,
                        vector.take(table.cell_free, rows),
                        vector.take(table.host_free, rows),
                    )
                for f in group:
                    pending.setdefault((int(f), kinds), []).append(piece)
        demands: dict[tuple[str, ...], HostTable] = {}
        for table in tables:
            demands.setdefault(tuple(table.device_types), table)
        for (f, kinds), pieces in pending.items():
            d = demands[kinds].demand(self.flavors[f])
            if len(pieces) == 1:
                cf, hf = pieces[0][2], pieces[0][3]
            else:
                cf = np.concatenate([p[2] for p in pieces])
                hf = np.concatenate([p[3] for p in pieces])
            counts = vector.count(d, cf, hf)
            start = 0
            for state, rows, part, _ in pieces:
                size = part.shape[0]
                state.counts[f, rows] = counts[start : start + size]
                start += size

    # ------------------------------------------------------------------ masks
    def static_mask(self, cluster: Cluster, flavor: str, pool: str) -> Mask:
        """Pool members that the flavor-dependent, time-independent static filters accept."""
        table = cluster.table
        per_table = self._static.get(table)
        if per_table is None:
            per_table = self._static[table] = {}
        key = (flavor, pool)
        cached = per_table.get(key)
        if cached is not None and cached[0] == len(table):
            return cached[1]
        ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), 0.0)
        mask = cluster.pool_mask(tuple(self.catalogue.pools[pool].traits)).copy()
        for flt in self.scheduler.filters:
            if flt.static and flt not in self._compute:
                mask &= flt.mask(ctx)
            elif not flt.static and (part := flt.static_part(ctx)) is not None:
                mask &= part
        per_table[key] = (len(table), mask)
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

    def headroom(self, cluster: Cluster) -> I64 | None:
        """Instances each host may still take under the instances-per-host limit."""
        if self._limit is None:
            return None
        return self._limit - cluster.table.n_instances.astype(np.int64)

    def per_host(
        self, cluster: Cluster, flavor: str, pool: str, now: float, live: Mask | None = None
    ) -> I64:
        """How many more instances of `flavor` each host of the cluster takes, in `pool`."""
        counts = self.resource_counts(cluster.table, flavor)
        room = self.headroom(cluster)
        if room is not None:
            counts = np.minimum(counts, room)
        ok = self.static_mask(cluster, flavor, pool)
        if live is None:
            live = self.live(cluster, now)
        if live is not None:
            ok = ok & live
        return np.where(ok, np.maximum(counts, 0), 0)

    def matrix(self, cluster: Cluster, entries: Sequence[Candidate], now: float) -> I64:
        """(entries, hosts) creatable counts; call `refresh_all` first for speed."""
        table = cluster.table
        n = len(table)
        if not entries:
            return np.zeros((0, n), dtype=np.int64)
        state = self._state(table)
        for e in entries:  # no work when `refresh_all` ran: every row is current
            if state.seen[self.index[e.flavor]] != table.version:
                self.resource_counts(table, e.flavor)
        counts = state.counts[[self.index[e.flavor] for e in entries]]
        room = self.headroom(cluster)
        if room is not None:
            counts = np.minimum(counts, room[None, :])
        per_table = self._static_matrix.get(table)
        if per_table is None:
            per_table = self._static_matrix[table] = {}
        key = tuple((e.flavor, e.pool) for e in entries)
        cached = per_table.get(key)
        if cached is None or cached[0] != n:
            ok = np.array([self.static_mask(cluster, e.flavor, e.pool) for e in entries])
            per_table[key] = (n, ok)
        else:
            ok = cached[1]
        live = self.live(cluster, now)
        if live is not None:
            ok = ok & live[None, :]
        return np.where(ok, np.maximum(counts, 0), 0)

    def forget(self, cluster: Cluster) -> None:
        """Drop cached state of a cluster that left."""
        self._counts.pop(cluster.table, None)
        self._static.pop(cluster.table, None)
        self._static_matrix.pop(cluster.table, None)


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
    live = [c for c in topology.clusters.values() if c.enabled]
    counter.refresh_all([c.table for c in live], [e.flavor for e in entries])
    for cluster in topology.clusters.values():
        if cluster.enabled:
            counts = counter.matrix(cluster, entries, now)
        else:
            counts = np.zeros((len(entries), len(cluster.table)), dtype=np.int64)
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
