"""The multi-cloud policy engine (`berth.policy.pipeline.PolicyEngine`) over a replica's tables.

With `berth serve --policy FILE`, a replica also holds a `PolicyEngine` whose topology is built
from the database (regions with a parent are IDCs; clusters, networks with free IPs, images,
deployment sets, instance metadata) and whose clusters share the replica's own `HostTable`s, so
the event log keeps both exact at once: `PolicyView` is the replica's listener that keeps the
topology in step. This module also records a policy's catalogue and a policy topology in a store
(`ensure_catalogue`, `load_topology_into`). Deciding with the engine is
`berth.service.placing.multicloud`.
"""

from __future__ import annotations

import threading
from typing import Any

from berth.core.config import profile
from berth.core.engine import FilterScheduler
from berth.policy.capacity import CapacityCounter
from berth.policy.model import EVICTABLE, Business, DeploymentScope, Policy
from berth.policy.pipeline import PolicyEngine
from berth.policy.topology import Cluster, DeploymentSet, Idc, InstanceMeta, Topology
from berth.service.replica import Replica
from berth.store.errors import AlreadyExistsError
from berth.store.footprint import to_named
from berth.store.repo import (
    GroupRow,
    HostCapacity,
    InstanceRow,
    NewInstance,
    PoolRow,
    Store,
    instance_set_key,
    set_key,
)


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
    engine: PolicyEngine,
    replica: Replica,
    instances: list[InstanceRow],
    images: list[dict[str, Any]],
) -> Topology:
    """The engine's topology over the replica's tables (caller holds the replica's lock)."""
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
        key = instance_set_key(inst.project, inst.server_group)
        if key is not None and key in topo.sets:
            topo.sets[key].members[inst.id] = inst.cluster
    return topo


def _meta(business: str, created_at: float, inst: Any) -> InstanceMeta:
    try:
        kind = Business(business)
    except ValueError:
        kind = Business.ON_DEMAND
    project = inst.project if hasattr(inst, "project") else inst.get("project", "default")
    group = inst.server_group if hasattr(inst, "server_group") else inst.get("server_group")
    return InstanceMeta(kind, created_at, project, instance_set_key(project, group))


class PolicyView:
    """The replica's listener that keeps a policy engine's topology in step with its tables."""

    reload_on = frozenset({"region_added", "image_added", "network_added"})

    def __init__(self, engine: PolicyEngine) -> None:
        self.engine = engine
        self.lock = threading.Lock()
        """One multi-cloud placement at a time (the engine's decision reads the whole topology)."""

    def on_loaded(self, replica: Replica, instances: list[InstanceRow]) -> None:
        engine = self.engine
        engine.topology = build_topology(engine, replica, instances, replica.store.list_images())
        engine.counter = CapacityCounter(engine.scheduler, engine.catalogue)

    def on_claimed(self, cluster: str, host: str, payload: dict[str, Any], ts: float) -> None:
        topology = self.engine.topology
        known = topology.clusters.get(cluster)
        if known is None:
            return
        p = payload
        iid = p["instance_id"]
        meta = _meta(p.get("business_type", "on-demand"), p.get("created_at", ts), p)
        known.note(iid, host, meta)
        group = instance_set_key(p.get("project", "default"), p.get("server_group"))
        if group is not None and group in topology.sets:
            topology.sets[group].members[iid] = cluster
        net = p.get("network")
        if net is not None and net in known.networks:
            known.networks[net] -= 1

    def on_released(self, cluster: str, host: str, payload: dict[str, Any]) -> None:
        topology = self.engine.topology
        known = topology.clusters.get(cluster)
        if known is None:
            return
        iid = payload["instance_id"]
        known.forget(iid, host)
        for ds in topology.sets.values():
            ds.members.pop(iid, None)
        net = payload.get("network")
        if net is not None and net in known.networks:
            known.networks[net] += 1

    def on_group_added(self, payload: dict[str, Any]) -> None:
        engine = self.engine
        p = payload
        key = set_key(p["project"], p["id"])
        if key in engine.topology.sets:
            return
        size = p.get("max_size") or engine.policy.deployment_sets.max_size
        engine.topology.sets[key] = DeploymentSet(
            key, size, DeploymentScope(p.get("scope", "host"))
        )

    def on_group_deleted(self, key: str) -> None:
        self.engine.topology.sets.pop(key, None)


def attach_policy(replica: Replica) -> PolicyView | None:
    """Give a replica configured with a policy its engine (before its first load)."""
    policy = replica.config.policy
    if policy is None:
        return None
    view = PolicyView(make_engine(policy, replica.config.service_down_time))
    replica.listeners.append(view)
    replica.needs_reload = True
    return view


def policy_view(replica: Replica) -> PolicyView | None:
    """The replica's policy view, or None when it runs without a policy (`serve --policy`)."""
    for listener in replica.listeners:
        if isinstance(listener, PolicyView):
            return listener
    return None


def policy_engine(replica: Replica) -> PolicyEngine | None:
    """The replica's policy engine, or None when it runs without a policy."""
    view = policy_view(replica)
    return None if view is None else view.engine


# ---------------------------------------------------------------------------- loading
def load_topology_into(store: Store, policy: Policy, spec: Any, now: float | None = None) -> None:
    """Record a policy topology (`berth.policy.model.TopologySpec`) in an empty store.

    Regions' IDCs become regions with a parent, clusters keep their networks (free IPs) and
    images, disabled clusters are recorded as having left, and running instances keep their
    exact footprints (as the core claims them), business type, creation time and set.

    Everything is checked before the first write: the spec's own rules (names, deployment
    sets) when it was parsed, and every instance's claim here, by building the engine's
    topology; a load that fails leaves the store as it was.
    """
    engine = PolicyEngine(policy, spec)
    ensure_catalogue(store, policy)
    shift = 0.0 if now is None or spec.now is None else now - spec.now
    for ds in spec.deployment_sets:
        store.add_group(GroupRow(ds.name, ds.project, "anti-affinity", 1, ds.max_size, 0, ds.scope))
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
                            preemptible=inst.business in EVICTABLE,
                            migratable=inst.migratable,
                            created_at=inst.created_at + shift,
                        )
                    )
                for host, new in by_host.items():
                    row = table.index[host]
                    gens = {g.key: g.generation for g in store.list_groups()}
                    store.commit_placement(
                        placement_id="topology",
                        instances=new,
                        host_generations={host: store.get_host(host).generation},
                        group_generations={
                            key: gens[key]
                            for i in new
                            if (key := instance_set_key(i.project, i.server_group)) is not None
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
