"""One replica's view of the fleet: a `HostTable` per cluster, kept current from the event log.

The database is the one source of truth; a replica's tables are a cache that is exact as of the
last event it applied. A placement decides on the cache, then commits with the generations it
read (`Store.commit_placement`): if another replica changed a touched host or deployment set
meanwhile, the commit fails whole, the replica catches up on the event log and decides again,
a bounded number of times.

Events are applied with the core's own rules (`berth.core.drivers.CachingScheduler.apply`): an
event not newer than the cached host is ignored, one that skips a generation makes the replica
reload from a consistent snapshot. Events the cache cannot apply incrementally (hosts added,
clusters joining or leaving, pools, aggregates) also trigger a reload.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.config import SchedulerConfig, WeigherConfig, profile
from berth.core.drivers import Applied, CachingScheduler
from berth.core.engine import Decision, FilterScheduler
from berth.core.errors import BerthError, ClaimError, SpecError
from berth.core.events import HostStateChanged, InstanceClaimed, InstanceReleased
from berth.core.explain import NoValidHost
from berth.core.flavors import parse_flavor
from berth.core.model import Flavor, Fleet, ServerGroup
from berth.core.request import ImageProps, RequestSpec
from berth.core.resources import C_MEM, C_PCPU, H_MEM, H_VCPU
from berth.core.table import HostTable
from berth.policy.model import Policy
from berth.policy.pipeline import PolicyEngine
from berth.store.defrag import DefragStore, MigrationAllocationError, is_migration
from berth.store.errors import GenerationConflictError, PlanRejectedError
from berth.store.footprint import to_arrays, to_named
from berth.store.repo import (
    CommitResult,
    EventRow,
    GroupRow,
    HostCapacity,
    Idempotent,
    NewInstance,
    Outcome,
    PoolRow,
    Snapshot,
    Store,
)

log = logging.getLogger("berth.service")

I64 = npt.NDArray[np.int64]

SYNC_BATCH = 2000
GAP_TIMEOUT = 30.0
"""Seconds an unseen event id below the newest is asked for again before it counts as a
sequence value whose transaction rolled back (longer than any commit takes)."""
MAX_GAPS = 10_000

try:  # the multi-cloud policy layer (issue 3) may not be installed alongside
    from berth.policy.preemption import plan_preemption
except ImportError:  # pragma: no cover - depends on the checkout
    plan_preemption = None  # type: ignore[assignment]


@dataclass
class ServiceConfig:
    """What a replica needs to know; everything has a default that suits one node."""

    db_url: str
    replica_id: str = "replica-1"
    scheduler: SchedulerConfig = field(default_factory=lambda: profile("berth"))
    service_down_time: float = 60.0
    max_attempts: int = 8
    poll_interval: float = 0.5
    heartbeat_interval: float = 2.0
    reconcile_interval: float = 60.0
    cluster_order: str = "most_free"  # most_free | least_free | name
    token_cache_ttl: float = 5.0
    preemption: bool = True
    policy: Policy | None = None
    replica_spread: float = 0.0
    """Weight of the replica-spread weigher (0: off); see `berth.service.spread`."""
    """The multi-cloud policy (`berth serve --policy FILE`): enables POST /v1/schedule."""


@dataclass
class ClusterView:
    name: str
    region: str
    state: str
    table: HostTable
    pool_of: list[str | None]  # by table row
    pools: dict[str, str]  # pool name -> trait


class NoPlacementError(BerthError):
    """No candidate cluster fits the request; `details` says why, cluster by cluster."""

    def __init__(self, message: str, reason: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.reason = reason
        self.details = details


class ContentionError(BerthError):
    """Every attempt lost its race with another writer (bounded retries exhausted)."""


class BadRequestError(BerthError):
    def __init__(self, field_name: str, message: str, code: str = "invalid_input") -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.code = code


@dataclass(frozen=True)
class PlaceArgs:
    flavor: str
    count: int
    project: str
    region: str | None = None
    cluster: str | None = None
    pool: str | None = None
    availability_zone: str | None = None
    image: dict[str, Any] | None = None
    deployment_set: str | None = None
    same_host: tuple[str, ...] = ()
    different_host: tuple[str, ...] = ()
    business_type: str = "on-demand"
    seed: int | None = None
    network: str | None = None
    """Take one IP per instance from this network (its cluster is then the only candidate)."""


@dataclass
class Placed:
    placement_id: str
    cluster: str
    decision: Decision
    evicted: list[str]
    commit: CommitResult
    decision_ms: float
    attempts: int
    response: dict[str, Any] | None = None


@dataclass
class _Plan:
    cluster: ClusterView
    decision: Decision
    evictions: tuple[str, ...] = ()


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
        self.policy_lock = threading.Lock()
        self.engine: PolicyEngine | None = None
        if config.policy is not None:
            from berth.service.policy import make_engine

            self.engine = make_engine(config.policy, config.service_down_time)

    # ------------------------------------------------------------------ loading
    def reload(self) -> None:
        with self.lock:
            self._load(self.store.snapshot())

    def _load(self, snap: Snapshot) -> None:
        aliases = {a.name: a.device_type for a in snap.pci_aliases}
        groups = [
            ServerGroup(id=g.id, policy=g.policy, max_server_per_host=g.max_per_host)
            for g in snap.groups.values()
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
            cell_use, host_use = to_arrays(inst.placement, table.device_types)
            table.claim(
                inst.id,
                inst.host,
                inst.flavor,
                cell_use,
                host_use,
                server_group=inst.server_group,
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
        if self.engine is not None:
            from berth.service import policy

            policy.install(self, snap.instances, self.store.list_images())

    def reload_locked(self) -> None:
        """Reload from a fresh snapshot (caller holds the lock)."""
        self._load(self.store.snapshot())

    def hold(self, hosts: set[str]) -> None:
        """Mark hosts as having a commit in flight (caller holds the lock)."""
        self._pending |= hosts

    def release_hold(self, hosts: set[str]) -> None:
        self._done(hosts)

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
        with self.lock:
            for name, ts in beats:
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
                    cell_use, host_use = to_arrays(p["footprint"], view.table.device_types)
                    result = driver.apply(
                        InstanceClaimed(
                            ev.host,
                            ev.generation,
                            p["instance_id"],
                            p["flavor"],
                            cell_use,
                            host_use,
                            server_group=p.get("server_group"),
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
                        if self.engine is not None:
                            from berth.service import policy

                            policy.on_claimed(self, view.name, ev.host, p, ev.ts)
                elif kind == "instance_released":
                    result = driver.apply(
                        InstanceReleased(ev.host, ev.generation, p["instance_id"])
                    )
                    if result is Applied.APPLIED:
                        self.preemptible.pop(p["instance_id"], None)
                        if self.engine is not None:
                            from berth.service import policy

                            policy.on_released(self, view.name, ev.host, p)
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
            self._group_generation(p.get("server_group"), p.get("group_generation"))
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
            if self.engine is not None:
                from berth.service import policy

                policy.on_group_added(self, p)
        elif kind == "group_deleted":
            self.groups.pop(p["id"], None)
            for view in self.clusters.values():
                view.table.groups.pop(p["id"], None)
            if self.engine is not None:
                self.engine.topology.sets.pop(p["id"], None)
        elif kind in ("region_added",):
            self.regions.setdefault(p["name"], p.get("parent"))
            if self.engine is not None:
                self.needs_reload = True
        elif kind in ("image_added", "network_added"):
            self.needs_reload = self.needs_reload or self.engine is not None
        elif kind == "discrepancy":
            pass  # nothing the tables hold
        else:  # hosts_added, cluster_joined/left, pool_added, aggregates, aliases, unknown
            self.needs_reload = True

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
        self.groups[row.id] = row
        sg = ServerGroup(id=row.id, policy=row.policy, max_server_per_host=row.max_per_host)
        for view in self.clusters.values():
            view.table.groups[row.id] = sg
        return True

    def _group_generation(self, gid: str | None, generation: int | None) -> None:
        if gid is None or generation is None or gid not in self.groups:
            return
        g = self.groups[gid]
        if generation > g.generation:
            self.groups[gid] = GroupRow(
                g.id, g.project, g.policy, g.max_per_host, g.max_size, generation
            )

    # ------------------------------------------------------------------ placing
    def place(
        self,
        args: PlaceArgs,
        *,
        idempotency: tuple[str, str, str] | None = None,
        response: Callable[[Placed], dict[str, Any]] | None = None,
    ) -> Placed:
        """Decide and commit, retrying on conflicts; raise `NoPlacementError` or `ContentionError`.

        `idempotency` is (principal, key, request hash): the response built by `response` is
        stored in the same transaction as the claim.
        """
        started = time.perf_counter()
        placement_id = "p-" + secrets.token_hex(8)
        last_conflict = ""
        lost: dict[str, int] = {}
        group = self._group_lock(args.deployment_set)
        with group:  # one commit in flight per deployment set (its generation is shared)
            for attempt in range(1, self.config.max_attempts + 1):
                placed, touched, commit_args = self._prepare(
                    args, placement_id, attempt, started, idempotency, response
                )
                committing = time.perf_counter()
                try:
                    placed.commit = self.store.commit_placement(**commit_args)
                except (GenerationConflictError, PlanRejectedError) as exc:
                    if self.on_commit is not None:
                        self.on_commit(time.perf_counter() - committing, False)
                    last_conflict = str(exc)
                    key = getattr(exc, "name", "")
                    lost[key] = lost.get(key, 0) + 1
                    with self.lock:
                        if isinstance(exc, PlanRejectedError):  # the cache missed something
                            self.needs_reload = True
                        self._done(touched)
                    self.sync()  # catch up with whoever won, then decide again
                    with self.lock:
                        # a race lost to a commit whose event has now been applied is plain
                        # contention (a hot host): decide again on the caught-up table; only
                        # a loss the log does not explain means the cache missed something
                        if not self._explained(exc, commit_args, lost[key]):
                            self.needs_reload = True
                    continue
                except BaseException:
                    with self.lock:
                        self._done(touched)
                    raise
                if self.on_commit is not None:
                    self.on_commit(time.perf_counter() - committing, True)
                with self.lock:
                    for ev in placed.commit.events:
                        self._apply_own(ev)
                    for gid, gen in placed.commit.groups.items():
                        self._group_generation(gid, gen)
                    self._done(touched)
                return placed
        raise ContentionError(
            f"gave up after {self.config.max_attempts} attempts lost to concurrent writers "
            f"(last: {last_conflict})"
        )

    def _explained(self, exc: BerthError, commit_args: dict[str, Any], losses: int) -> bool:
        """Whether the cache, after a sync, has moved past the generation a lost commit read
        (caller holds the lock); other conflicts count as explained once."""
        if isinstance(exc, GenerationConflictError) and exc.kind == "host":
            cl = self.host_cluster.get(exc.name)
            read = commit_args["host_generations"].get(exc.name)
            if cl is None or read is None:
                return False
            table = self.clusters[cl].table
            return int(table.generation[table.index[exc.name]]) != read
        if isinstance(exc, GenerationConflictError) and exc.kind == "deployment set":
            group = self.groups.get(exc.name)
            read = commit_args["group_generations"].get(exc.name)
            return group is not None and read is not None and group.generation != read
        return losses < 2

    def _group_lock(self, gid: str | None) -> Any:
        if gid is None:
            return contextlib.nullcontext()
        with self.lock:
            return self._group_locks.setdefault(gid, threading.Lock())

    def _done(self, touched: set[str]) -> None:
        """A commit finished (caller holds the lock): its hosts may be chosen again."""
        self._pending -= touched
        self._changed.notify_all()

    def _prepare(
        self,
        args: PlaceArgs,
        placement_id: str,
        attempt: int,
        started: float,
        idempotency: tuple[str, str, str] | None,
        response: Callable[[Placed], dict[str, Any]] | None,
    ) -> tuple[Placed, set[str], dict[str, Any]]:
        """Decide on the cache and mark the touched hosts as having a commit in flight.

        Hosts with a commit in flight (from this replica's other requests) are left out of
        the decision, so concurrent requests of one replica do not race for the same host and
        the commits run in parallel. When only such hosts would fit, wait for their commits.
        """
        with self.lock:
            for _ in range(100):
                if self.needs_reload:
                    self._load(self.store.snapshot())
                busy = frozenset(self._pending)
                t0 = time.perf_counter()
                try:
                    plan = self._decide(args, placement_id, busy)
                except NoPlacementError as exc:
                    if not busy or exc.reason in ("deployment_set_full", "no_candidate_cluster"):
                        raise
                    # maybe only hosts with a commit in flight fit: wait for those commits
                    deadline = time.monotonic() + 5.0
                    while self._pending & busy and time.monotonic() < deadline:
                        self._changed.wait(timeout=0.5)
                    continue
                break
            else:  # pragma: no cover - a hundred rounds of waiting: decide on the full view
                plan = self._decide(args, placement_id, frozenset())
            decision_ms = (time.perf_counter() - t0) * 1e3
            if self.on_decision is not None:
                self.on_decision(decision_ms / 1e3)
            new, host_gens, group_gens, caps = self._claims(args, plan)
            touched = set(host_gens)
            self._pending |= touched
            placed = Placed(
                placement_id,
                plan.cluster.name,
                plan.decision,
                list(plan.evictions),
                CommitResult(),
                decision_ms,
                attempt,
            )
            try:
                idem = None
                if response is not None:
                    placed.response = response(placed)
                if idempotency is not None and placed.response is not None:
                    principal, key, digest = idempotency
                    idem = Idempotent(principal, key, digest, 201, placed.response)
            except BaseException:
                self._done(touched)
                raise
        outcome = Outcome(
            "success",
            "placed",
            args.flavor,
            args.project,
            args.count,
            (time.perf_counter() - started) * 1e3,
        )
        commit_args = {
            "placement_id": placement_id,
            "instances": new,
            "host_generations": host_gens,
            "group_generations": group_gens,
            "capacities": caps,
            "evict": [(i, f"preempted by {placement_id}") for i in plan.evictions],
            "idempotent": idem,
            "outcome": outcome,
        }
        return placed, touched, commit_args

    def _claims(
        self, args: PlaceArgs, plan: _Plan
    ) -> tuple[list[NewInstance], dict[str, int], dict[str, int], dict[str, HostCapacity]]:
        table = plan.cluster.table
        new = [
            NewInstance(
                id=s.instance_id,
                host=s.host,
                cluster=plan.cluster.name,
                flavor=args.flavor,
                footprint=to_named(s.cell_use, s.host_use, table.device_types),
                project=args.project,
                server_group=args.deployment_set,
                business_type=args.business_type,
                preemptible=args.business_type == "preemptible",
                network=args.network,
            )
            for s in plan.decision.selections
        ]
        touched = {s.host for s in plan.decision.selections}
        for iid in plan.evictions:
            touched.add(table.allocations[iid].host)
        host_gens = {h: int(table.generation[table.index[h]]) for h in touched}
        group_gens: dict[str, int] = {}
        if args.deployment_set is not None:
            group_gens[args.deployment_set] = self.groups[args.deployment_set].generation
        caps = {
            h: HostCapacity(
                table.cell_cap[table.index[h]].copy(),
                table.host_cap[table.index[h]].copy(),
                list(table.device_types),
            )
            for h in touched
        }
        return new, host_gens, group_gens, caps

    def _candidates(self, args: PlaceArgs) -> tuple[list[ClusterView], dict[str, str]]:
        rejected: dict[str, str] = {}
        out = []
        if args.region is not None and args.region not in {
            *self.regions,
            *(p for p in self.regions.values() if p),
        }:
            raise BadRequestError("region", f"unknown region {args.region!r}")
        if args.cluster is not None and args.cluster not in self.clusters:
            raise BadRequestError("cluster", f"unknown cluster {args.cluster!r}")
        image_clusters = None if args.image is None else args.image.get("clusters")
        for view in self.clusters.values():
            if args.cluster is not None and view.name != args.cluster:
                continue
            if args.region is not None and args.region not in (
                view.region,
                self.regions.get(view.region),
            ):
                continue
            if view.state != "active":
                rejected[view.name] = "cluster has left"
            elif args.flavor not in view.table.flavors:
                rejected[view.name] = f"flavor {args.flavor} is not offered"
            elif image_clusters is not None and view.name not in image_clusters:
                rejected[view.name] = f"image {args.image and args.image['name']} is not present"
            elif args.pool is not None and args.pool not in view.pools:
                rejected[view.name] = f"no pool {args.pool}"
            elif len(view.table) == 0:
                rejected[view.name] = "no hosts"
            else:
                out.append(view)
        if self.config.cluster_order == "name" or len(out) < 2:
            out.sort(key=lambda v: v.name)
        else:
            # resource room only (cached per host): ordering needs no filter passes
            free = {v.name: int(v.table.resource_counts(args.flavor).sum()) for v in out}
            sign = -1 if self.config.cluster_order == "most_free" else 1
            out.sort(key=lambda v: (sign * free[v.name], v.name))
        return out, rejected

    def _decide(
        self, args: PlaceArgs, placement_id: str, busy: frozenset[str] = frozenset()
    ) -> _Plan:
        if args.flavor not in self.flavors:
            raise BadRequestError("flavor", f"unknown flavor {args.flavor!r}", "unknown_flavor")
        if args.deployment_set is not None:
            group = self.groups.get(args.deployment_set)
            if group is None or group.project != args.project:
                raise BadRequestError(
                    "deployment_set",
                    f"unknown deployment set {args.deployment_set!r} in project {args.project!r}",
                    "unknown_deployment_set",
                )
            if group.max_size is not None:
                members = sum(
                    sum(v.table.group_rows.get(group.id, {}).values())
                    for v in self.clusters.values()
                )
                if members + args.count > group.max_size:
                    raise NoPlacementError(
                        f"deployment set {group.id} holds {members} of at most "
                        f"{group.max_size} members",
                        "deployment_set_full",
                        {"members": members, "max_size": group.max_size},
                    )
        clusters, rejected = self._candidates(args)
        seed = args.seed if args.seed is not None else secrets.randbits(31)
        ids = tuple(f"i-{secrets.token_hex(8)}" for _ in range(args.count))
        diagnoses: dict[str, Any] = {}
        now = self.clock()
        for view in clusters:
            request = _cluster_request(view, args, ids, seed, busy)
            try:
                return _Plan(view, self.scheduler.select_destinations(view.table, request, now))
            except NoValidHost as exc:
                diagnoses[view.name] = exc.diagnosis.to_dict()
            except SpecError as exc:
                raise BadRequestError("request", str(exc)) from None
        # never evict while a host this replica is committing to might turn out to fit
        if self.config.preemption and args.business_type != "preemptible" and not busy:
            plan = self._preempt(clusters, args, ids, seed, now, busy)
            if plan is not None:
                return plan
        if not clusters:
            raise NoPlacementError(
                "no candidate cluster: "
                + ("; ".join(f"{c}: {why}" for c, why in sorted(rejected.items())) or "none"),
                "no_candidate_cluster",
                {"rejected_clusters": rejected, "clusters": {}},
            )
        message = "; ".join(f"{c}: {d['message']}" for c, d in diagnoses.items())
        first = next(iter(diagnoses.values()))
        reason = first["reasons"][0]["code"] if first["reasons"] else "no_valid_host"
        raise NoPlacementError(
            message,
            reason,
            {"rejected_clusters": rejected, "clusters": diagnoses},
        )

    def _preempt(
        self,
        clusters: list[ClusterView],
        args: PlaceArgs,
        ids: tuple[str, ...],
        seed: int,
        now: float,
        busy: frozenset[str],
    ) -> _Plan | None:
        if plan_preemption is None or not self.preemptible:
            return None
        for view in clusters:
            request = _cluster_request(view, args, ids, seed, busy)
            plan = plan_preemption(
                self.scheduler,
                view.table,
                request,
                now,
                self._is_preemptible,
                self._created_at,
            )
            if plan is not None and plan.evictions:
                return _Plan(view, plan.decision, tuple(plan.evictions))
        return None

    def _is_preemptible(self, alloc: Any) -> bool:
        return alloc.instance_id in self.preemptible

    def _created_at(self, alloc: Any) -> float:
        return self.preemptible.get(alloc.instance_id, 0.0)

    def record_failure(self, args: PlaceArgs, reason: str, started: float) -> None:
        self.store.record_outcome(
            Outcome(
                "failure",
                reason,
                args.flavor,
                args.project,
                args.count,
                (time.perf_counter() - started) * 1e3,
            )
        )

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
        with self.lock:
            return sum(
                sum(v.table.group_rows.get(gid, {}).values()) for v in self.clusters.values()
            )


def _cluster_request(
    view: ClusterView, args: PlaceArgs, ids: tuple[str, ...], seed: int, busy: frozenset[str]
) -> RequestSpec:
    """The core request for one candidate cluster: the pool as a required trait, and the hosts
    this replica is still committing to left out."""
    image = args.image or {}
    traits = list(image.get("required_traits") or [])
    if args.pool is not None:
        traits.append(view.pools[args.pool])
    return RequestSpec(
        flavor=args.flavor,
        num_instances=args.count,
        availability_zone=args.availability_zone,
        image=ImageProps(
            architecture=image.get("architecture"),
            hypervisor_type=image.get("hypervisor_type"),
            required_traits=tuple(traits),
        ),
        server_group=args.deployment_set,
        same_host=args.same_host,
        different_host=args.different_host,
        ignore_hosts=tuple(h for h in busy if h in view.table.index),
        project=args.project,
        instance_ids=ids,
        seed=seed,
    )
