"""Request and response bodies of the REST API (pydantic; they make /openapi.json).

Names in paths and bodies are restricted to printable identifiers (letters, digits and
``._:-@``), so that nothing the API accepts can upset either database (NUL bytes, control
characters, unbounded numbers are refused with a 422 naming the field).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from berth.core.defrag.admit import MAX_ADMISSION
from berth.core.model import IDENT_MAX, IDENT_PATTERN, DiskKind, GroupPolicy, NumaCell

NAME_PATTERN = IDENT_PATTERN
Ident = Annotated[str, Field(min_length=1, max_length=IDENT_MAX, pattern=NAME_PATTERN)]
Text = Annotated[str, Field(max_length=1024, pattern=r"^[^\x00-\x1f\x7f]*$")]
Count = Annotated[int, Field(strict=True, ge=0, le=1_000_000_000)]
Timestamp = Annotated[float, Field(strict=True, ge=0, le=1e11, allow_inf_nan=False)]
Ratio = Annotated[float, Field(strict=True, gt=0.0, le=64.0, allow_inf_nan=False)]

BusinessType = Literal["on-demand", "preemptible", "auto-scaling", "elastic"]
Role = Literal["admin", "operator", "tenant", "reader", "agent", "vm", "group-admin"]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------- topology
class RegionIn(_In):
    name: Ident
    description: Text = ""


class Region(BaseModel):
    name: str
    description: str


class DriverIn(_In):
    """How Berth reaches a cluster's cloud (docs/openstack.md): never a secret in `config`."""

    kind: Literal["openstack", "simulated"]
    config: dict[str, Any] = Field(
        description="endpoints and `credential_ref` (an environment variable or file the "
        "driver reads); a simulated cloud: `cloud` (its name) and `fleet`"
    )


class ClusterIn(_In):
    name: Ident
    region: Ident = Field(description="the region or IDC the cluster joins")
    driver: DriverIn | None = Field(
        None, description="a cloud Berth drives: its inventory is imported (admin only)"
    )


class DriverOut(BaseModel):
    kind: str
    state: Literal["joining", "joined", "leaving"]
    config: dict[str, Any]
    reconciled_at: float | None = None


class Cluster(BaseModel):
    name: str
    region: str
    state: Literal["active", "left"]
    hosts: int = 0
    driver: DriverOut | None = None


class ServerOut(BaseModel):
    """A server Berth booted or adopted in a cluster it drives."""

    instance_id: str
    cluster: str
    server_id: str | None = Field(description="the cloud's id; null until the cloud answered")
    host: str
    flavor: str
    state: Literal[
        "intent", "building", "active", "migrating", "shutoff", "error", "deleted", "failed"
    ]
    fault: str | None = None
    alternates: list[str] = Field(default_factory=list)
    tried: list[dict[str, str]] = Field(
        default_factory=list, description="failed boots: {host, error}"
    )


class PoolIn(_In):
    cluster: Ident
    name: Ident
    trait: Ident = Field(description="hosts of the pool carry this trait (e.g. CUSTOM_POOL_DPDK)")
    description: Text = ""


class Pool(BaseModel):
    cluster: str
    name: str
    trait: str
    description: str


class CellIn(_In):
    shared_cpus: Annotated[int, Field(strict=True, ge=0, le=4096)] = 0
    dedicated_cpus: Annotated[int, Field(strict=True, ge=0, le=4096)] = 0
    memory_mb: Annotated[int, Field(strict=True, ge=0, le=1 << 40)]
    hugepages_mb: Annotated[int, Field(strict=True, ge=0, le=1 << 40)] = 0
    pci: dict[Ident, Annotated[int, Field(strict=True, ge=0, le=4096)]] = Field(
        default_factory=dict
    )

    def core(self) -> NumaCell:
        return NumaCell(**self.model_dump())


class DiskIn(_In):
    hdd_gb: Annotated[int, Field(strict=True, ge=0, le=1 << 40)] = 0
    ssd_gb: Annotated[int, Field(strict=True, ge=0, le=1 << 40)] = 0


class HostIn(_In):
    name: Ident
    cluster: Ident
    pool: Ident | None = None
    availability_zone: Ident = "nova"
    aggregates: list[Ident] = Field(default_factory=list, max_length=64)
    traits: list[Ident] = Field(default_factory=list, max_length=256)
    enabled: bool = True
    architecture: Ident = "x86_64"
    hypervisor_type: Ident = "kvm"
    trusted: bool = False
    capabilities: dict[Ident, Text] = Field(default_factory=dict)
    cpu_allocation_ratio: Ratio = 1.0
    ram_allocation_ratio: Ratio = 1.0
    disk_allocation_ratio: Ratio = 1.0
    reserved_memory_mb: Annotated[int, Field(strict=True, ge=0, le=1 << 40)] = 0
    reserved_disk_gb: Annotated[int, Field(strict=True, ge=0, le=1 << 40)] = 0
    hugepage_size_kb: Literal[0, 2048, 1048576] = 0
    disk: DiskIn = Field(default_factory=DiskIn)
    rack: Ident | None = None
    numa_cells: list[CellIn] = Field(min_length=1, max_length=8)  # model.MAX_NUMA_CELLS


class HostUsage(BaseModel):
    vcpus: int
    vcpus_used: int
    pinned_cpus: int
    pinned_cpus_used: int
    memory_mb: int
    memory_mb_used: int
    instances: int


class HostOut(BaseModel):
    name: str
    cluster: str
    pool: str | None
    availability_zone: str
    enabled: bool
    last_heartbeat: float | None
    generation: int
    traits: list[str]
    usage: HostUsage | None = None
    report_ts: float | None = None


class HostState(_In):
    enabled: bool


class ReportIn(_In):
    """A compute node's heartbeat, optionally with its own view of what runs on it."""

    timestamp: Timestamp = Field(description="when the host made this report (epoch seconds)")
    instances: list[Ident] | None = Field(
        None, max_length=10_000, description="instance ids the host runs (for reconciliation)"
    )
    used: dict[Ident, Count] | None = Field(None, description="the host's own usage figures")


class ReportOut(BaseModel):
    applied: bool
    host: str
    last_heartbeat: float | None


# ---------------------------------------------------------------------------- catalogue
class FlavorIn(_In):
    name: Ident
    vcpus: Annotated[int, Field(strict=True, ge=1, le=4096)]
    memory_mb: Annotated[int, Field(strict=True, ge=1, le=1 << 40)]
    root_gb: Annotated[int, Field(strict=True, ge=0, le=1 << 30)] = 0
    ephemeral_gb: Annotated[int, Field(strict=True, ge=0, le=1 << 30)] = 0
    swap_mb: Annotated[int, Field(strict=True, ge=0, le=1 << 30)] = 0
    disk_kind: DiskKind = DiskKind.HDD
    extra_specs: dict[Ident, Text] = Field(default_factory=dict)


class FlavorOut(BaseModel):
    name: str
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int
    swap_mb: int
    disk_kind: str
    extra_specs: dict[str, str]


class ImageIn(_In):
    name: Ident
    architecture: Ident | None = None
    hypervisor_type: Ident | None = None
    required_traits: list[Ident] = Field(default_factory=list, max_length=64)
    clusters: list[Ident] | None = Field(None, description="clusters holding the image; null = all")


class ImageOut(BaseModel):
    name: str
    architecture: str | None
    hypervisor_type: str | None
    required_traits: list[str]
    clusters: list[str] | None


class NetworkIn(_In):
    name: Ident
    cluster: Ident
    cidr: Annotated[str, Field(max_length=64, pattern=r"^[0-9a-fA-F:.]+/[0-9]{1,3}$")]
    total: Annotated[int, Field(strict=True, ge=0, le=1 << 24)]

    @field_validator("cidr")
    @classmethod
    def _network(cls, value: str) -> str:
        """An IPv4 or IPv6 network (host bits may be set: `10.1.2.3/16` names 10.1.0.0/16)."""
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError as exc:
            raise ValueError(f"not an IP network: {exc}") from None
        return value


class NetworkOut(BaseModel):
    name: str
    cluster: str
    cidr: str
    total: int
    used: int


class DeploymentSetIn(_In):
    id: Ident
    project: Ident | None = Field(None, description="defaults to the token's project")
    policy: GroupPolicy = GroupPolicy.ANTI_AFFINITY
    max_per_host: Annotated[int, Field(strict=True, ge=1, le=1000)] = 1
    max_size: Annotated[int, Field(strict=True, ge=1, le=100_000)] | None = None


class DeploymentSetOut(BaseModel):
    id: str
    project: str
    policy: str
    max_per_host: int
    max_size: int | None
    members: int


# ---------------------------------------------------------------------------- placements
class PlacementIn(_In):
    flavor: Ident
    count: Annotated[int, Field(strict=True, ge=1, le=100)] = 1
    project: Ident | None = Field(None, description="defaults to the token's project")
    region: Ident | None = None
    cluster: Ident | None = None
    pool: Ident | None = None
    availability_zone: Ident | None = None
    image: Ident | None = None
    deployment_set: Ident | None = None
    same_host: list[Ident] = Field(default_factory=list, max_length=100)
    different_host: list[Ident] = Field(default_factory=list, max_length=100)
    business_type: BusinessType = "on-demand"
    seed: Annotated[int, Field(strict=True, ge=0, le=2**62)] | None = None
    network: Ident | None = Field(
        None, description="take one IP per instance from this network (places in its cluster)"
    )


class CellUse(BaseModel):
    cell: int
    vcpus: int
    pcpus: int
    memory_mb: int
    hugepages_mb: int
    pci: dict[str, int]


class InstanceOut(BaseModel):
    id: str
    project: str
    flavor: str
    host: str
    cluster: str
    deployment_set: str | None
    placement_id: str | None
    business_type: str
    preemptible: bool
    cells: list[CellUse]
    host_use: dict[str, int]
    created_at: float
    migration_of: str | None = Field(
        None,
        description="set on a live migration's claim on its target host (row id "
        "`<instance>@migrating`): the instance being moved; it holds resources until the move "
        "is confirmed or aborted",
    )
    server: ServerOut | None = Field(
        None, description="its server, in a cluster Berth drives (docs/openstack.md)"
    )


class PlacementOut(BaseModel):
    id: str
    flavor: str
    project: str
    cluster: str
    instances: list[InstanceOut]
    alternates: dict[str, list[str]] = Field(default_factory=dict)
    evicted: list[str] = Field(default_factory=list)
    decision_ms: float = 0.0
    attempts: int = 1
    why: list[dict[str, Any]] | None = Field(
        None, description="with ?why=true: why each instance went where it went (docs/why.md)"
    )


class ScheduleIn(_In):
    """A request to the multi-cloud pipeline (`berth serve --policy FILE`)."""

    region: Ident = Field(description="a region, or one IDC by name")
    flavor: Ident = Field(description="a base flavor of the policy's catalogue (e.g. v.c3.large)")
    count: Annotated[int, Field(strict=True, ge=1, le=100)] = 1
    business: BusinessType = "on-demand"
    user: Ident = "default"
    project: Ident | None = Field(None, description="defaults to the token's project")
    deployment_set: Ident | None = None
    image: Ident | None = None
    network: Ident | None = None
    seed: Annotated[int, Field(strict=True, ge=0, le=2**62)] = 0


class ScheduleOut(BaseModel):
    id: str
    region: str
    idc: str
    cluster: str
    pool: str
    variant: str
    flavor: str
    network: str | None
    project: str
    instances: list[InstanceOut]
    evicted: list[str] = Field(default_factory=list)
    candidates: list[str] = Field(default_factory=list)
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    rejections: list[dict[str, Any]] = Field(default_factory=list)
    decision_ms: float = 0.0
    commit_attempts: int = 1
    why: list[dict[str, Any]] | None = Field(
        None, description="with ?why=true: why each instance went where it went (docs/why.md)"
    )


class EvictionIn(_In):
    instance_id: Ident
    reason: Text = "evicted by an operator"


class EvictionOut(BaseModel):
    id: int
    instance_id: str
    host: str
    project: str
    flavor: str
    reason: str
    placement_id: str | None
    created_at: float


# ---------------------------------------------------------------------------- reads
class CapacityOut(BaseModel):
    by: str
    flavors: list[str]
    counts: dict[str, dict[str, int]]
    hosts: int
    elapsed_ms: float


class StatsDay(BaseModel):
    day: str
    requests: int
    successes: int
    success_rate: float | None
    failures: dict[str, int]


class EventOut(BaseModel):
    id: int
    ts: float
    kind: str
    host: str | None
    generation: int | None
    replica: str
    payload: dict[str, Any]


class TokenIn(_In):
    name: Ident
    role: Role
    project: Ident | None = None
    ttl_seconds: int | None = Field(
        None, strict=True, gt=0, le=10 * 365 * 86400, description="expires this long from now"
    )
    hosts: list[Ident] = Field(
        default_factory=list, max_length=1000, description="an agent token's hosts"
    )
    vm: Ident | None = Field(None, description="a vm token's elastic VM")
    elastic_group: Ident | None = Field(None, description="a group-admin token's elastic group")


class TokenOut(BaseModel):
    id: str
    name: str
    role: str
    project: str | None
    revoked: bool
    expires_at: float | None = Field(None, description="Unix time; null: never expires")
    hosts: list[str] = Field(default_factory=list, description="an agent token's hosts")
    vm: str | None = None
    elastic_group: str | None = None
    token: str | None = Field(None, description="the secret; shown once, at creation")


class Health(BaseModel):
    status: str
    replica: str
    database: str
    last_event_id: int
    hosts: int


# ---------------------------------------------------------------------------- defrag
Weight = Annotated[float, Field(strict=True, gt=0.0, le=1e6, allow_inf_nan=False)]


class TargetIn(_In):
    objective: Literal["capacity", "empty-hosts"] = "capacity"
    flavors: list[Ident] = Field(
        default_factory=list, max_length=100, description="flavors whose capacity to restore"
    )
    weights: list[Weight] | None = Field(None, max_length=100, description="one per flavor")
    drain: list[Ident] = Field(
        default_factory=list,
        max_length=10_000,
        description="hosts to empty; hosts marked draining are added",
    )


class BudgetIn(_In):
    max_migrations: int = Field(strict=True, ge=0, le=100_000)
    max_per_host: int | None = Field(None, strict=True, ge=1, le=100_000)
    max_concurrent: int = Field(1, strict=True, ge=1, le=1000)


class PlanIn(_In):
    cluster: Ident
    target: TargetIn
    budget: BudgetIn
    seed: int = Field(0, strict=True, ge=0, le=2**31 - 1)


class AdmissionIn(_In):
    cluster: Ident
    flavor: Ident
    availability_zone: Ident | None = None
    max_migrations: int = Field(
        1, strict=True, ge=1, le=MAX_ADMISSION, description="most live migrations to make room"
    )


class ExecuteIn(_In):
    auto_confirm: bool = Field(
        False, description="confirm each started step at once (no cloud adapter)"
    )


class AbortIn(_In):
    reason: Text = "aborted by the adapter"


class StepOut(BaseModel):
    step: int
    wave: int
    instance_id: str
    flavor: str
    source: str
    target: str
    planned_target: str
    state: str
    reason: str | None
    replans: int
    cells: list[dict[str, Any]]
    host_use: dict[str, int]


class PlanOut(BaseModel):
    id: str
    cluster: str
    state: str
    target: dict[str, Any]
    budget: dict[str, Any]
    before: dict[str, Any]
    after: dict[str, Any]
    achieved: dict[str, Any] | None = Field(description="figures measured when the plan ended")
    auto_confirm: bool
    owner: str | None
    reason: str | None
    created_by: str
    created_at: float
    updated_at: float
    migrations: int
    steps_by_state: dict[str, int]
    steps: list[StepOut] | None = None


class DrainOut(BaseModel):
    name: str
    draining: bool
    enabled: bool
    generation: int
