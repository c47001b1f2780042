"""The fleet snapshot schema: hosts, flavors, server groups and instances.

These pydantic models are the validated edge of the core: a snapshot file is parsed into a
`Fleet`, every error names the field and its path, and the columnar `HostTable` is built from it.
The models hold no behaviour beyond validation.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

IDENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$"
"""The API's identifier rule (docs/api.md); names a topology load writes must follow it too."""
IDENT_MAX = 128
IDENT_RULE = f"letters, digits and ._:@-, starting with a letter or digit, at most {IDENT_MAX}"
_IDENT = re.compile(IDENT_PATTERN)

MAX_QUANTITY = 1 << 40
"""The largest amount (MB, GB, counts) a file may give: far above any real host, far below
what the int64 columns of `HostTable` overflow at, even times an allocation ratio of 64."""
MAX_CPUS = 4096
"""The most vCPUs a flavor may ask for."""
MAX_CELL_CPUS = 1 << 20
"""The most CPUs (or devices) a host cell may give; simulated host types scale their cores
(docs/simulator.md), so this is well above any real socket."""


def is_ident(name: str) -> bool:
    return len(name) <= IDENT_MAX and _IDENT.match(name) is not None


def not_bool(value: object) -> object:
    """YAML and JSON booleans are ints to pydantic; a count given as `true` is a mistake."""
    if isinstance(value, bool):
        raise ValueError("Input should be an integer, not a boolean")
    return value


Name = Annotated[str, Field(min_length=1, max_length=255)]
NonNeg = Annotated[int, BeforeValidator(not_bool), Field(ge=0, le=MAX_QUANTITY)]
Cpus = Annotated[int, BeforeValidator(not_bool), Field(ge=0, le=MAX_CELL_CPUS)]
Ratio = Annotated[float, Field(gt=0.0, le=64.0)]

MAX_NUMA_CELLS = 8
"""Hosts have one to eight NUMA cells (two sockets, or sub-NUMA clustering / NPS4 / four
sockets). Every NUMA rule is exact on them (docs/numa.md: closed forms where they exist, an
exact search otherwise); wider hosts are refused at load, naming the host."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NumaCell(_Strict):
    """One host NUMA cell: CPUs split into a shared (floating) and a dedicated (pinnable) set."""

    shared_cpus: Cpus = 0
    dedicated_cpus: Cpus = 0
    memory_mb: NonNeg = Field(description="small-page memory available to guests in this cell")
    hugepages_mb: NonNeg = Field(0, description="memory held as huge pages in this cell")
    pci: dict[Name, Cpus] = Field(
        default_factory=dict, description="PCI device pools local to this cell: type -> count"
    )


class DiskInventory(_Strict):
    hdd_gb: NonNeg = 0
    ssd_gb: NonNeg = 0


class Host(_Strict):
    name: Name
    availability_zone: Name = "nova"
    aggregates: list[Name] = Field(default_factory=list)
    traits: list[Name] = Field(default_factory=list)
    enabled: bool = True
    last_heartbeat: float | None = Field(
        None, description="seconds since the epoch; None means never reported"
    )
    architecture: Name = "x86_64"
    hypervisor_type: Name = "kvm"
    trusted: bool = False
    capabilities: dict[Name, str] = Field(default_factory=dict)
    cpu_allocation_ratio: Ratio = 1.0
    ram_allocation_ratio: Ratio = 1.0
    disk_allocation_ratio: Ratio = 1.0
    reserved_memory_mb: NonNeg = 0
    reserved_disk_gb: NonNeg = 0
    hugepage_size_kb: Literal[0, 2048, 1048576] = 0
    disk: DiskInventory = Field(default_factory=DiskInventory)
    io_ops: Annotated[int, BeforeValidator(not_bool), Field(ge=0, le=1_000_000)] = 0
    rack: Name | None = None
    numa_cells: list[NumaCell] = Field(min_length=1)
    numa_distances: list[list[Annotated[int, Field(ge=0, le=255)]]] | None = Field(
        None,
        description="the host's NUMA distance matrix (as `numactl -H` prints it), one row per "
        "cell; a multi-cell guest prefers close cells (docs/numa.md)",
    )

    @model_validator(mode="after")
    def _at_most_eight_cells(self) -> Host:
        n = len(self.numa_cells)
        if n > MAX_NUMA_CELLS:
            raise ValueError(
                f"host {self.name!r}: numa_cells: at most {MAX_NUMA_CELLS} NUMA cells, got {n}"
            )
        dist = self.numa_distances
        if dist is not None and (len(dist) != n or any(len(row) != n for row in dist)):
            raise ValueError(
                f"host {self.name!r}: numa_distances: must be a {n} x {n} matrix "
                "(one row and one column per NUMA cell)"
            )
        return self

    @model_validator(mode="after")
    def _hugepages_need_size(self) -> Host:
        if any(c.hugepages_mb for c in self.numa_cells) and not self.hugepage_size_kb:
            raise ValueError("numa_cells declare hugepages_mb but hugepage_size_kb is 0")
        return self


class DiskKind(StrEnum):
    HDD = "hdd"
    SSD = "ssd"


class Flavor(_Strict):
    name: Name
    vcpus: Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=MAX_CPUS)]
    memory_mb: Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=MAX_QUANTITY)]
    root_gb: NonNeg = 0
    ephemeral_gb: NonNeg = 0
    swap_mb: NonNeg = 0
    disk_kind: DiskKind = DiskKind.HDD
    extra_specs: dict[Name, str] = Field(default_factory=dict)

    @field_validator("extra_specs", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        # YAML turns `hw:numa_nodes: 2` into an int; extra specs are strings in Nova.
        if isinstance(value, dict):
            return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value


class GroupPolicy(StrEnum):
    AFFINITY = "affinity"
    ANTI_AFFINITY = "anti-affinity"
    SOFT_AFFINITY = "soft-affinity"
    SOFT_ANTI_AFFINITY = "soft-anti-affinity"


class ServerGroup(_Strict):
    id: Name
    policy: GroupPolicy
    max_server_per_host: Annotated[int, BeforeValidator(not_bool), Field(ge=1, le=100_000)] = 1
    project: Name | None = None
    """The project that owns it (a store keeps deployment sets per project); None: unsaid."""


class CellPlacement(_Strict):
    """Exact use of one host cell by an instance (for snapshots of existing instances)."""

    cell: Annotated[int, Field(ge=0, lt=MAX_NUMA_CELLS)]
    vcpus: Cpus
    memory_mb: NonNeg


class Instance(_Strict):
    id: Name
    host: Name
    flavor: Name
    server_group: Name | None = None
    project: Name = "default"
    migratable: bool = True
    numa: list[CellPlacement] | None = Field(
        None,
        description="exact per-cell placement; when absent Berth places it as it would a new one",
    )


class Aggregate(_Strict):
    name: Name
    metadata: dict[Name, str] = Field(default_factory=dict)


class PciAlias(_Strict):
    """Nova's `[pci] alias`: the name a flavor asks for, mapped to a device type in host pools."""

    name: Name
    device_type: Name


class Fleet(_Strict):
    version: Literal[1] = 1
    now: float | None = Field(None, description="reference time for heartbeat freshness")
    aggregates: list[Aggregate] = Field(default_factory=list)
    pci_aliases: list[PciAlias] = Field(default_factory=list)
    hosts: list[Host] = Field(default_factory=list)
    flavors: list[Flavor] = Field(default_factory=list)
    server_groups: list[ServerGroup] = Field(default_factory=list)
    instances: list[Instance] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> Fleet:
        _unique("hosts", [h.name for h in self.hosts])
        _unique("flavors", [f.name for f in self.flavors])
        _unique("server_groups", [g.id for g in self.server_groups])
        _unique("instances", [i.id for i in self.instances])
        _unique("aggregates", [a.name for a in self.aggregates])
        _unique("pci_aliases", [a.name for a in self.pci_aliases])
        aggregates = {a.name for a in self.aggregates}
        for i, host in enumerate(self.hosts):
            for agg in host.aggregates:
                if agg not in aggregates:
                    raise ValueError(f"hosts[{i}].aggregates: unknown aggregate {agg!r}")
        hosts = {h.name for h in self.hosts}
        flavors = {f.name for f in self.flavors}
        groups = {g.id for g in self.server_groups}
        for i, inst in enumerate(self.instances):
            if inst.host not in hosts:
                raise ValueError(f"instances[{i}].host: unknown host {inst.host!r}")
            if inst.flavor not in flavors:
                raise ValueError(f"instances[{i}].flavor: unknown flavor {inst.flavor!r}")
            if inst.server_group is not None and inst.server_group not in groups:
                raise ValueError(
                    f"instances[{i}].server_group: unknown server group {inst.server_group!r}"
                )
        return self


def _unique(field: str, names: list[str]) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ValueError(f"{field}[{i}]: duplicate name {name!r}")
        seen.add(name)
