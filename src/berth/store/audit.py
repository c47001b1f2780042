"""Invariants checked from the database rows alone (no replica involved).

`audit(store)` rebuilds every host's capacity from its inventory rows with the core's own
accounting, sums its instances' recorded footprints, and reports:

* over-committed hosts (any NUMA cell's resource or device, or any host column, used beyond
  capacity), naming the cell and the resource;
* anti-affinity deployment sets with more than `max_per_host` members on one host;
* affinity deployment sets whose members are on more than one host (docs/service.md: every
  member of an affinity set shares one host, whichever cluster a request names);
* deployment sets over their `max_size`;
* migration allocations (`<id>@migrating`, docs/service.md) without a defrag step in flight
  whose instance is still on the step's source, and steps in flight without their allocation.

Migration allocations are instance rows, so the over-commit and anti-affinity checks count them
on their target hosts: a migration in flight holds the instance on both hosts (the affinity check
skips them: the instance is still on its source).

`audit_by_invariant` gives the same findings grouped by invariant (the chaos test reports each on
its own); `usage_from_rows` is each host's usage as a replica reports it (`GET /v1/hosts`), from
the rows, to check that replicas agree with the database. The concurrency tests and
`berth db check`-style tooling use them; an empty list means sound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from berth.core.model import Fleet
from berth.core.resources import C_MEM, C_PCPU, H_MEM, H_VCPU, HOST_NAMES, cell_resource_name
from berth.core.table import HostTable
from berth.store.defrag import DefragStore, is_migration, migration_id
from berth.store.footprint import to_arrays
from berth.store.records import Snapshot, instance_set_key, split_set_key
from berth.store.repo import Store

I64 = npt.NDArray[np.int64]


@dataclass
class _Rows:
    """Capacity and use per host, rebuilt from one snapshot."""

    snap: Snapshot
    tables: dict[str, HostTable] = field(default_factory=dict)
    cluster_of: dict[str, str] = field(default_factory=dict)
    used_cells: dict[str, I64] = field(default_factory=dict)
    used_host: dict[str, I64] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, snap: Snapshot) -> _Rows:
        rows = cls(snap)
        for cluster in snap.clusters:
            hosts = [r.host for r in snap.hosts if r.cluster == cluster]
            rows.tables[cluster] = HostTable.from_fleet(
                Fleet(aggregates=snap.aggregates, pci_aliases=snap.pci_aliases, hosts=hosts)
            )
        rows.cluster_of = {r.host.name: r.cluster for r in snap.hosts}
        for inst in snap.instances:
            table = rows.table(inst.host)
            cell_use, host_use = to_arrays(
                inst.placement, table.device_types, table.cell_cap.shape[1]
            )
            rows.used_cells[inst.host] = rows.used_cells.get(inst.host, 0) + cell_use
            rows.used_host[inst.host] = rows.used_host.get(inst.host, 0) + host_use
            rows.count[inst.host] = rows.count.get(inst.host, 0) + 1
        return rows

    def table(self, host: str) -> HostTable:
        return self.tables[self.cluster_of[host]]


def audit(store: Store) -> list[str]:
    return [p for found in audit_by_invariant(store).values() for p in found]


def audit_by_invariant(store: Store) -> dict[str, list[str]]:
    """Every invariant's findings, by name (an empty list: it holds)."""
    snap = store.snapshot()
    rows = _Rows.of(snap)
    return {
        "capacity": _overcommit(rows),
        "anti-affinity": _anti_affinity(snap),
        "affinity": _affinity(snap),
        "set-size": _set_sizes(snap),
        "migrations": _migrations(store, {i.id: i.host for i in snap.instances}),
    }


def usage_from_rows(store: Store) -> dict[str, dict[str, int]]:
    """Each host's usage from the rows, in the fields of a replica's `HostUsage`."""
    rows = _Rows.of(store.snapshot())
    out = {}
    for rec in rows.snap.hosts:
        name = rec.host.name
        table = rows.table(name)
        r = table.index[name]
        cap, host_cap = table.cell_cap[r], table.host_cap[r]
        cells = rows.used_cells.get(name, np.zeros_like(cap))
        host = rows.used_host.get(name, np.zeros_like(host_cap))
        out[name] = {
            "vcpus": int(host_cap[H_VCPU]),
            "vcpus_used": int(host[H_VCPU]),
            "pinned_cpus": int(cap[:, C_PCPU].sum()),
            "pinned_cpus_used": int(cells[:, C_PCPU].sum()),
            "memory_mb": int(max(host_cap[H_MEM], cap[:, C_MEM].sum())),
            "memory_mb_used": int(max(host[H_MEM], cells[:, C_MEM].sum())),
            "instances": rows.count.get(name, 0),
        }
    return out


def _overcommit(rows: _Rows) -> list[str]:
    problems = []
    for host, cells in rows.used_cells.items():
        table = rows.table(host)
        r = table.index[host]
        for c, col in zip(*np.nonzero(cells > table.cell_cap[r]), strict=True):
            problems.append(
                f"host {host} is over-committed: NUMA cell {c} "
                f"{cell_resource_name(int(col), table.device_types)} "
                f"{cells[c, col]} used of {table.cell_cap[r][c, col]}"
            )
        used = rows.used_host[host]
        for col in np.nonzero(used > table.host_cap[r])[0]:
            problems.append(
                f"host {host} is over-committed: {HOST_NAMES[col]} "
                f"{used[col]} used of {table.host_cap[r][col]}"
            )
    return problems


def _named(key: str) -> str:
    """A set's key as the findings name it: `web (project p)`."""
    project, set_id = split_set_key(key)
    return f"{set_id} (project {project})"


def _members(snap: Snapshot) -> dict[str, list[str]]:
    """Deployment set key -> its members' hosts (one entry per member, migration rows
    included)."""
    hosts: dict[str, list[str]] = {}
    for inst in snap.instances:
        key = instance_set_key(inst.project, inst.server_group)
        if key is not None:
            hosts.setdefault(key, []).append(inst.host)
    return hosts


def _anti_affinity(snap: Snapshot) -> list[str]:
    problems = []
    for gid, hosts in _members(snap).items():
        group = snap.groups.get(gid)
        if group is None or group.policy != "anti-affinity":
            continue
        for host in sorted(set(hosts)):
            n = hosts.count(host)
            if n > group.max_per_host:
                problems.append(f"deployment set {_named(gid)} has {n} members on host {host}")
    return problems


def _affinity(snap: Snapshot) -> list[str]:
    hosts: dict[str, set[str]] = {}
    for inst in snap.instances:
        key = instance_set_key(inst.project, inst.server_group)
        if key is not None and not is_migration(inst.id):
            hosts.setdefault(key, set()).add(inst.host)
    problems = []
    for gid, on in sorted(hosts.items()):
        group = snap.groups.get(gid)
        if group is not None and group.policy == "affinity" and len(on) > 1:
            problems.append(
                f"affinity deployment set {_named(gid)} has members on hosts {sorted(on)}"
            )
    return problems


def _set_sizes(snap: Snapshot) -> list[str]:
    problems = []
    for gid, hosts in sorted(_members(snap).items()):
        group = snap.groups.get(gid)
        n = len(hosts)
        if group is not None and group.max_size is not None and n > group.max_size:
            problems.append(
                f"deployment set {_named(gid)} has {n} members, more than {group.max_size}"
            )
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
