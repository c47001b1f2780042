"""A cluster joins with its driver (its inventory imported) and leaves (scheduling stops).

Joining checks everything before the first write: the config (`registry.check_config`), the
region or IDC it joins, that the cloud answers, that none of its host names is taken, and that
every server it runs fits its host in Berth's claim rule (`HostTable.from_fleet` claims them
all). Then it records the cluster (`joining`), its aggregates, PCI aliases and the flavors the
catalogue lacks, its hosts, each running server as an instance with its exact footprint and an
adopted server record, and marks it `joined`. Each server group becomes a deployment set of its
project (id = the cloud's group id) with its members; the members are recorded as they run,
not checked against the policy (a cloud can be in a state its policy forbids: soft policies,
forced hosts). A join that fails after the checks leaves the cluster `joining`, for
`DELETE /v1/clusters/{name}` to take away.

Leaving marks the cluster `left` (no placement chooses it), stops its change feed and drops its
driver; its hosts, instances and the servers in the cloud stay as they are.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from berth.cloud.driver import CloudDriver, CloudError
from berth.core.errors import BerthError, SpecError
from berth.core.flavors import parse_flavor
from berth.core.model import Fleet
from berth.core.table import HostTable
from berth.service.clouds.errors import CloudUnavailableError
from berth.service.clouds.registry import CloudRegistry, check_config
from berth.store.errors import AlreadyExistsError, InvalidReferenceError
from berth.store.footprint import to_named
from berth.store.repo import CloudClusterRow, GroupRow, HostCapacity, NewInstance, Store

log = logging.getLogger("berth.service.clouds")


def inventory_of(driver: CloudDriver) -> Fleet:
    try:
        return driver.inventory()
    except CloudError as exc:
        raise CloudUnavailableError(f"cluster {driver.cluster}: inventory: {exc}") from None


def join(
    store: Store,
    registry: CloudRegistry,
    name: str,
    region: str,
    kind: str,
    config: Mapping[str, Any],
) -> tuple[CloudClusterRow, CloudDriver]:
    """Import the cluster `name` into `region` (a region or an IDC); its row and driver."""
    check_config(kind, config)
    if region not in {r["name"] for r in store.list_regions()}:
        raise InvalidReferenceError("region", f"unknown region or IDC {region!r}")
    if any(c.name == name for c in store.list_clusters()):
        raise AlreadyExistsError("cluster", name)
    driver = registry.factory(name, kind, config)
    fleet = inventory_of(driver)
    taken = {h.host.name for h in store.list_hosts()} & {h.name for h in fleet.hosts}
    if taken:
        raise AlreadyExistsError("host", sorted(taken)[0])
    fleet = _usable(fleet)
    try:
        table = HostTable.from_fleet(_without_groups(fleet))
    except (BerthError, ValueError) as exc:
        raise CloudUnavailableError(f"cluster {name}: its inventory does not load: {exc}") from None
    try:
        servers = {s.name: s for s in driver.servers()}
    except CloudError as exc:
        raise CloudUnavailableError(f"cluster {name}: servers: {exc}") from None
    store.add_cluster(name, region)
    store.add_cloud(name, kind, dict(config))
    _record(store, name, fleet, table, servers)
    store.heartbeat_cluster(name, time.time())
    store.set_cloud_state(name, "joined")
    return store.get_cloud(name), driver


def _without_groups(fleet: Fleet) -> Fleet:
    """The fleet for the claim check: the servers run where they run, whatever their groups'
    policies say (the sets are recorded as they are, not checked)."""
    return fleet.model_copy(
        update={
            "server_groups": [],
            "instances": [i.model_copy(update={"server_group": None}) for i in fleet.instances],
        }
    )


def _usable(fleet: Fleet) -> Fleet:
    """The inventory less the flavors Berth cannot parse (logged: a cloud may carry extra
    specs Berth does not model; a server of such a flavor then fails the join)."""
    aliases = {a.name: a.device_type for a in fleet.pci_aliases}
    probe = HostTable(
        sorted(
            {d for h in fleet.hosts for c in h.numa_cells for d in c.pci} | set(aliases.values())
        )
    )
    keep = []
    for flavor in fleet.flavors:
        try:
            probe.add_flavor(parse_flavor(flavor, aliases))
        except (SpecError, ValueError) as exc:
            log.warning("flavor %s left out: %s", flavor.name, exc)
            continue
        keep.append(flavor)
    return fleet.model_copy(update={"flavors": keep})


def _record(
    store: Store, cluster: str, fleet: Fleet, table: HostTable, servers: Mapping[str, Any]
) -> None:
    if fleet.aggregates:
        store.put_aggregates(fleet.aggregates)
    if fleet.pci_aliases:
        store.put_pci_aliases(fleet.pci_aliases)
    known = {f.name for f in store.list_flavors()}
    for flavor in fleet.flavors:
        if flavor.name not in known:
            store.add_flavor(flavor)
    owner: dict[str, str] = {}
    for g in fleet.server_groups:
        owner[g.id] = g.project or "default"
        with contextlib.suppress(AlreadyExistsError):  # joined before, or another cluster's
            store.add_group(
                GroupRow(g.id, owner[g.id], g.policy.value, g.max_server_per_host, None, 0)
            )
    store.add_hosts(cluster, [(h, None) for h in fleet.hosts])
    by_host: dict[str, list[NewInstance]] = {}
    for inst in fleet.instances:
        alloc = table.allocations[inst.id]
        by_host.setdefault(inst.host, []).append(
            NewInstance(
                id=inst.id,
                host=inst.host,
                cluster=cluster,
                flavor=inst.flavor,
                footprint=to_named(alloc.cell_use, alloc.host_use, table.device_types),
                project=inst.project,
                # a member of another project's group is not in Berth's set (sets are per project)
                server_group=inst.server_group
                if owner.get(inst.server_group or "") == inst.project
                else None,
                migratable=inst.migratable,
            )
        )
    for host, new in sorted(by_host.items()):
        row = table.index[host]
        store.commit_placement(
            placement_id="cloud-import",
            instances=new,
            host_generations={host: store.get_host(host).generation},
            group_generations={},
            capacities={
                host: HostCapacity(
                    table.cell_cap[row].copy(), table.host_cap[row].copy(), list(table.device_types)
                )
            },
        )
        for claimed in new:
            server = servers.get(claimed.id)
            if server is not None:
                store.adopt_server(
                    claimed.id, cluster, server.id, host, claimed.flavor, server.state.value
                )


def leave(store: Store, registry: CloudRegistry, name: str) -> CloudClusterRow:
    """Stop scheduling on `name`; its servers and Berth's records of them stay."""
    store.set_cluster_state(name, "left")
    store.set_cloud_state(name, "leaving")
    registry.drop(name)
    return store.get_cloud(name)
