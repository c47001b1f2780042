"""The rows the store reads and writes, as plain records, and the converters from result rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.model import Aggregate, Flavor, Host, PciAlias
from berth.store.footprint import Footprint

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ClusterRow:
    name: str
    region: str
    state: str


@dataclass(frozen=True)
class CloudClusterRow:
    """A cluster Berth drives through a cloud driver (`berth.store.clouds`)."""

    name: str
    kind: str  # openstack | simulated
    config: dict[str, Any]  # endpoints and a credential reference, never a secret
    state: str  # joining | joined | leaving
    cursor: str | None
    reconciled_at: float | None
    created_at: float


@dataclass(frozen=True)
class ServerRecord:
    """What Berth knows of one server it booted or adopted, keyed by its instance id."""

    instance_id: str
    cluster: str
    server_id: str | None  # None: the cloud was asked (or is about to be) and has not answered
    host: str
    flavor: str
    state: str  # intent | building | active | migrating | shutoff | error | deleted | failed
    fault: str | None
    alternates: tuple[str, ...]
    tried: tuple[dict[str, str], ...]
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class PoolRow:
    cluster: str
    name: str
    trait: str
    description: str = ""


@dataclass(frozen=True)
class HostRecord:
    host: Host
    cluster: str
    pool: str | None
    generation: int
    report: dict[str, Any] | None = None
    report_ts: float | None = None


SET_KEY_SEP = "/"
"""Joins a deployment set's project and id into its key. Neither may contain it: projects and
set ids are identifiers (`berth.core.model.IDENT_PATTERN`), so keys never collide."""


def set_key(project: str, set_id: str) -> str:
    """A deployment set's key: sets are per project, so `web` of project A and `web` of project
    B are different sets (docs/service.md, "Deployment sets"). The store keeps project and id in
    two columns; the replica's tables, the core and the policy engine know a set by its key."""
    return f"{project}{SET_KEY_SEP}{set_id}"


def instance_set_key(project: str, set_id: str | None) -> str | None:
    """The key of an instance's set (an instance joins sets of its own project), or None."""
    return None if set_id is None else set_key(project, set_id)


def split_set_key(key: str) -> tuple[str, str]:
    """(project, set id) of a set's key."""
    project, _, set_id = key.partition(SET_KEY_SEP)
    return project, set_id


@dataclass(frozen=True)
class GroupRow:
    id: str
    project: str
    policy: str
    max_per_host: int
    max_size: int | None
    generation: int
    scope: str = "host"

    @property
    def key(self) -> str:
        return set_key(self.project, self.id)


@dataclass(frozen=True)
class InstanceRow:
    id: str
    project: str
    flavor: str
    host: str
    cluster: str
    server_group: str | None
    placement: Footprint
    placement_id: str | None
    business_type: str
    preemptible: bool
    migratable: bool
    created_at: float
    network: str | None = None


@dataclass(frozen=True)
class TokenRow:
    id: str
    name: str
    role: str
    project: str | None
    revoked: bool
    created_at: float
    expires_at: float | None = None
    hosts: tuple[str, ...] = ()
    """An agent token's hosts: the only ones it may report for (docs/service.md, "Roles")."""
    vm: str | None = None
    """A vm token's VM: the only one its agent may touch (docs/elastic.md, "agent")."""
    elastic_group: str | None = None
    """A group-admin token's elastic group: the only one it sees and changes."""


@dataclass(frozen=True)
class EventRow:
    id: int
    ts: float
    kind: str
    host: str | None
    generation: int | None
    replica: str
    payload: dict[str, Any]


@dataclass
class Snapshot:
    """Everything a replica needs to build its tables, read in one consistent transaction."""

    last_event_id: int
    regions: dict[str, str | None]
    """region (or IDC) -> its parent region (None: top level)"""
    clusters: dict[str, ClusterRow]
    pools: list[PoolRow]
    aggregates: list[Aggregate]
    pci_aliases: list[PciAlias]
    flavors: list[Flavor]
    groups: dict[str, GroupRow]
    """set key (`set_key`) -> its row"""
    hosts: list[HostRecord]
    instances: list[InstanceRow]
    missing_event_ids: list[int] = field(default_factory=list)
    """Ids below `last_event_id` not visible yet (their transactions were still committing)."""


@dataclass(frozen=True)
class NewInstance:
    id: str
    host: str
    cluster: str
    flavor: str
    footprint: Footprint
    project: str
    server_group: str | None = None
    business_type: str = "on-demand"
    preemptible: bool = False
    migratable: bool = True
    created_at: float | None = None  # None: the commit time
    network: str | None = None  # takes one IP of this network (ip_pools)


@dataclass(frozen=True)
class HostCapacity:
    """A host's inventory in one table's layout, for re-verifying a plan at commit."""

    cell_cap: I64
    host_cap: I64
    device_types: list[str]


@dataclass(frozen=True)
class Outcome:
    outcome: str  # success | failure
    reason: str
    flavor: str
    project: str
    num_instances: int
    latency_ms: float
    business_type: str | None = None
    detail: str | None = None
    """A success's chosen hosts ("cluster: host, host"), a failure's explanation ("0/N hosts
    fit: ..."): what the dashboard's decision stream shows (docs/dashboard.md)."""
    why: dict[str, Any] | None = None
    """A success's compact why this host (`berth.service.placing.why_record`), when it was
    asked or the replica records it for every decision (docs/why.md)."""


@dataclass(frozen=True)
class OutcomeRow:
    """One recorded placement decision, as the decision stream reads it."""

    id: int
    ts: float
    outcome: str
    reason: str
    flavor: str
    project: str
    num_instances: int
    latency_ms: float
    business_type: str | None
    detail: str | None
    why: dict[str, Any] | None = None


@dataclass(frozen=True)
class Idempotent:
    principal: str
    key: str
    request_hash: str
    status: int
    response: dict[str, Any]


@dataclass
class CommitResult:
    events: list[EventRow] = field(default_factory=list)
    groups: dict[str, int] = field(default_factory=dict)  # set key -> generation after commit
    evicted: list[InstanceRow] = field(default_factory=list)


def group_row(row: Any) -> GroupRow:
    return GroupRow(
        row.id,
        row.project,
        row.policy,
        row.max_per_host,
        row.max_size,
        int(row.generation),
        row.scope,
    )


def instance_row(row: Any) -> InstanceRow:
    return InstanceRow(
        id=row.id,
        project=row.project,
        flavor=row.flavor,
        host=row.host,
        cluster=row.cluster,
        server_group=row.server_group,
        placement=row.placement,
        placement_id=row.placement_id,
        business_type=row.business_type,
        preemptible=bool(row.preemptible),
        migratable=bool(row.migratable),
        created_at=float(row.created_at),
        network=row.network,
    )


def event_row(row: Any) -> EventRow:
    return EventRow(
        id=int(row.id),
        ts=float(row.ts),
        kind=row.kind,
        host=row.host,
        generation=None if row.generation is None else int(row.generation),
        replica=row.replica,
        payload=row.payload,
    )
