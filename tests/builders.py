"""Tiny builders for hosts, flavors and fleets on top of `berth.core.model` (tests only).

Per-cell amounts: `host("h", cells=2, pcpus=8, mem=16384)` is a two-socket host with 8 dedicated
CPUs and 16 GB of small-page memory *in each cell*. Use `numa=[cell(...), cell(...)]` for
uneven cells. Flavors take Nova's extra specs through keyword arguments
(`flavor("f", vcpus=2, mem=2048, pinned=True, numa=1)`) or raw `specs={...}`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from berth.core.config import SchedulerConfig, WeigherConfig
from berth.core.engine import Decision, FilterScheduler, commit
from berth.core.filters.base import Context, HostFilter
from berth.core.model import (
    Aggregate,
    CellPlacement,
    DiskInventory,
    Flavor,
    Fleet,
    GroupPolicy,
    Host,
    Instance,
    NumaCell,
    PciAlias,
    ServerGroup,
)
from berth.core.request import ImageProps, RequestSpec
from berth.core.table import HostTable

NOW = 1_000_000.0
"""The reference time of every test fleet; hosts heartbeat at NOW unless told otherwise."""

GB = 1024


def cell(
    *,
    vcpus: int = 0,
    pcpus: int = 0,
    mem: int = 0,
    huge: int = 0,
    pci: Mapping[str, int] | None = None,
) -> NumaCell:
    """One NUMA cell: shared CPUs, dedicated CPUs, small-page MB, huge-page MB, PCI pools."""
    return NumaCell(
        shared_cpus=vcpus,
        dedicated_cpus=pcpus,
        memory_mb=mem,
        hugepages_mb=huge,
        pci=dict(pci or {}),
    )


def host(
    name: str,
    *,
    cells: int = 1,
    vcpus: int = 4,
    pcpus: int = 0,
    mem: int = 4096,
    huge: int = 0,
    page_kb: int | None = None,
    pci: Mapping[str, int] | None = None,
    numa: Sequence[NumaCell] | None = None,
    az: str = "nova",
    aggregates: Iterable[str] = (),
    traits: Iterable[str] = (),
    enabled: bool = True,
    heartbeat: float | None = NOW,
    arch: str = "x86_64",
    hypervisor: str = "kvm",
    trusted: bool = False,
    capabilities: Mapping[str, str] | None = None,
    cpu_ratio: float = 1.0,
    ram_ratio: float = 1.0,
    disk_ratio: float = 1.0,
    reserved_mem: int = 0,
    reserved_disk: int = 0,
    hdd: int = 0,
    ssd: int = 0,
    io_ops: int = 0,
    rack: str | None = None,
) -> Host:
    """A host; `vcpus`/`pcpus`/`mem`/`huge`/`pci` are per cell unless `numa` lists the cells.

    Defaults: 4 shared CPUs and 4096 MB per cell, no dedicated CPUs, no disk, fresh heartbeat.
    """
    if numa is None:
        numa = [cell(vcpus=vcpus, pcpus=pcpus, mem=mem, huge=huge, pci=pci) for _ in range(cells)]
    if page_kb is None:
        page_kb = 2048 if any(c.hugepages_mb for c in numa) else 0
    return Host.model_validate(
        {
            "name": name,
            "availability_zone": az,
            "aggregates": list(aggregates),
            "traits": list(traits),
            "enabled": enabled,
            "last_heartbeat": heartbeat,
            "architecture": arch,
            "hypervisor_type": hypervisor,
            "trusted": trusted,
            "capabilities": dict(capabilities or {}),
            "cpu_allocation_ratio": cpu_ratio,
            "ram_allocation_ratio": ram_ratio,
            "disk_allocation_ratio": disk_ratio,
            "reserved_memory_mb": reserved_mem,
            "reserved_disk_gb": reserved_disk,
            "hugepage_size_kb": page_kb,
            "disk": DiskInventory(hdd_gb=hdd, ssd_gb=ssd),
            "io_ops": io_ops,
            "rack": rack,
            "numa_cells": list(numa),
        }
    )


def flavor(
    name: str,
    *,
    vcpus: int = 1,
    mem: int = 1024,
    disk: int = 0,
    ephemeral: int = 0,
    swap: int = 0,
    ssd: bool = False,
    pinned: bool = False,
    numa: int | None = None,
    page: str | None = None,
    split: str | None = None,
    numa_cpus: tuple[str, ...] | None = None,
    numa_mem: tuple[int, ...] | None = None,
    min_vcpus: int | None = None,
    min_mem: int | None = None,
    pci: str | None = None,
    pci_policy: str | None = None,
    required: Iterable[str] = (),
    forbidden: Iterable[str] = (),
    trusted: bool = False,
    aggregate: Mapping[str, str] | None = None,
    capabilities: Mapping[str, str] | None = None,
    specs: Mapping[str, str] | None = None,
) -> Flavor:
    """A flavor; each keyword maps to one of Nova's (or Berth's) extra specs."""
    extra: dict[str, str] = {}
    if pinned:
        extra["hw:cpu_policy"] = "dedicated"
    if numa is not None:
        extra["hw:numa_nodes"] = str(numa)
    if page is not None:
        extra["hw:mem_page_size"] = page
    if split is not None:
        extra["berth:numa_split"] = split
    if numa_cpus is not None:
        for i, cpus in enumerate(numa_cpus):
            extra[f"hw:numa_cpus.{i}"] = cpus
    if numa_mem is not None:
        for i, mb in enumerate(numa_mem):
            extra[f"hw:numa_mem.{i}"] = str(mb)
    if min_vcpus is not None:
        extra["berth:numa_min_vcpus"] = str(min_vcpus)
    if min_mem is not None:
        extra["berth:numa_min_memory_mb"] = str(min_mem)
    if pci is not None:
        extra["pci_passthrough:alias"] = pci
    if pci_policy is not None:
        extra["hw:pci_numa_affinity_policy"] = pci_policy
    for trait in required:
        extra[f"trait:{trait}"] = "required"
    for trait in forbidden:
        extra[f"trait:{trait}"] = "forbidden"
    if trusted:
        extra["trust:trusted_host"] = "trusted"
    for key, value in (aggregate or {}).items():
        extra[f"aggregate_instance_extra_specs:{key}"] = value
    for key, value in (capabilities or {}).items():
        extra[f"capabilities:{key}"] = value
    extra.update(specs or {})
    return Flavor(
        name=name,
        vcpus=vcpus,
        memory_mb=mem,
        root_gb=disk,
        ephemeral_gb=ephemeral,
        swap_mb=swap,
        disk_kind="ssd" if ssd else "hdd",
        extra_specs=extra,
    )


def group(gid: str, policy: str | GroupPolicy, max_per_host: int = 1) -> ServerGroup:
    return ServerGroup(id=gid, policy=GroupPolicy(policy), max_server_per_host=max_per_host)


def instance(
    iid: str,
    host_name: str,
    flavor_name: str,
    *,
    group_id: str | None = None,
    numa: Sequence[tuple[int, int, int]] | None = None,
    project: str = "default",
) -> Instance:
    """An existing instance; `numa` lists (cell, vcpus, memory_mb) when stated exactly."""
    cells = None
    if numa is not None:
        cells = [CellPlacement(cell=c, vcpus=v, memory_mb=m) for c, v, m in numa]
    return Instance(
        id=iid,
        host=host_name,
        flavor=flavor_name,
        server_group=group_id,
        project=project,
        numa=cells,
    )


def fleet(
    hosts: Iterable[Host],
    flavors: Iterable[Flavor],
    instances: Iterable[Instance] = (),
    *,
    groups: Iterable[ServerGroup] = (),
    aggregates: Mapping[str, Mapping[str, str]] | None = None,
    aliases: Mapping[str, str] | None = None,
    now: float | None = NOW,
) -> Fleet:
    """A fleet; `aggregates` maps name -> metadata, `aliases` maps PCI alias -> device type."""
    return Fleet(
        now=now,
        aggregates=[Aggregate(name=n, metadata=dict(m)) for n, m in (aggregates or {}).items()],
        pci_aliases=[PciAlias(name=n, device_type=t) for n, t in (aliases or {}).items()],
        hosts=list(hosts),
        flavors=list(flavors),
        server_groups=list(groups),
        instances=list(instances),
    )


def table_of(
    hosts: Iterable[Host],
    flavors: Iterable[Flavor],
    instances: Iterable[Instance] = (),
    **kwargs: Any,
) -> HostTable:
    """`HostTable.from_fleet(fleet(hosts, flavors, instances, **kwargs))`."""
    return HostTable.from_fleet(fleet(hosts, flavors, instances, **kwargs))


# ---------------------------------------------------------------------------- filters


def request(flavor_name: str, **kwargs: Any) -> RequestSpec:
    """A request; `arch=`/`hypervisor=`/`image_required=`/`image_forbidden=` build the image."""
    image = {
        "architecture": kwargs.pop("arch", None),
        "hypervisor_type": kwargs.pop("hypervisor", None),
        "required_traits": tuple(kwargs.pop("image_required", ())),
        "forbidden_traits": tuple(kwargs.pop("image_forbidden", ())),
    }
    if any(image.values()):
        kwargs["image"] = ImageProps.model_validate(image)
    return RequestSpec(flavor=flavor_name, **kwargs)


def context(table: HostTable, flavor_name: str, *, now: float = NOW, **kwargs: Any) -> Context:
    return Context(table, request(flavor_name, **kwargs), table.demand(flavor_name), now)


def passing(
    flt: HostFilter, table: HostTable, flavor_name: str, *, now: float = NOW, **kwargs: Any
) -> list[str]:
    """Names of the hosts `flt` lets through, in table order."""
    mask = flt.mask(context(table, flavor_name, now=now, **kwargs))
    assert mask.dtype == np.bool_
    assert mask.shape == (len(table),)
    return [table.names[r] for r in np.flatnonzero(mask)]


def reasons(
    flt: HostFilter, table: HostTable, flavor_name: str, *, now: float = NOW, **kwargs: Any
) -> dict[str, list[str]]:
    """`flt.explain` over the hosts it rejects: {code: [host names in table order]}.

    Reasons that cover no host are dropped.

    Also checks that the reasons partition the rejected hosts (each counted exactly once).
    """
    ctx = context(table, flavor_name, now=now, **kwargs)
    failed = ~flt.mask(ctx)
    out: dict[str, list[str]] = {}
    if not failed.any():  # like `diagnose`, explain only what failed
        return out
    seen = np.zeros(len(table), dtype=int)
    for rejection, hosts in flt.explain(ctx, failed):
        hosts = hosts & failed
        seen += hosts
        if hosts.any():
            out.setdefault(rejection.code, []).extend(table.names[r] for r in np.flatnonzero(hosts))
    assert (seen == failed).all(), "explain must attribute every rejected host exactly once"
    return {code: sorted(names, key=table.index.__getitem__) for code, names in out.items()}


# ---------------------------------------------------------------------------- scheduling


def scheduler(
    filters: Sequence[str] | None = None,
    weighers: Mapping[str, float] | Sequence[WeigherConfig] = (),
    *,
    driver: str = "filter",
    filter_params: Mapping[str, Mapping[str, Any]] | None = None,
    **kwargs: Any,
) -> FilterScheduler:
    """`FilterScheduler.from_config` with the default filters unless `filters` is given."""
    if isinstance(weighers, Mapping):
        wcfg = [WeigherConfig(name=n, weight=w) for n, w in weighers.items()]
    else:
        wcfg = list(weighers)
    config: dict[str, Any] = {
        "driver": driver,
        "weighers": wcfg,
        "filter_params": {k: dict(v) for k, v in (filter_params or {}).items()},
        **kwargs,
    }
    if filters is not None:
        config["filters"] = list(filters)
    return FilterScheduler.from_config(SchedulerConfig.model_validate(config))


def place(
    sched: FilterScheduler, table: HostTable, flavor_name: str, *, now: float = NOW, **kw: Any
) -> Decision:
    """Select and commit one request; returns the decision."""
    decision = sched.select_destinations(table, request(flavor_name, **kw), now)
    commit(table, decision)
    return decision


# ---------------------------------------------------------------------------- table state

BOOKKEEPING = frozenset({"touched"})
"""Columns that record *when* a row last changed for derived caches (they never go back, by
design, so a request that claims tentatively and undoes leaves them moved)."""


def snapshot(table: HostTable) -> dict[str, Any]:
    """Everything observable about the table's state, copied: every numpy column, the
    allocations and the server-group membership."""
    out: dict[str, Any] = {
        key: value.copy() for key, value in vars(table).items() if isinstance(value, np.ndarray)
    }
    out["allocations"] = {
        iid: (
            a.host,
            a.flavor,
            a.cell_use.tolist(),
            a.host_use.tolist(),
            a.server_group,
            a.project,
            a.migratable,
        )
        for iid, a in table.allocations.items()
    }
    out["group_rows"] = {g: dict(rows) for g, rows in table.group_rows.items()}
    out["names"] = list(table.names)
    return out


def assert_unchanged(
    table: HostTable, before: dict[str, Any], *, except_: Iterable[str] = ()
) -> None:
    """`table` is bit-for-bit as in `before` (a `snapshot`), except the named columns."""
    after = snapshot(table)
    skip = BOOKKEEPING | set(except_)
    assert set(after) == set(before)
    for key, old in before.items():
        if key in skip:
            continue
        new = after[key]
        if isinstance(old, np.ndarray):
            assert new.dtype == old.dtype, key
            assert np.array_equal(new, old, equal_nan=old.dtype.kind == "f"), key
        else:
            assert new == old, key
