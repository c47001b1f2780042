"""One replica's view of the fleet: a `HostTable` per cluster, kept current from the event log.

The database is the one source of truth; a replica's tables are a cache that is exact as of the
last event it applied. A placement decides on the cache, then commits with the generations it
read (`berth.service.placing.commit`): if another replica changed a touched host or deployment
set meanwhile, the commit fails whole, the replica catches up on the event log and decides
again, a bounded number of times.

Events are applied with the core's own rules (`berth.core.drivers.CachingScheduler.apply`): an
event not newer than the cached host is ignored, one that skips a generation makes the replica
reload from a consistent snapshot. Events the cache cannot apply incrementally (hosts added,
clusters joining or leaving, pools, aggregates) also trigger a reload.

Whatever else keeps state over the tables (the multi-cloud policy engine's topology) registers
a `ReplicaListener`: the replica tells it about loads and applied events and imports none of it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from berth.core.config import WeigherConfig
from berth.core.drivers import Applied, CachingScheduler
from berth.core.engine import FilterScheduler
from berth.core.errors import ClaimError, SpecError
from berth.core.events import HostStateChanged, InstanceClaimed, InstanceReleased
from berth.core.flavors import parse_flavor
from berth.core.model import Flavor, Fleet, ServerGroup
from berth.core.resources import C_MEM, C_PCPU, H_MEM, H_VCPU
from berth.core.table import HostTable
from berth.service.config import ServiceConfig
from berth.store.defrag import DefragStore, MigrationAllocationError, is_migration
from berth.store.footprint import to_arrays
from berth.store.repo import (
    CommitResult,
    EventRow,
    GroupRow,
    HostRecord,
    InstanceRow,
    PoolRow,
    Snapshot,
    Store,
    instance_set_key,
    set_key,
)

log = logging.getLogger("berth.service")

SYNC_BATCH = 2000
GAP_TIMEOUT = 30.0
"""Seconds an unseen event id below the newest is asked for again before it counts as a
sequence value whose transaction rolled back (longer than any commit takes)."""
MAX_GAPS = 10_000


@dataclass
class ClusterView:
    name: str
    region: str
    state: str
    table: HostTable
    pool_of: list[str | None]  # by table row
    pools: dict[str, str]  # pool name -> trait


class ReplicaListener(Protocol):
    """State kept over the replica's tables, told about every change (caller holds the lock)."""

    reload_on: frozenset[str]
    """Event kinds the listener cannot follow incrementally: the replica reloads on them."""

    def on_loaded(self, replica: Replica, instances: list[InstanceRow]) -> None:
        """The replica (re)loaded its tables from a snapshot holding these instances."""

    def on_claimed(self, cluster: str, host: str, payload: dict[str, Any], ts: float) -> None:
        """An instance was claimed on a host (the event's payload and time)."""

    def on_released(self, cluster: str, host: str, payload: dict[str, Any]) -> None:
        """An instance left a host."""

    def on_group_added(self, payload: dict[str, Any]) -> None:
        """A deployment set was created."""

    def on_group_deleted(self, group_id: str) -> None:
        """A deployment set was deleted."""


class Replica:
    """The scheduler state of one `berth serve` process."""

    def __init__(
        self, store: Store, config: ServiceConfig, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        cfg = config.scheduler
        params = dict(cfg.filter_params)
        if "compute" in cfg.filters:
            params["compute"] = {
                **params.get("compute", {}),
                "service_down_time": config.service_down_time,
            }
        weighers = list(cfg.weighers)
        if config.replica_spread > 0:
            weighers.append(
                WeigherConfig(
                    name="berth.service.spread:ReplicaSpreadWeigher",
                    weight=config.replica_spread,
                    params={"seed": config.replica_id},
                )
            )
        self.scheduler = FilterScheduler.from_config(
            cfg.model_copy(update={"filter_params": params, "weighers": weighers})
        )
        self.lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self.clusters: dict[str, ClusterView] = {}
        self.regions: dict[str, str | None] = {}  # region or IDC -> parent region
        self.host_cluster: dict[str, str] = {}
        self.groups: dict[str, GroupRow] = {}
        """deployment sets by key (`set_key`: project and id); the tables know a set by its key"""
        self.flavors: dict[str, Flavor] = {}
        self.aliases: dict[str, str] = {}
        self.preemptible: dict[str, float] = {}  # preemptible instance id -> created_at
        self.last_event = 0  # the newest event id seen
        self._gaps: dict[int, float] = {}  # older ids not seen yet -> when first missed
        self.needs_reload = True
        self.reloads = 0
        self.events_applied = 0
        self._heartbeat_since = 0.0
        self.on_decision: Callable[[float], None] | None = None
        self.on_commit: Callable[[float, bool], None] | None = None
        """Called with each placement commit's seconds and whether it was applied."""
        self._pending: set[str] = set()  # hosts with a commit of this replica in flight
        self._changed = threading.Condition(self.lock)
        self._group_locks: dict[str, threading.Lock] = {}
        self.networks: dict[tuple[str, str], int] = {}  # (cluster, network) -> free IPs
        self.draining: set[str] = set()  # hosts being drained: disabled in the tables
        self.listeners: list[ReplicaListener] = []
        """Told about loads and applied events; register before the first `reload`."""

    # ------------------------------------------------------------------ loading
    def reload(self) -> None:
        with self.lock:
            self._load(self.store.snapshot())

    def _load(self, snap: Snapshot) -> None:
        snap.hosts = self._valid_heartbeats(snap.hosts)
        aliases = {a.name: a.device_type for a in snap.pci_aliases}
        groups = [
            ServerGroup(id=key, policy=g.policy, max_server_per_host=g.max_per_host)
            for key, g in snap.groups.items()
        ]
        pools_by_cluster: dict[str, dict[str, str]] = {}
        for p in snap.pools:
            pools_by_cluster.setdefault(p.cluster, {})[p.name] = p.trait
        clusters: dict[str, ClusterView] = {}
        host_cluster: dict[str, str] = {}
        for cl in snap.clusters.values():
            records = [r for r in snap.hosts if r.cluster == cl.name]
            fleet = Fleet(
                aggregates=snap.aggregates,
                pci_aliases=snap.pci_aliases,
                hosts=[r.host for r in records],
                server_groups=groups,
            )
            table = HostTable.from_fleet(fleet)
            for flavor in snap.flavors:
                try:
                    table.add_flavor(parse_flavor(flavor, aliases))
                except SpecError:
                    continue  # e.g. a PCI device type this cluster's hosts lack
            for r in records:
                host_cluster[r.host.name] = cl.name
            clusters[cl.name] = ClusterView(
                cl.name,
                cl.region,
                cl.state,
                table,
                [r.pool for r in records],
                pools_by_cluster.get(cl.name, {}),
            )
        preemptible: dict[str, float] = {}
        for inst in snap.instances:
            view = clusters[host_cluster[inst.host]]
            table = view.table
            cell_use, host_use = to_arrays(
                inst.placement, table.device_types, table.cell_cap.shape[1]
            )
            table.claim(
                inst.id,
                inst.host,
                inst.flavor,
                cell_use,
                host_use,
                server_group=instance_set_key(inst.project, inst.server_group),
                project=inst.project,
                migratable=inst.migratable,
            )
            if inst.preemptible:
                preemptible[inst.id] = inst.created_at
        self.draining = DefragStore(self.store).draining()  # host_drain events keep it current
        for name in self.draining:  # a draining host takes no placements: off in the tables
            drained = clusters[host_cluster[name]].table if name in host_cluster else None
            if drained is not None:
                drained.enabled[drained.index[name]] = False
        for r in snap.hosts:  # the database's generations, not the count of claims above
            table = clusters[r.cluster].table
            table.generation[table.index[r.host.name]] = r.generation
        self.clusters = clusters
        self.regions = dict(snap.regions)
        self.host_cluster = host_cluster
        self.groups = dict(snap.groups)
        self.flavors = {f.name: f for f in snap.flavors}
        self.aliases = aliases
        self.preemptible = preemptible
        self.last_event = snap.last_event_id
        now = time.monotonic()  # ids still committing when the snapshot was read come later
        self._gaps = dict.fromkeys(snap.missing_event_ids, now)
        self.needs_reload = False
        self.reloads += 1
        self.networks = {
            (n["cluster"], n["name"]): n["total"] - n["used"] for n in self.store.list_ip_pools()
        }
        for listener in self.listeners:
            listener.on_loaded(self, snap.instances)

    def _valid_heartbeats(self, records: list[HostRecord]) -> list[HostRecord]:
        """The hosts with a heartbeat beyond the clock plus the allowed skew (stored before
        reports were checked) given none: such a host counts as down until it reports again,
        and its next real report replaces the stored one (`Store.report`)."""
        limit = self.clock() + self.config.max_clock_skew
        return [
            replace(r, host=r.host.model_copy(update={"last_heartbeat": None}))
            if r.host.last_heartbeat is not None and r.host.last_heartbeat > limit
            else r
            for r in records
        ]

    def reload_locked(self) -> None:
        """Reload from a fresh snapshot (caller holds the lock)."""
        self._load(self.store.snapshot())

    # ------------------------------------------------------------------ commits in flight
    def hold(self, hosts: set[str]) -> None:
        """Mark hosts as having a commit in flight (caller holds the lock)."""
        self._pending |= hosts

    def release_hold(self, hosts: set[str]) -> None:
        """A commit finished (caller holds the lock): its hosts may be chosen again."""
        self._pending -= hosts
        self._changed.notify_all()

    def held(self) -> frozenset[str]:
        """The hosts with a commit of this replica in flight (caller holds the lock)."""
        return frozenset(self._pending)

    def wait_for_commits(self, hosts: frozenset[str], timeout: float) -> None:
        """Wait until none of these hosts has a commit in flight, at most `timeout` seconds
        (caller holds the lock, which is released while waiting)."""
        deadline = time.monotonic() + timeout
        while self._pending & hosts and time.monotonic() < deadline:
            self._changed.wait(timeout=0.5)

    def group_lock(self, gid: str | None) -> Any:
        """One commit in flight per deployment set (its generation is shared)."""
        if gid is None:
            return contextlib.nullcontext()
        with self.lock:
            return self._group_locks.setdefault(gid, threading.Lock())

    def apply_committed(self, commit: CommitResult) -> None:
        """Apply what this replica just committed (caller holds the lock)."""
        for ev in commit.events:
            self._apply_own(ev)
        for gid, gen in commit.groups.items():
            self._group_generation(gid, gen)

    # ------------------------------------------------------------------ sync
    def sync(self) -> int:
        """Apply every event committed since the last sync; returns how many were new.

        Ids below the newest one seen that have not appeared are remembered as gaps (a
        transaction of another replica still committing, or rolled back) and asked for again
        on every sync until they appear or `GAP_TIMEOUT` passes.
        """
        applied = 0
        with self._sync_lock:
            while True:
                with self.lock:
                    after, gaps = self.last_event, sorted(self._gaps)
                batch = self.store.events_after(after, limit=SYNC_BATCH, also=gaps)
                with self.lock:
                    for ev in batch:
                        if self._see(ev.id):
                            self._apply(ev)
                            applied += 1
                    self._expire_gaps()
                    if self.needs_reload:
                        self._load(self.store.snapshot())
                if len(batch) < SYNC_BATCH:
                    break
        self.events_applied += applied
        return applied

    def _see(self, event_id: int) -> bool:
        """Record an event id as seen (caller holds the lock); False if it was seen before."""
        if event_id in self._gaps:
            del self._gaps[event_id]
            return True
        if event_id <= self.last_event:
            return False
        now = time.monotonic()
        for missing in range(self.last_event + 1, min(event_id, self.last_event + MAX_GAPS)):
            self._gaps[missing] = now
        self.last_event = event_id
        return True

    def has_gaps(self) -> bool:
        return bool(self._gaps)

    def _expire_gaps(self) -> None:
        if not self._gaps:
            return
        limit = time.monotonic() - GAP_TIMEOUT
        for event_id in [i for i, t in self._gaps.items() if t < limit]:
            del self._gaps[event_id]  # rolled back: a sequence value that never committed
        while len(self._gaps) > MAX_GAPS:
            del self._gaps[min(self._gaps)]

    def refresh_heartbeats(self) -> int:
        """Copy heartbeats newer than the last refresh into the tables (they bump no
        generation and are not events: one cheap query per interval instead)."""
        beats = self.store.heartbeats_since(self._heartbeat_since)
        limit = self.clock() + self.config.max_clock_skew
        with self.lock:
            for name, ts in beats:
                if ts > limit:  # invalid (see `_valid_heartbeats`): neither used nor passed
                    continue
                cl = self.host_cluster.get(name)
                if cl is not None:
                    self.clusters[cl].table.set_heartbeat(name, ts)
                self._heartbeat_since = max(self._heartbeat_since, ts)
        return len(beats)

    def _apply_own(self, ev: EventRow) -> None:
        """Apply an event this replica just committed (caller holds the lock)."""
        if self._see(ev.id):
            self._apply(ev)

    def _apply(self, ev: EventRow) -> None:
        """Apply one event to the cache (caller holds the lock)."""
        kind, p = ev.kind, ev.payload
        if kind in ("instance_claimed", "instance_released", "host_state", "host_drain"):
            if ev.host is None or ev.generation is None or ev.host not in self.host_cluster:
                self.needs_reload = True
                return
            view = self.clusters[self.host_cluster[ev.host]]
            driver = CachingScheduler(self.scheduler, view.table)
            try:
                if kind == "instance_claimed":
                    cell_use, host_use = to_arrays(
                        p["footprint"], view.table.device_types, view.table.cell_cap.shape[1]
                    )
                    result = driver.apply(
                        InstanceClaimed(
                            ev.host,
                            ev.generation,
                            p["instance_id"],
                            p["flavor"],
                            cell_use,
                            host_use,
                            server_group=_payload_set(p),
                            project=p.get("project", "default"),
                        )
                    )
                    if result is Applied.APPLIED:
                        if p.get("migratable") is False:  # e.g. a migration allocation
                            alloc = view.table.allocations[p["instance_id"]]
                            view.table.allocations[alloc.instance_id] = replace(
                                alloc, migratable=False
                            )
                        if p.get("preemptible"):
                            # a migrated instance keeps its age (what a fresh load reads)
                            self.preemptible[p["instance_id"]] = p.get("created_at", ev.ts)
                        for listener in self.listeners:
                            listener.on_claimed(view.name, ev.host, p, ev.ts)
                elif kind == "instance_released":
                    result = driver.apply(
                        InstanceReleased(ev.host, ev.generation, p["instance_id"])
                    )
                    if result is Applied.APPLIED:
                        self.preemptible.pop(p["instance_id"], None)
                        for listener in self.listeners:
                            listener.on_released(view.name, ev.host, p)
                else:  # host_state, host_drain: a draining host is off in the table
                    draining = p.get("draining", ev.host in self.draining)
                    on = p["enabled"] and not draining
                    result = driver.apply(HostStateChanged(ev.host, ev.generation, on))
                    if result is Applied.APPLIED and draining:
                        self.draining.add(ev.host)
                    elif result is Applied.APPLIED:
                        self.draining.discard(ev.host)
            except (ClaimError, KeyError):
                result = Applied.GAP
            if result is Applied.GAP:
                self.needs_reload = True
            self._group_generation(_payload_set(p), p.get("group_generation"))
        elif kind == "host_alive":  # a heartbeat that brought a down host back
            cl = self.host_cluster.get(ev.host or "")
            if cl is not None:
                self.clusters[cl].table.set_heartbeat(ev.host or "", float(p["heartbeat"]))
        elif kind == "flavor_added":
            try:
                self._add_flavor(Flavor.model_validate(p["spec"]))
            except (KeyError, ValueError, SpecError):
                self.needs_reload = True
        elif kind == "flavor_deleted":
            self.flavors.pop(p["name"], None)
            for view in self.clusters.values():
                view.table.flavors.pop(p["name"], None)
                view.table.demands.pop(p["name"], None)
        elif kind == "group_added":
            self.needs_reload = self.needs_reload or not self._add_group(p)
            for listener in self.listeners:
                listener.on_group_added(p)
        elif kind == "group_deleted":
            if "project" not in p:  # written before sets were per project
                self.needs_reload = True
                return
            key = set_key(p["project"], p["id"])
            self.groups.pop(key, None)
            for view in self.clusters.values():
                view.table.groups.pop(key, None)
            for listener in self.listeners:
                listener.on_group_deleted(key)
        elif kind in ("region_added",):
            self.regions.setdefault(p["name"], p.get("parent"))
            self.needs_reload = self.needs_reload or self._listeners_reload_on(kind)
        elif kind in ("image_added", "network_added"):
            self.needs_reload = self.needs_reload or self._listeners_reload_on(kind)
        elif kind == "discrepancy" or kind.startswith("cloud_"):
            pass  # nothing the tables hold (a cloud cluster's state: berth.service.clouds)
        else:  # hosts_added, cluster_joined/left, pool_added, aggregates, aliases, unknown
            self.needs_reload = True

    def _listeners_reload_on(self, kind: str) -> bool:
        return any(kind in listener.reload_on for listener in self.listeners)

    def _add_flavor(self, flavor: Flavor) -> None:
        self.flavors[flavor.name] = flavor
        spec = parse_flavor(flavor, self.aliases)
        for view in self.clusters.values():
            try:
                view.table.add_flavor(spec)
            except SpecError:
                continue

    def _add_group(self, p: dict[str, Any]) -> bool:
        if "policy" not in p:
            return False
        row = GroupRow(
            p["id"],
            p["project"],
            p["policy"],
            p["max_per_host"],
            p["max_size"],
            0,
            p.get("scope", "host"),
        )
        self.groups[row.key] = row
        sg = ServerGroup(id=row.key, policy=row.policy, max_server_per_host=row.max_per_host)
        for view in self.clusters.values():
            view.table.groups[row.key] = sg
        return True

    def _group_generation(self, gid: str | None, generation: int | None) -> None:
        if gid is None or generation is None or gid not in self.groups:
            return
        g = self.groups[gid]
        if generation > g.generation:
            self.groups[gid] = replace(g, generation=generation)

    # ------------------------------------------------------------------ other writes
    def release(
        self, instance_id: str, project: str | None = None, reason: str | None = None
    ) -> None:
        if is_migration(instance_id):
            raise MigrationAllocationError(
                f"{instance_id!r} holds a live migration's target: confirm or abort its step"
            )
        _, ev = self.store.release(instance_id, project=project, reason=reason)
        with self.lock:
            self._apply_own(ev)

    def set_enabled(self, host: str, enabled: bool) -> None:
        ev = self.store.set_host_enabled(host, enabled)
        with self.lock:
            self._apply_own(ev)

    def heartbeat(self, host: str, ts: float) -> None:
        with self.lock:
            cl = self.host_cluster.get(host)
            if cl is not None:
                self.clusters[cl].table.set_heartbeat(host, ts)

    # ------------------------------------------------------------------ reads
    def capacity(
        self, flavors: list[str], by: str, now: float | None = None
    ) -> dict[str, dict[str, int]]:
        """{group: {flavor: count}} grouped by region, cluster, pool or host (active clusters)."""
        when = self.clock() if now is None else now
        out: dict[str, dict[str, int]] = {}
        with self.lock:
            for view in self.clusters.values():
                if view.state != "active":
                    continue
                table = view.table
                for flavor in flavors:
                    if flavor not in table.flavors:
                        counts = np.zeros(len(table), dtype=np.int64)
                    else:
                        counts = self.scheduler.capacity(table, flavor, when)
                    if by == "host":
                        for name, n in zip(table.names, counts, strict=True):
                            out.setdefault(name, {})[flavor] = int(n)
                    elif by == "pool":
                        for r, n in enumerate(counts):
                            key = f"{view.name}/{view.pool_of[r] or '-'}"
                            d = out.setdefault(key, {})
                            d[flavor] = d.get(flavor, 0) + int(n)
                    else:
                        key = {"region": view.region, "cluster": view.name}.get(by, "fleet")
                        d = out.setdefault(key, {})
                        d[flavor] = d.get(flavor, 0) + int(counts.sum())
        return out

    def host_usage(self, host: str) -> dict[str, int] | None:
        with self.lock:
            cl = self.host_cluster.get(host)
            if cl is None:
                return None
            t = self.clusters[cl].table
            r = t.index[host]
            cap, free = t.cell_cap[r], t.cell_free[r]
            return {
                "vcpus": int(t.host_cap[r, H_VCPU]),
                "vcpus_used": int(t.host_cap[r, H_VCPU] - t.host_free[r, H_VCPU]),
                "pinned_cpus": int(cap[:, C_PCPU].sum()),
                "pinned_cpus_used": int((cap[:, C_PCPU] - free[:, C_PCPU]).sum()),
                "memory_mb": int(max(t.host_cap[r, H_MEM], cap[:, C_MEM].sum())),
                "memory_mb_used": int(
                    max(
                        t.host_cap[r, H_MEM] - t.host_free[r, H_MEM],
                        (cap[:, C_MEM] - free[:, C_MEM]).sum(),
                    )
                ),
                "instances": int(t.n_instances[r]),
            }

    def pools(self) -> list[PoolRow]:
        with self.lock:
            return [
                PoolRow(v.name, name, trait)
                for v in self.clusters.values()
                for name, trait in sorted(v.pools.items())
            ]

    def host_count(self) -> int:
        with self.lock:
            return sum(len(v.table) for v in self.clusters.values())

    def cluster_hosts(self) -> dict[str, int]:
        with self.lock:
            return {name: len(v.table) for name, v in self.clusters.items()}

    def group_members(self, gid: str) -> int:
        """How many members the set with key `gid` has."""
        with self.lock:
            return sum(
                sum(v.table.group_rows.get(gid, {}).values()) for v in self.clusters.values()
            )


def _payload_set(p: dict[str, Any]) -> str | None:
    """The key of the set an `instance_claimed` / `instance_released` event's instance is in."""
    group = p.get("server_group")
    return None if group is None else set_key(p.get("project", "default"), group)
