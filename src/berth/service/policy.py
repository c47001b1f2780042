"""The multi-cloud policy pipeline (`berth.policy.pipeline.PolicyEngine`) inside a replica.

With `berth serve --policy FILE`, a replica also holds a `PolicyEngine` whose topology is built
from the database (regions with a parent are IDCs; clusters, networks with free IPs, images,
deployment sets, instance metadata) and whose clusters share the replica's own `HostTable`s, so
the event log keeps both exact at once. `POST /v1/schedule` runs the engine's pipeline (pre-check,
deployment set, flavor candidates by business type and user, placement, preemption) to decide,
then commits through the store exactly as `POST /v1/placements` does: generations, re-verification,
one transaction, bounded retries. The engine's own in-memory `commit` is not used: the database
is the one source of truth, and the engine's view follows it through events.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from berth.core.config import profile
from berth.core.engine import FilterScheduler
from berth.policy.capacity import CapacityCounter
from berth.policy.model import Business, DeploymentScope, Policy
from berth.policy.outcome import Failure, Placement, ScheduleRequest
from berth.policy.pipeline import PolicyEngine
from berth.policy.topology import Cluster, DeploymentSet, Idc, InstanceMeta, Topology
from berth.store.errors import AlreadyExistsError, GenerationConflictError, PlanRejectedError
from berth.store.footprint import to_named
from berth.store.repo import (
    CommitResult,
    GroupRow,
    HostCapacity,
    Idempotent,
    InstanceRow,
    NewInstance,
    Outcome,
    Store,
)

if TYPE_CHECKING:
    from berth.service.state import Replica


def make_engine(policy: Policy, service_down_time: float) -> PolicyEngine:
    """The engine with the policy's scheduler, its compute filter using the service's age."""
    cfg = policy.placement.scheduler or profile(policy.placement.profile)
    params = dict(cfg.filter_params)
    if "compute" in cfg.filters:
        params["compute"] = {**params.get("compute", {}), "service_down_time": service_down_time}
    scheduler = FilterScheduler.from_config(cfg.model_copy(update={"filter_params": params}))
    return PolicyEngine(policy, None, scheduler=scheduler)


def ensure_catalogue(store: Store, policy: Policy) -> int:
    """Record the policy's concrete flavors and PCI aliases (those missing); returns how many."""
    engine = PolicyEngine(policy)
    known = {f.name for f in store.list_flavors()}
    added = 0
    if policy.pci_aliases:
        store.put_pci_aliases(policy.pci_aliases)
    for name, flavor in sorted(engine.catalogue.flavors.items()):
        if name not in known:
            try:
                store.add_flavor(flavor)
                added += 1
            except AlreadyExistsError:
                pass  # another replica was faster
    return added


def build_topology(
    replica: Replica, instances: list[InstanceRow], images: list[dict[str, Any]]
) -> Topology:
    """The engine's topology over the replica's tables (caller holds the replica's lock)."""
    engine = replica.engine
    assert engine is not None
    topo = Topology(engine.catalogue)
    defaults = engine.policy.deployment_sets
    for gid, g in replica.groups.items():
        topo.sets[gid] = DeploymentSet(
            gid, g.max_size or defaults.max_size, DeploymentScope(g.scope)
        )
    for name, parent in replica.regions.items():
        top = parent or name
        topo.regions.setdefault(top, [])
        topo.regions[top].append(name)
        present = {
            i["name"]
            for i in images
            if i["clusters"] is None
            or any(
                replica.clusters[c].region == name for c in i["clusters"] if c in replica.clusters
            )
        }
        topo.idcs[name] = Idc(name, top, present, None)
    networks = replica.networks
    for view in replica.clusters.values():
        idc = topo.idcs[view.region]
        cluster = Cluster(
            name=view.name,
            idc=idc.name,
            region=idc.region,
            table=view.table,
            networks={n: free for (c, n), free in networks.items() if c == view.name},
            enabled=view.state == "active",
        )
        topo.clusters[view.name] = cluster
        idc.clusters.append(view.name)
    for inst in instances:
        cluster = topo.clusters[inst.cluster]
        cluster.note(inst.id, inst.host, _meta(inst.business_type, inst.created_at, inst))
        if inst.server_group is not None and inst.server_group in topo.sets:
            topo.sets[inst.server_group].members[inst.id] = inst.cluster
    return topo


def _meta(business: str, created_at: float, inst: Any) -> InstanceMeta:
    try:
        kind = Business(business)
    except ValueError:
        kind = Business.ON_DEMAND
    project = inst.project if hasattr(inst, "project") else inst.get("project", "default")
    group = inst.server_group if hasattr(inst, "server_group") else inst.get("server_group")
    return InstanceMeta(kind, created_at, project, group)


def install(replica: Replica, instances: list[InstanceRow], images: list[dict[str, Any]]) -> None:
    engine = replica.engine
    assert engine is not None
    engine.topology = build_topology(replica, instances, images)
    engine.counter = CapacityCounter(engine.scheduler, engine.catalogue)


def on_claimed(
    replica: Replica, cluster_name: str, host: str, p: dict[str, Any], ts: float
) -> None:
    engine = replica.engine
    if engine is None:
        return
    cluster = engine.topology.clusters.get(cluster_name)
    if cluster is None:
        return
    iid = p["instance_id"]
    cluster.note(iid, host, _meta(p.get("business_type", "on-demand"), p.get("created_at", ts), p))
    group = p.get("server_group")
    if group is not None and group in engine.topology.sets:
        engine.topology.sets[group].members[iid] = cluster_name
    net = p.get("network")
    if net is not None and net in cluster.networks:
        cluster.networks[net] -= 1


def on_group_added(replica: Replica, p: dict[str, Any]) -> None:
    engine = replica.engine
    if engine is None or p["id"] in engine.topology.sets:
        return
    size = p.get("max_size") or engine.policy.deployment_sets.max_size
    engine.topology.sets[p["id"]] = DeploymentSet(
        p["id"], size, DeploymentScope(p.get("scope", "host"))
    )


def on_released(replica: Replica, cluster_name: str, host: str, p: dict[str, Any]) -> None:
    engine = replica.engine
    if engine is None:
        return
    cluster = engine.topology.clusters.get(cluster_name)
    if cluster is None:
        return
    iid = p["instance_id"]
    cluster.forget(iid, host)
    for ds in engine.topology.sets.values():
        ds.members.pop(iid, None)
    net = p.get("network")
    if net is not None and net in cluster.networks:
        cluster.networks[net] += 1


# ---------------------------------------------------------------------------- scheduling
class PolicyFailureError(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class Scheduled:
    placement_id: str
    placement: Placement
    commit: CommitResult
    attempts: int
    decision_ms: float
    response: dict[str, Any] | None = None


def schedule(
    replica: Replica,
    request: ScheduleRequest,
    *,
    idempotency: tuple[str, str, str] | None = None,
    response: Callable[[Scheduled], dict[str, Any]] | None = None,
) -> Scheduled:
    """Decide with the policy engine on the replica's tables, commit through the store."""
    from berth.service.state import BadRequestError, ContentionError

    engine = replica.engine
    if engine is None:
        raise BadRequestError("policy", "this replica runs without a policy (serve --policy)")
    started = time.perf_counter()
    placement_id = "p-" + secrets.token_hex(8)
    ids = tuple(f"i-{secrets.token_hex(8)}" for _ in range(request.count))
    request = request.model_copy(update={"instance_ids": ids})
    _ensure_set(replica, request)
    last = ""
    with replica.policy_lock:
        for attempt in range(1, replica.config.max_attempts + 1):
            with replica.lock:
                if replica.needs_reload:
                    replica.reload_locked()
                t0 = time.perf_counter()
                outcome = engine.decide(request, replica.clock())
                decision_ms = (time.perf_counter() - t0) * 1e3
                if isinstance(outcome, Failure):
                    raise PolicyFailureError(outcome)
                placement = outcome
                view = replica.clusters[placement.cluster]
                table = view.table
                touched = set(placement.decision.generations)
                touched |= {table.allocations[i].host for i in placement.evictions}
                host_gens = {h: int(table.generation[table.index[h]]) for h in touched}
                group_gens = {}
                if request.deployment_set is not None:
                    group_gens[request.deployment_set] = replica.groups[
                        request.deployment_set
                    ].generation
                new = [
                    NewInstance(
                        id=sel.instance_id,
                        host=sel.host,
                        cluster=placement.cluster,
                        flavor=placement.flavor,
                        footprint=to_named(sel.cell_use, sel.host_use, table.device_types),
                        project=request.project,
                        server_group=request.deployment_set,
                        business_type=request.business.value,
                        preemptible=request.business == Business.PREEMPTIBLE,
                        network=placement.network,
                    )
                    for sel in placement.decision.selections
                ]
                caps = {
                    h: HostCapacity(
                        table.cell_cap[table.index[h]].copy(),
                        table.host_cap[table.index[h]].copy(),
                        list(table.device_types),
                    )
                    for h in touched
                }
                done = Scheduled(placement_id, placement, CommitResult(), attempt, decision_ms)
                if response is not None:
                    done.response = response(done)
                idem = None
                if idempotency is not None and done.response is not None:
                    idem = Idempotent(*idempotency, 201, done.response)
                replica.hold(touched)
            try:
                done.commit = replica.store.commit_placement(
                    placement_id=placement_id,
                    instances=new,
                    host_generations=host_gens,
                    group_generations=group_gens,
                    capacities=caps,
                    evict=[(i, f"preempted by {placement_id}") for i in placement.evictions],
                    idempotent=idem,
                    preemptible_limit=_limit(engine, placement, request),
                    outcome=Outcome(
                        "success",
                        "placed",
                        placement.flavor,
                        request.project,
                        request.count,
                        (time.perf_counter() - started) * 1e3,
                    ),
                )
            except (GenerationConflictError, PlanRejectedError) as exc:
                last = str(exc)
                with replica.lock:
                    if isinstance(exc, PlanRejectedError) or attempt >= 2:
                        replica.needs_reload = True  # the cache missed something: reload
                    replica.release_hold(touched)
                replica.sync()  # catch up with whoever won, then decide again
                continue
            except BaseException:
                with replica.lock:
                    replica.release_hold(touched)
                raise
            with replica.lock:
                replica.apply_committed(done.commit)
                replica.release_hold(touched)
            return done
    raise ContentionError(f"gave up after {replica.config.max_attempts} attempts (last: {last})")


def _limit(
    engine: PolicyEngine, placement: Placement, request: ScheduleRequest
) -> tuple[str, int] | None:
    """The IDC's preemptible limit, re-checked in the commit (None: not preemptible, no limit)."""
    if request.business != Business.PREEMPTIBLE:
        return None
    limits = engine.policy.preemptible_limits
    limit = limits.idcs.get(placement.idc, limits.default)
    return None if limit is None else (placement.idc, limit)


def _ensure_set(replica: Replica, request: ScheduleRequest) -> None:
    from berth.service.state import BadRequestError

    name = request.deployment_set
    if name is None:
        return
    group = replica.groups.get(name)
    if group is not None:
        if group.project != request.project:
            raise BadRequestError(
                "deployment_set",
                f"unknown deployment set {name!r} in project {request.project!r}",
                "unknown_deployment_set",
            )
        return
    engine = replica.engine
    assert engine is not None
    defaults = engine.policy.deployment_sets
    if not defaults.create_on_use:
        raise BadRequestError(
            "deployment_set", f"unknown deployment set {name!r}", "unknown_deployment_set"
        )
    with contextlib.suppress(AlreadyExistsError):
        replica.store.add_group(
            GroupRow(
                name, request.project, "anti-affinity", 1, defaults.max_size, 0, defaults.scope
            )
        )
    replica.sync()


# ---------------------------------------------------------------------------- loading
def load_topology_into(store: Store, policy: Policy, spec: Any, now: float | None = None) -> None:
    """Record a policy topology (`berth.policy.model.TopologySpec`) in an empty store.

    Regions' IDCs become regions with a parent, clusters keep their networks (free IPs) and
    images, disabled clusters are recorded as having left, and running instances keep their
    exact footprints (as the core claims them), business type, creation time and set.
    """
    from berth.store.repo import PoolRow

    ensure_catalogue(store, policy)
    engine = PolicyEngine(policy, spec)
    shift = 0.0 if now is None or spec.now is None else now - spec.now
    for ds in spec.deployment_sets:
        store.add_group(GroupRow(ds.name, "default", "anti-affinity", 1, ds.max_size, 0, ds.scope))
    images: dict[str, list[str]] = {}
    for region in spec.regions:
        for idc in region.idcs:
            store.add_region(idc.name, parent=region.name)
            for cl in idc.clusters:
                store.add_cluster(cl.name, idc.name)
                for pool in policy.pools:
                    if len(pool.traits) == 1:
                        store.add_pool(PoolRow(cl.name, pool.name, pool.traits[0]))
                for net in cl.networks:
                    store.add_ip_pool(net.name, cl.name, "0.0.0.0/0", net.free_ips)
                hosts = [
                    (
                        h.model_copy(update={"last_heartbeat": h.last_heartbeat + shift})
                        if h.last_heartbeat is not None
                        else h,
                        None,
                    )
                    for h in cl.hosts
                ]
                store.add_hosts(cl.name, hosts)
                for image in idc.images:
                    images.setdefault(image, []).append(cl.name)
    for name, clusters in sorted(images.items()):
        store.add_image(
            {
                "name": name,
                "architecture": None,
                "hypervisor_type": None,
                "required_traits": [],
                "clusters": clusters,
            }
        )
    for region in spec.regions:
        for idc in region.idcs:
            for cl in idc.clusters:
                cluster = engine.topology.clusters[cl.name]
                table = cluster.table
                by_host: dict[str, list[NewInstance]] = {}
                for inst in cl.instances:
                    alloc = table.allocations[inst.id]
                    by_host.setdefault(inst.host, []).append(
                        NewInstance(
                            id=inst.id,
                            host=inst.host,
                            cluster=cl.name,
                            flavor=inst.flavor,
                            footprint=to_named(alloc.cell_use, alloc.host_use, table.device_types),
                            project=inst.project,
                            server_group=inst.deployment_set,
                            business_type=inst.business.value,
                            preemptible=inst.business == Business.PREEMPTIBLE,
                            migratable=inst.migratable,
                            created_at=inst.created_at + shift,
                        )
                    )
                for host, new in by_host.items():
                    row = table.index[host]
                    gens = {g.id: g.generation for g in store.list_groups()}
                    store.commit_placement(
                        placement_id="topology",
                        instances=new,
                        host_generations={host: store.get_host(host).generation},
                        group_generations={
                            i.server_group: gens[i.server_group] for i in new if i.server_group
                        },
                        capacities={
                            host: HostCapacity(
                                table.cell_cap[row].copy(),
                                table.host_cap[row].copy(),
                                list(table.device_types),
                            )
                        },
                    )
                if not cl.enabled:
                    store.set_cluster_state(cl.name, "left")
