"""The demo topology: the bundled demo fleet as two IDCs, three clusters and five pools.

Zones become clusters (`az1`, `az2` in region `idc-north`; `az3` in `idc-east`); each cluster has
the pools shared, enterprise, dpdk, local-ssd and gpu, defined by the hosts' pool traits. The
demo's instances are recorded with their exact footprints, and heartbeats are shifted so that the
hosts that were live in the snapshot are live now.
"""

from __future__ import annotations

import time

from berth.core.model import Fleet, Host
from berth.core.table import HostTable
from berth.fleet.demo import build_demo_fleet
from berth.store.footprint import to_named
from berth.store.repo import GroupRow, HostCapacity, NewInstance, PoolRow, Store, instance_set_key

REGIONS = {"az1": "idc-north", "az2": "idc-north", "az3": "idc-east"}
POOLS = {
    "CUSTOM_POOL_SHARED": "shared",
    "CUSTOM_POOL_ENTERPRISE": "enterprise",
    "CUSTOM_POOL_DPDK": "dpdk",
    "CUSTOM_POOL_LOCAL_SSD": "local-ssd",
    "CUSTOM_POOL_GPU": "gpu",
}


def pool_of(host: Host) -> str | None:
    return next((POOLS[t] for t in host.traits if t in POOLS), None)


def load_fleet_into(
    store: Store,
    fleet: Fleet,
    regions: dict[str, str] | None = None,
    now: float | None = None,
    project_prefix: str = "",
) -> dict[str, int]:
    """Record `fleet` in an empty store: zone -> cluster, pools by trait, instances exactly."""
    regions = regions or {h.availability_zone: "region-1" for h in fleet.hosts}
    shift = 0.0
    if now is not None and fleet.now is not None:
        shift = now - fleet.now
    for region in sorted(set(regions.values())):
        store.add_region(region)
    store.put_aggregates(fleet.aggregates)
    store.put_pci_aliases(fleet.pci_aliases)
    for flavor in fleet.flavors:
        store.add_flavor(flavor)
    for group in fleet.server_groups:
        store.add_group(
            GroupRow(group.id, "default", group.policy.value, group.max_server_per_host, None, 0)
        )
    zones = sorted({h.availability_zone for h in fleet.hosts})
    for zone in zones:
        store.add_cluster(zone, regions.get(zone, "region-1"))
        for trait, pool in POOLS.items():
            if any(trait in h.traits for h in fleet.hosts if h.availability_zone == zone):
                store.add_pool(PoolRow(zone, pool, trait))
        hosts = []
        for h in fleet.hosts:
            if h.availability_zone != zone:
                continue
            if h.last_heartbeat is not None and shift:
                h = h.model_copy(update={"last_heartbeat": h.last_heartbeat + shift})
            hosts.append((h, pool_of(h)))
        store.add_hosts(zone, hosts)
    # instances, exactly as the core placed them (group members keep their group's project)
    table = HostTable.from_fleet(fleet)
    zone_of = {h.name: h.availability_zone for h in fleet.hosts}
    by_host: dict[str, list[NewInstance]] = {}
    for inst in fleet.instances:
        alloc = table.allocations[inst.id]
        project = "default" if inst.server_group else project_prefix + inst.project
        by_host.setdefault(inst.host, []).append(
            NewInstance(
                id=inst.id,
                host=inst.host,
                cluster=zone_of[inst.host],
                flavor=inst.flavor,
                footprint=to_named(alloc.cell_use, alloc.host_use, table.device_types),
                project=project,
                server_group=inst.server_group,
                migratable=inst.migratable,
            )
        )
    tables: dict[str, HostTable] = {}
    for host_name, new in by_host.items():
        rec = store.get_host(host_name)
        t = tables.get(rec.cluster)
        if t is None:
            t = tables[rec.cluster] = HostTable.from_fleet(
                Fleet(
                    aggregates=fleet.aggregates,
                    pci_aliases=fleet.pci_aliases,
                    hosts=[h for h in fleet.hosts if h.availability_zone == rec.cluster],
                )
            )
        row = t.index[host_name]
        cap = HostCapacity(t.cell_cap[row].copy(), t.host_cap[row].copy(), list(t.device_types))
        group_gens = {g.key: g.generation for g in store.list_groups()}
        groups = {
            key: group_gens[key]
            for i in new
            if (key := instance_set_key(i.project, i.server_group)) is not None
        }
        store.commit_placement(
            placement_id="demo",
            instances=new,
            host_generations={host_name: rec.generation},
            group_generations=groups,
            capacities={host_name: cap},
        )
    return store.counts()


def load_demo(store: Store, now: float | None = None) -> dict[str, int]:
    """Load the demo topology into an empty store (heartbeats shifted to `now`)."""
    return load_fleet_into(
        store, build_demo_fleet(), REGIONS, now if now is not None else time.time()
    )
