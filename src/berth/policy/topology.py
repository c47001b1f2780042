"""Runtime topology: regions -> IDCs -> clusters (each with its own core `HostTable`).

Each cluster owns a table built from its own snapshot, so clusters join and leave at run time
without touching the others' state. Pools are trait sets: a host belongs to a pool when it
carries all the pool's traits (a vectorised bitmask match over the cluster's table, cached until
hosts are added). The policy layer's knowledge about instances (business type, creation time,
user, deployment set) lives in `InstanceMeta`, keyed by instance id, beside the table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from berth.core.errors import ClaimError, FleetError, SpecError
from berth.core.filters.traits import trait_mask
from berth.core.model import Fleet, GroupPolicy, Instance, ServerGroup
from berth.core.table import Allocation, HostTable
from berth.policy.catalogue import Catalogue
from berth.policy.errors import MultiCloudInputError
from berth.policy.model import (
    EVICTABLE,
    Business,
    ClusterSpec,
    DeploymentScope,
    DeploymentSetSpec,
    IdcSpec,
    TopologySpec,
)

Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class InstanceMeta:
    """What the policy layer knows about an instance beyond its footprint."""

    business: Business
    created_at: float
    user: str = "default"
    deployment_set: str | None = None


@dataclass
class DeploymentSet:
    name: str
    max_size: int
    scope: DeploymentScope
    members: dict[str, str] = field(default_factory=dict)
    """instance id -> cluster."""


@dataclass
class Cluster:
    name: str
    idc: str
    region: str
    table: HostTable
    networks: dict[str, int]
    enabled: bool = True
    meta: dict[str, InstanceMeta] = field(default_factory=dict)
    preemptible_by_host: dict[str, set[str]] = field(default_factory=dict)  # evictable ones
    elastic_count: int = 0  # of which elastic (outside the preemptible limit)
    _pools: dict[tuple[str, ...], tuple[int, Mask]] = field(default_factory=dict, repr=False)

    def pool_mask(self, traits: tuple[str, ...]) -> Mask:
        """Hosts carrying every trait (cached until the host count changes)."""
        n = len(self.table)
        cached = self._pools.get(traits)
        if cached is not None and cached[0] == n:
            return cached[1]
        words = trait_mask(self.table, set(traits))
        if words is None:
            mask = np.zeros(n, dtype=bool)
        else:
            mask = ((self.table.trait_bits & words) == words).all(axis=1)
        self._pools[traits] = (n, mask)
        return mask

    def is_preemptible(self, alloc: Allocation) -> bool:
        """May an on-demand request evict it (preemptible and elastic instances)?"""
        meta = self.meta.get(alloc.instance_id)
        return meta is not None and meta.business in EVICTABLE

    def created_at(self, alloc: Allocation) -> float:
        meta = self.meta.get(alloc.instance_id)
        return meta.created_at if meta is not None else 0.0

    def note(self, instance_id: str, host: str, meta: InstanceMeta) -> None:
        old = self.meta.get(instance_id)
        if old is not None and old.business == Business.ELASTIC:
            self.elastic_count -= 1
        self.meta[instance_id] = meta
        if meta.business in EVICTABLE:
            self.preemptible_by_host.setdefault(host, set()).add(instance_id)
        if meta.business == Business.ELASTIC:
            self.elastic_count += 1

    def forget(self, instance_id: str, host: str) -> InstanceMeta | None:
        meta = self.meta.pop(instance_id, None)
        if meta is not None and meta.business == Business.ELASTIC:
            self.elastic_count -= 1
        ids = self.preemptible_by_host.get(host)
        if ids is not None:
            ids.discard(instance_id)
            if not ids:
                del self.preemptible_by_host[host]
        return meta


@dataclass
class Idc:
    name: str
    region: str
    images: set[str]
    offered: list[str] | None
    clusters: list[str] = field(default_factory=list)


class Topology:
    """All regions, IDCs, clusters and deployment sets, with their state."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.regions: dict[str, list[str]] = {}
        self.idcs: dict[str, Idc] = {}
        self.clusters: dict[str, Cluster] = {}
        self.sets: dict[str, DeploymentSet] = {}

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, spec: TopologySpec, catalogue: Catalogue) -> Topology:
        topo = cls(catalogue)
        for ds in spec.deployment_sets:
            topo.add_deployment_set(ds)
        for region in spec.regions:
            topo.regions[region.name] = []
            for idc in region.idcs:
                topo.add_idc(region.name, idc)
                for cluster in idc.clusters:
                    topo.add_cluster(idc.name, cluster)
        return topo

    def add_deployment_set(self, ds: DeploymentSetSpec) -> DeploymentSet:
        if ds.name in self.sets:
            raise MultiCloudInputError(f"deployment set {ds.name!r} already exists")
        found = self.sets[ds.name] = DeploymentSet(ds.name, ds.max_size, ds.scope)
        for cluster in self.clusters.values():
            _register_group(cluster.table, ds.name)
        return found

    def remove_deployment_set(self, name: str) -> None:
        """Drop an empty set (and its server group in every table)."""
        ds = self.sets.get(name)
        if ds is None:
            raise MultiCloudInputError(f"unknown deployment set {name!r}")
        if ds.members:
            raise MultiCloudInputError(
                f"deployment set {name!r} still has {len(ds.members)} members"
            )
        del self.sets[name]
        for cluster in self.clusters.values():
            if not cluster.table.group_rows.get(name):
                cluster.table.groups.pop(name, None)

    def add_idc(self, region: str, idc: IdcSpec) -> Idc:
        if idc.name in self.idcs:
            raise MultiCloudInputError(f"IDC {idc.name!r} already exists")
        self.regions.setdefault(region, []).append(idc.name)
        found = self.idcs[idc.name] = Idc(
            idc.name, region, set(idc.images), None if idc.flavors is None else list(idc.flavors)
        )
        return found

    def add_cluster(self, idc_name: str, spec: ClusterSpec) -> Cluster:
        """Build a cluster's table from its snapshot and join it; the others are untouched."""
        if spec.name in self.clusters:
            raise MultiCloudInputError(f"cluster {spec.name!r} already exists")
        idc = self.idcs.get(idc_name)
        if idc is None:
            raise MultiCloudInputError(f"unknown IDC {idc_name!r}")
        taken = {h.name for h in spec.hosts} & {
            n for c in self.clusters.values() for n in c.table.index
        }
        if taken:
            raise MultiCloudInputError(
                f"cluster {spec.name!r}: host {sorted(taken)[0]!r} is elsewhere"
            )
        for inst in spec.instances:
            if inst.deployment_set is not None and inst.deployment_set not in self.sets:
                raise MultiCloudInputError(
                    f"cluster {spec.name!r}: instance {inst.id!r}: unknown deployment set "
                    f"{inst.deployment_set!r}"
                )
            if any(inst.id in c.meta for c in self.clusters.values()):
                raise MultiCloudInputError(
                    f"cluster {spec.name!r}: instance {inst.id!r} is elsewhere"
                )
        fleet = Fleet(
            pci_aliases=list(self.catalogue.policy.pci_aliases),
            hosts=list(spec.hosts),
            flavors=list(self.catalogue.flavors.values()),
            server_groups=[anti_affinity_group(name) for name in sorted(self.sets)],
            instances=[
                Instance(
                    id=i.id,
                    host=i.host,
                    flavor=i.flavor,
                    server_group=i.deployment_set,
                    project=i.project,
                    migratable=i.migratable,
                    numa=i.numa,
                )
                for i in spec.instances
            ],
        )
        try:
            table = HostTable.from_fleet(fleet)
        except (FleetError, SpecError, ClaimError) as exc:
            raise MultiCloudInputError(f"cluster {spec.name!r}: {exc}") from None
        cluster = Cluster(
            name=spec.name,
            idc=idc_name,
            region=idc.region,
            table=table,
            networks={n.name: n.free_ips for n in spec.networks},
            enabled=spec.enabled,
        )
        for inst in spec.instances:
            meta = InstanceMeta(inst.business, inst.created_at, inst.user, inst.deployment_set)
            cluster.note(inst.id, inst.host, meta)
            if inst.deployment_set is not None:
                self.sets[inst.deployment_set].members[inst.id] = spec.name
        self.clusters[spec.name] = cluster
        idc.clusters.append(spec.name)
        return cluster

    def remove_cluster(self, name: str) -> Cluster:
        """Leave: the cluster's state goes with it (its VMs keep running, unmanaged here)."""
        cluster = self.cluster(name)
        del self.clusters[name]
        self.idcs[cluster.idc].clusters.remove(name)
        for ds in self.sets.values():
            for iid in [i for i, c in ds.members.items() if c == name]:
                del ds.members[iid]
        return cluster

    # ------------------------------------------------------------------ views
    def cluster(self, name: str) -> Cluster:
        try:
            return self.clusters[name]
        except KeyError:
            raise MultiCloudInputError(f"unknown cluster {name!r}") from None

    def idcs_of(self, region: str) -> list[Idc]:
        """The IDCs of a region, or the one IDC when `region` names an IDC."""
        if region in self.regions:
            return [self.idcs[i] for i in self.regions[region]]
        if region in self.idcs:
            return [self.idcs[region]]
        known = ", ".join(sorted(self.regions))
        raise MultiCloudInputError(f"--region: unknown region or IDC {region!r} (regions: {known})")

    def clusters_of(self, idc: str) -> Iterator[Cluster]:
        return (self.clusters[c] for c in self.idcs[idc].clusters)

    def preemptible_count(self, idc: str) -> int:
        """Preemptible instances in the IDC (what its limit counts; elastic ones are not)."""
        return sum(
            sum(len(ids) for ids in c.preemptible_by_host.values()) - c.elastic_count
            for c in self.clusters_of(idc)
        )

    def racks_of_set(self, name: str, idc: str) -> set[str]:
        """Rack names holding members of a set in the IDC's clusters (by rack name)."""
        ds = self.sets.get(name)
        out: set[str] = set()
        if ds is None:
            return out
        for iid, cname in ds.members.items():
            cluster = self.clusters.get(cname)
            if cluster is None or cluster.idc != idc:
                continue
            alloc = cluster.table.allocations.get(iid)
            if alloc is not None:
                table = cluster.table
                out.add(table.racks.words[table.rack[table.index[alloc.host]]])
        return out

    def instance_count(self) -> int:
        return sum(len(c.table.allocations) for c in self.clusters.values())


def anti_affinity_group(name: str) -> ServerGroup:
    """The core server group of a deployment set: strict anti-affinity, one per host."""
    return ServerGroup(id=name, policy=GroupPolicy.ANTI_AFFINITY, max_server_per_host=1)


def _register_group(table: HostTable, name: str) -> None:
    if name not in table.groups:
        table.groups[name] = anti_affinity_group(name)
