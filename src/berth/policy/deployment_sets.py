"""Pipeline step 2 and the deployment-set rules of placement and commit.

A deployment set holds at most `max_size` members, at most one per host (scope host) or per
rack (scope rack, across the IDC); see docs/policy.md, "Deployment sets".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from berth.core.table import HostTable
from berth.policy.catalogue import Candidates
from berth.policy.errors import MultiCloudInputError, PolicyConflictError
from berth.policy.model import DeploymentScope, Policy
from berth.policy.outcome import ClusterRejection, Failure, Placement, ScheduleRequest
from berth.policy.topology import Cluster, DeploymentSet, Topology, anti_affinity_group


def resolve_set(
    topology: Topology, policy: Policy, request: ScheduleRequest
) -> DeploymentSet | None:
    """The request's deployment set: a known one, or a new one when the policy creates sets
    on use."""
    name = request.deployment_set
    if name is None:
        return None
    found = topology.sets.get(name)
    if found is not None:
        return found
    defaults = policy.deployment_sets
    if not defaults.create_on_use:
        raise MultiCloudInputError(f"--deployment-set: unknown deployment set {name!r}")
    return DeploymentSet(name, defaults.max_size, defaults.scope)


def set_full(
    ds: DeploymentSet | None,
    request: ScheduleRequest,
    cands: Candidates,
    rejections: list[ClusterRejection],
) -> Failure | None:
    """The failure when the request's instances would take the set past its size."""
    if ds is None or len(ds.members) + request.count <= ds.max_size:
        return None
    return Failure(
        request,
        "deployment_set",
        "deployment_set_full",
        f"deployment set {ds.name} has {len(ds.members)} members; "
        f"{request.count} more would exceed its maximum of {ds.max_size}",
        cands,
        (),
        tuple(rejections),
    )


@contextmanager
def decision_group(topology: Topology, ds: DeploymentSet | None) -> Iterator[None]:
    """A set not created yet gets a server group in each table for the decision only."""
    added: list[HostTable] = []
    if ds is not None:
        for cluster in topology.clusters.values():
            if ds.name not in cluster.table.groups:
                cluster.table.groups[ds.name] = anti_affinity_group(ds.name)
                added.append(cluster.table)
    try:
        yield
    finally:
        for table in added:
            del table.groups[ds.name]  # type: ignore[union-attr]


def one_per_place(topology: Topology, cluster: Cluster, ds: DeploymentSet, counts: Any) -> Any:
    """Per-host creatable counts cut to what the set allows: one per free host, and for rack
    scope one per rack free of the set's members."""
    table = cluster.table
    counts = np.minimum(counts, 1)
    counts[table.group_count(ds.name) > 0] = 0
    if ds.scope == DeploymentScope.RACK:
        counts[used_racks(topology, cluster, ds)] = 0
        # at most one member per rack
        racks = table.rack[counts > 0]
        out = np.zeros_like(counts)
        if racks.size:
            _, first = np.unique(racks, return_index=True)
            out[np.flatnonzero(counts > 0)[first]] = 1
        counts = out
    return counts


def used_racks(topology: Topology, cluster: Cluster, ds: DeploymentSet) -> Any:
    """Hosts of the cluster whose rack holds a member anywhere in the IDC."""
    table = cluster.table
    racks = topology.racks_of_set(ds.name, cluster.idc)
    codes = [table.racks.get(r) for r in racks]
    return np.isin(table.rack, [c for c in codes if c >= 0])


def check_set(
    topology: Topology, ds: DeploymentSet, cluster: Cluster, placement: Placement
) -> None:
    """The set's rules hold with the placement added (re-checked at commit)."""
    count = len(placement.decision.selections)
    if len(ds.members) + count > ds.max_size:
        raise PolicyConflictError(f"deployment set {ds.name} would exceed {ds.max_size} members")
    table = cluster.table
    hosts = placement.hosts
    if len(set(hosts)) != len(hosts):
        raise PolicyConflictError(f"deployment set {ds.name}: two members on one host")
    held = table.group_count(ds.name) if ds.name in table.groups else None
    for host in hosts:
        if held is not None and held[table.row(host)] > 0:
            raise PolicyConflictError(f"deployment set {ds.name} already has a member on {host}")
    if ds.scope == DeploymentScope.RACK:
        racks = [table.racks.words[table.rack[table.row(h)]] for h in hosts]
        used = topology.racks_of_set(ds.name, cluster.idc)
        if len(set(racks)) != len(racks) or used & set(racks):
            raise PolicyConflictError(f"deployment set {ds.name}: two members in one rack")
