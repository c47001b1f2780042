"""Invariants checked from the database rows alone (no replica involved).

`audit(store)` rebuilds every host's capacity from its inventory rows with the core's own
accounting, sums its instances' recorded footprints, and reports:

* over-committed hosts (any per-cell or host column used beyond capacity);
* anti-affinity deployment sets with more than `max_per_host` members on one host;
* deployment sets over their `max_size`.

The concurrency test and `berth db check`-style tooling use it; an empty list means sound.
"""

from __future__ import annotations

import numpy as np

from berth.core.model import Fleet
from berth.core.table import HostTable
from berth.store.footprint import to_arrays
from berth.store.repo import Store


def audit(store: Store) -> list[str]:
    snap = store.snapshot()
    problems: list[str] = []
    by_cluster: dict[str, HostTable] = {}
    for cluster in snap.clusters:
        hosts = [r.host for r in snap.hosts if r.cluster == cluster]
        by_cluster[cluster] = HostTable.from_fleet(
            Fleet(aggregates=snap.aggregates, pci_aliases=snap.pci_aliases, hosts=hosts)
        )
    cluster_of = {r.host.name: r.cluster for r in snap.hosts}
    used_cells: dict[str, np.ndarray] = {}
    used_host: dict[str, np.ndarray] = {}
    members: dict[tuple[str, str], int] = {}
    sizes: dict[str, int] = {}
    for inst in snap.instances:
        table = by_cluster[cluster_of[inst.host]]
        cell_use, host_use = to_arrays(inst.placement, table.device_types)
        used_cells[inst.host] = used_cells.get(inst.host, 0) + cell_use
        used_host[inst.host] = used_host.get(inst.host, 0) + host_use
        if inst.server_group is not None:
            key = (inst.server_group, inst.host)
            members[key] = members.get(key, 0) + 1
            sizes[inst.server_group] = sizes.get(inst.server_group, 0) + 1
    for host, cells in used_cells.items():
        table = by_cluster[cluster_of[host]]
        row = table.index[host]
        if (cells > table.cell_cap[row]).any() or (used_host[host] > table.host_cap[row]).any():
            problems.append(f"host {host} is over-committed")
    for (gid, host), n in members.items():
        group = snap.groups.get(gid)
        if group is not None and group.policy == "anti-affinity" and n > group.max_per_host:
            problems.append(f"deployment set {gid} has {n} members on host {host}")
    for gid, n in sizes.items():
        group = snap.groups.get(gid)
        if group is not None and group.max_size is not None and n > group.max_size:
            problems.append(f"deployment set {gid} has {n} members, more than {group.max_size}")
    return problems
