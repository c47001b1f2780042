"""Placement providers and Nova's listings as Berth's fleet model (pure).

Capacity is Placement's: a host's cell holds `total - reserved` of each class and the host
keeps Placement's allocation ratios, so Berth's `int(cell * ratio)` is exactly Placement's
capacity `int((total - reserved) * allocation_ratio)`. VCPU becomes shared CPUs, PCPU dedicated
ones, MEMORY_MB memory, DISK_GB disk; custom classes (on the root provider or its children)
become device pools, which flavors ask for with `resources:CUSTOM_X=N` (turned into a PCI alias
of the same name). Nova exposes no NUMA layout, so each host is one cell (docs/openstack.md).
Allocations whose consumer is not a listed server (a migration's hold on its source, an orphan)
become pinned pseudo-instances, so Berth's free capacity equals Placement's too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from berth.cloud.driver import Server, ServerState
from berth.core.model import (
    Aggregate,
    DiskInventory,
    Flavor,
    Fleet,
    GroupPolicy,
    Host,
    Instance,
    NumaCell,
    PciAlias,
    ServerGroup,
    is_ident,
)

STANDARD = ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB")


@dataclass(frozen=True)
class Provider:
    """One Placement resource provider with what Berth reads of it."""

    uuid: str
    name: str
    root: str
    parent: str | None = None
    inventories: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    traits: Sequence[str] = ()
    aggregates: Sequence[str] = ()
    allocations: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    generation: int | None = None


@dataclass(frozen=True)
class NovaHost:
    """A compute service and its node: the name boots target, its state and zone."""

    host: str
    node_uuid: str
    enabled: bool = True
    up: bool = True
    hypervisor_type: str = "kvm"


def usable(inv: Mapping[str, Any] | None) -> int:
    return 0 if inv is None else max(0, int(inv["total"]) - int(inv.get("reserved", 0)))


def _ratio(inv: Mapping[str, Any] | None) -> float:
    return 1.0 if inv is None else float(inv.get("allocation_ratio", 1.0))


def host_of(
    name: str,
    root: Provider,
    children: Iterable[Provider],
    nova: NovaHost | None,
    zone: str,
    aggregates: Sequence[str],
) -> Host:
    inv = root.inventories
    devices: dict[str, int] = {}
    for p in (root, *children):
        for rc, item in p.inventories.items():
            if rc.startswith("CUSTOM_"):
                devices[rc] = devices.get(rc, 0) + usable(item)
    cell = NumaCell(
        shared_cpus=usable(inv.get("VCPU")),
        dedicated_cpus=usable(inv.get("PCPU")),
        memory_mb=usable(inv.get("MEMORY_MB")),
        pci=devices,
    )
    return Host(
        name=name,
        availability_zone=zone,
        aggregates=sorted(aggregates),
        traits=sorted(set(root.traits)),
        enabled=nova is None or (nova.enabled and nova.up),
        hypervisor_type=nova.hypervisor_type if nova else "kvm",
        cpu_allocation_ratio=_ratio(inv.get("VCPU")),
        ram_allocation_ratio=_ratio(inv.get("MEMORY_MB")),
        disk_allocation_ratio=_ratio(inv.get("DISK_GB")),
        disk=DiskInventory(hdd_gb=usable(inv.get("DISK_GB"))),
        numa_cells=[cell],
    )


def flavor_of(body: Mapping[str, Any], name: str | None = None) -> tuple[Flavor, list[str]]:
    """A Nova flavor (GET /flavors/detail ≥ 2.61, or a server's embedded one) and the custom
    classes it asks for. `resources:CUSTOM_X=N` becomes `pci_passthrough:alias` `CUSTOM_X:N`."""
    specs = {str(k): str(v) for k, v in (body.get("extra_specs") or {}).items()}
    aliases: list[str] = []
    asks: list[str] = []
    for key in sorted(specs):
        rc = key.removeprefix("resources:")
        if key.startswith("resources:CUSTOM_") and specs[key].isdigit() and int(specs[key]) > 0:
            asks.append(f"{rc}:{specs.pop(key)}")
            aliases.append(rc)
    if asks:
        old = specs.get("pci_passthrough:alias")
        specs["pci_passthrough:alias"] = ",".join(([old] if old else []) + asks)
    swap = body.get("swap") or 0
    flavor = Flavor(
        name=name or body.get("name") or body["original_name"],
        vcpus=int(body["vcpus"]),
        memory_mb=int(body["ram"]),
        root_gb=int(body.get("disk") or 0),
        ephemeral_gb=int(body.get("OS-FLV-EXT-DATA:ephemeral", body.get("ephemeral", 0)) or 0),
        swap_mb=int(swap) if swap != "" else 0,
        extra_specs=specs,
    )
    return flavor, aliases


def group_of(body: Mapping[str, Any]) -> ServerGroup:
    """A server group (≥ 2.64: one `policy` and its `rules`) of its Nova project (a Berth
    deployment set belongs to a project; a project id Berth cannot name is `default`)."""
    policy = body.get("policy") or (body.get("policies") or ["anti-affinity"])[0]
    rules = body.get("rules") or {}
    project = str(body.get("project_id") or "")
    return ServerGroup(
        id=body["id"],
        policy=GroupPolicy(policy),
        max_server_per_host=int(rules.get("max_server_per_host", 1)),
        project=project if is_ident(project) else "default",
    )


@dataclass
class FleetParts:
    """Everything one import read, before it becomes a `Fleet`."""

    prefix: str
    providers: list[Provider]
    nova_hosts: list[NovaHost] = field(default_factory=list)
    aggregates: list[Mapping[str, Any]] = field(default_factory=list)  # Nova's, with uuid
    flavors: list[Mapping[str, Any]] = field(default_factory=list)
    groups: list[Mapping[str, Any]] = field(default_factory=list)
    servers: list[Server] = field(default_factory=list)
    embedded_flavors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    default_zone: str = "nova"


def _hosts(parts: FleetParts) -> tuple[list[Host], list[Aggregate], dict[str, str]]:
    """The hosts, the aggregates and Berth host name -> root provider uuid."""
    by_node = {n.node_uuid: n for n in parts.nova_hosts}
    agg_names = {a["uuid"]: a["name"] for a in parts.aggregates if a.get("uuid")}
    zone_of: dict[str, str] = {}
    for a in parts.aggregates:
        zone = a.get("availability_zone")
        for h in a.get("hosts") or []:
            if zone:
                zone_of[h] = zone
    children: dict[str, list[Provider]] = {}
    for p in parts.providers:
        if p.uuid != p.root:
            children.setdefault(p.root, []).append(p)
    hosts: list[Host] = []
    rp_of: dict[str, str] = {}
    used_aggs: set[str] = set()
    for p in parts.providers:
        if p.uuid != p.root:
            continue
        nova = by_node.get(p.uuid)
        if parts.nova_hosts and nova is None:
            continue  # a provider Nova does not compute on (sharing storage, another service)
        local = nova.host if nova else p.name
        aggs = [agg_names.get(u, u) for u in p.aggregates]
        used_aggs.update(aggs)
        name = f"{parts.prefix}{local}"
        zone = zone_of.get(local, parts.default_zone)
        hosts.append(host_of(name, p, children.get(p.uuid, ()), nova, zone, aggs))
        rp_of[name] = p.uuid
    metadata = {a["name"]: dict(a.get("metadata") or {}) for a in parts.aggregates}
    aggregates = [Aggregate(name=n, metadata=metadata.get(n, {})) for n in sorted(used_aggs)]
    return hosts, aggregates, rp_of


def _flavors(parts: FleetParts) -> tuple[dict[str, Flavor], set[str], dict[str, str]]:
    """The catalogue plus each server's own flavor where it differs; server id -> flavor name."""
    flavors: dict[str, Flavor] = {}
    aliases: set[str] = set()
    for body in parts.flavors:
        flavor, asked = flavor_of(body)
        flavors[flavor.name] = flavor
        aliases.update(asked)
    of_server: dict[str, str] = {}
    for sid, body in parts.embedded_flavors.items():
        flavor, asked = flavor_of(body)
        aliases.update(asked)
        if flavors.get(flavor.name) not in (None, flavor):
            # Resized after the flavor changed, or a flavor deleted and re-made: keep its own.
            flavor = flavor.model_copy(update={"name": f"{flavor.name}@{sid}"})
        flavors.setdefault(flavor.name, flavor)
        of_server[sid] = flavor.name
    return flavors, aliases, of_server


def _foreign(
    parts: FleetParts, rp_of: Mapping[str, str], placed: set[str]
) -> tuple[list[Instance], list[Flavor]]:
    """Allocations of consumers that are not placed servers, as pinned pseudo-instances."""
    by_uuid = {p.uuid: p for p in parts.providers}
    instances: list[Instance] = []
    flavors: dict[str, Flavor] = {}
    for host, uuid in rp_of.items():
        for consumer, res in sorted(by_uuid[uuid].allocations.items()):
            if consumer in placed:
                continue
            vcpus, mem = res.get("VCPU", 0) + res.get("PCPU", 0), res.get("MEMORY_MB", 0)
            if vcpus < 1 or mem < 1:
                continue  # not expressible as a flavor (docs/openstack.md)
            specs = {"hw:cpu_policy": "dedicated"} if res.get("PCPU") else {}
            name = f"placement-{vcpus}c-{mem}m-{res.get('DISK_GB', 0)}g{'-pinned' if specs else ''}"
            flavors[name] = Flavor(
                name=name,
                vcpus=vcpus,
                memory_mb=mem,
                root_gb=res.get("DISK_GB", 0),
                extra_specs=specs,
            )
            instances.append(
                Instance(id=f"allocation:{consumer}", host=host, flavor=name, migratable=False)
            )
    return instances, list(flavors.values())


def instance_id(server: Server) -> str:
    """Berth's id of a server: the name Berth booted it as, else Nova's UUID."""
    name = server.metadata.get("berth_instance")
    return name if name and name == server.name and is_ident(name) else server.id


def build_fleet(parts: FleetParts) -> Fleet:
    hosts, aggregates, rp_of = _hosts(parts)
    flavors, aliases, of_server = _flavors(parts)
    groups = [group_of(g) for g in parts.groups]
    group_project = {g.id: g.project for g in groups}
    known = set(rp_of)
    instances: list[Instance] = []
    placed: set[str] = set()
    for s in parts.servers:
        if s.host not in known or s.state in (ServerState.ERROR, ServerState.DELETED):
            continue
        flavor = of_server.get(s.id, s.flavor)
        if flavor not in flavors:
            continue
        placed.add(s.id)
        project = s.project if is_ident(s.project) else "default"
        instances.append(
            Instance(
                id=instance_id(s),
                host=s.host,
                flavor=flavor,
                project=project,
                server_group=s.server_group
                if s.server_group is not None and group_project.get(s.server_group) == project
                else None,  # a member of another project's group is not in Berth's set
            )
        )
    foreign, pseudo = _foreign(parts, rp_of, placed)
    for f in pseudo:
        flavors.setdefault(f.name, f)
    return Fleet(
        aggregates=aggregates,
        pci_aliases=[PciAlias(name=a, device_type=a) for a in sorted(aliases)],
        hosts=hosts,
        flavors=list(flavors.values()),
        server_groups=groups,
        instances=instances + foreign,
    )


def provider_of(uuid: str, name: str, root: str | None, parent: str | None) -> Provider:
    return Provider(uuid=uuid, name=name, root=root or uuid, parent=parent)
