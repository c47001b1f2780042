"""Committing a placement: re-check everything the decision relied on, then apply it all or
nothing (victims released, the core's `commit`, instance metadata and set members noted).

A check that no longer holds raises `PolicyConflictError` and leaves everything as it was
(docs/policy.md, "Commit").
"""

from __future__ import annotations

from collections.abc import Callable

from berth.core.engine import commit
from berth.core.errors import ClaimError, StaleGenerationError
from berth.core.table import Allocation, HostTable
from berth.policy.deployment_sets import check_set, resolve_set
from berth.policy.errors import PolicyConflictError
from berth.policy.model import Business, DeploymentSetSpec, Policy
from berth.policy.outcome import Eviction, Placement
from berth.policy.precheck import preemptible_limit
from berth.policy.topology import Cluster, DeploymentSet, InstanceMeta, Topology


def recheck(
    topology: Topology,
    policy: Policy,
    placement: Placement,
    exists: Callable[[str], bool],
) -> tuple[Cluster, DeploymentSet | None, list[Allocation]]:
    """The placement's cluster, deployment set and victims, when the decision still holds."""
    cluster = topology.clusters.get(placement.cluster)
    if cluster is None:
        raise PolicyConflictError(f"cluster {placement.cluster} has left")
    request = placement.request
    ids = placement.instance_ids
    for iid in ids:
        if exists(iid):
            raise PolicyConflictError(f"instance {iid} already exists")
    net = placement.network
    if net is not None and cluster.networks.get(net, 0) < len(ids):
        raise PolicyConflictError(f"network {net} no longer has {len(ids)} free IPs")
    if request.business == Business.PREEMPTIBLE:
        limit = preemptible_limit(policy, cluster.idc)
        current = topology.preemptible_count(cluster.idc)
        if limit is not None and current + len(ids) > limit:
            raise PolicyConflictError(f"IDC {cluster.idc} reached its preemptible limit {limit}")
    ds = resolve_set(topology, policy, request)
    if ds is not None:
        check_set(topology, ds, cluster, placement)
    victims = _victims(cluster, placement)
    table = cluster.table
    for host, generation in placement.decision.generations.items():
        expected = int(table.generation[table.row(host)]) + sum(
            1 for v in victims if v.host == host
        )
        if expected != generation:
            raise PolicyConflictError(f"host {host} changed since the decision")
    return cluster, ds, victims


def _victims(cluster: Cluster, placement: Placement) -> list[Allocation]:
    victims: list[Allocation] = []
    for iid in placement.evictions:
        alloc = cluster.table.allocations.get(iid)
        if alloc is None or not cluster.is_preemptible(alloc):
            raise PolicyConflictError(f"victim {iid} is gone or no longer preemptible")
        victims.append(alloc)
    return victims


def apply(
    topology: Topology,
    cluster: Cluster,
    placement: Placement,
    ds: DeploymentSet | None,
    victims: list[Allocation],
    now: float,
) -> tuple[Eviction, ...]:
    """Apply a re-checked placement; on a core conflict undo everything and raise."""
    table = cluster.table
    created = ds is not None and ds.name not in topology.sets
    if ds is not None and created:
        topology.add_deployment_set(
            DeploymentSetSpec(name=ds.name, max_size=ds.max_size, scope=ds.scope)
        )
    before = {v.instance_id: int(table.generation[table.row(v.host)]) for v in victims}
    for v in victims:
        table.release(v.instance_id)
    try:
        commit(table, placement.decision)
    except (StaleGenerationError, ClaimError) as exc:
        _restore(table, victims, before)
        if ds is not None and created:
            topology.remove_deployment_set(ds.name)
        raise PolicyConflictError(str(exc)) from None
    evicted = _forget_victims(topology, cluster, victims, tuple(placement.instance_ids))
    _note_instances(topology, cluster, placement, ds, now)
    return evicted


def forget_member(topology: Topology, cluster: Cluster, instance_id: str, host: str) -> str:
    """Drop an ended instance's metadata and set membership; its user ('unknown' if none)."""
    meta = cluster.forget(instance_id, host)
    if meta is not None and meta.deployment_set is not None:
        found = topology.sets.get(meta.deployment_set)
        if found is not None:
            found.members.pop(instance_id, None)
    return meta.user if meta is not None else "unknown"


def _forget_victims(
    topology: Topology, cluster: Cluster, victims: list[Allocation], ids: tuple[str, ...]
) -> tuple[Eviction, ...]:
    evicted = []
    for v in victims:
        user = forget_member(topology, cluster, v.instance_id, v.host)
        evicted.append(Eviction(v.instance_id, cluster.name, v.host, v.flavor, user, ids))
    return tuple(evicted)


def _note_instances(
    topology: Topology,
    cluster: Cluster,
    placement: Placement,
    ds: DeploymentSet | None,
    now: float,
) -> None:
    """Record the new instances' metadata, set membership and network IPs."""
    request = placement.request
    for sel in placement.decision.selections:
        cluster.note(
            sel.instance_id,
            sel.host,
            InstanceMeta(request.business, now, request.user, request.deployment_set),
        )
        if ds is not None:
            topology.sets[ds.name].members[sel.instance_id] = cluster.name
    if placement.network is not None:
        cluster.networks[placement.network] -= len(placement.decision.selections)


def _restore(table: HostTable, victims: list[Allocation], generations: dict[str, int]) -> None:
    """Put released victims back exactly (footprints and generations) after a failed commit."""
    for v in reversed(victims):
        table.claim(
            v.instance_id,
            v.host,
            v.flavor,
            v.cell_use,
            v.host_use,
            server_group=v.server_group,
            project=v.project,
            migratable=v.migratable,
        )
        table.generation[table.row(v.host)] = generations[v.instance_id]
