"""Invariants checked from the database rows alone (no replica involved).

`audit(store)` rebuilds every host's capacity from its inventory rows with the core's own
accounting, sums its instances' recorded footprints, and reports:

* over-committed hosts (any per-cell or host column used beyond capacity);
* anti-affinity deployment sets with more than `max_per_host` members on one host;
* deployment sets over their `max_size`;
* migration allocations (`<id>@migrating`, docs/service.md) without a defrag step in flight
  whose instance is still on the step's source, and steps in flight without their allocation.

Migration allocations are instance rows, so the over-commit and anti-affinity checks count them
on their target hosts: a migration in flight holds the instance on both hosts.

The concurrency test and `berth db check`-style tooling use it; an empty list means sound.
"""

from __future__ import annotations

import numpy as np

from berth.core.model import Fleet
from berth.core.table import HostTable
from berth.store.defrag import DefragStore, is_migration, migration_id
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
    problems.extend(_migrations(store, {i.id: i.host for i in snap.instances}))
    return problems


def _migrations(store: Store, host_of: dict[str, str]) -> list[str]:
    problems = []
    flying = {migration_id(s.instance_id): s for s in DefragStore(store).migrating_steps()}
    for iid, host in host_of.items():
        if not is_migration(iid):
            continue
        step = flying.get(iid)
        if step is None:
            problems.append(f"migration allocation {iid} belongs to no defrag step in flight")
        elif host != step.target:
            problems.append(f"migration allocation {iid} is on {host}, not on {step.target}")
    for mid, step in flying.items():
        if mid not in host_of:
            problems.append(
                f"step {step.step} of defrag plan {step.plan_id} is migrating without its "
                f"allocation {mid}"
            )
        elif host_of.get(step.instance_id, step.source) != step.source:
            # an instance deleted mid-migration is fine: its step aborts on confirm (or on the
            # driver's next round); one that left the source by another way is not
            problems.append(
                f"step {step.step} of defrag plan {step.plan_id} is migrating but instance "
                f"{step.instance_id} is not on its source {step.source}"
            )
    return problems
