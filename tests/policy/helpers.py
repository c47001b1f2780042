"""Small builders for the policy tests (kept here so they do not depend on other suites)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from berth.core.config import SchedulerConfig, WeigherConfig
from berth.core.engine import FilterScheduler
from berth.core.model import Flavor, Fleet, Host, NumaCell, ServerGroup
from berth.core.table import HostTable

NOW = 2_000_000.0


def host(
    name: str,
    *,
    pcpus: int = 8,
    vcpus: int = 8,
    mem: int = 16384,
    cells: int = 2,
    traits: Iterable[str] = (),
    rack: str | None = None,
    pci: Mapping[str, int] | None = None,
    huge: int = 0,
    enabled: bool = True,
) -> Host:
    """A host with `cells` identical NUMA cells (amounts per cell), fresh heartbeat at NOW."""
    return Host(
        name=name,
        traits=list(traits),
        rack=rack,
        enabled=enabled,
        last_heartbeat=NOW,
        hugepage_size_kb=1048576 if huge else 0,
        disk={"hdd_gb": 4000},
        numa_cells=[
            NumaCell(
                shared_cpus=vcpus,
                dedicated_cpus=pcpus,
                memory_mb=mem,
                hugepages_mb=huge,
                pci=dict(pci or {}),
            )
            for _ in range(cells)
        ],
    )


def flavor(name: str, vcpus: int, mem: int, *, numa: int | None = None, **specs: str) -> Flavor:
    extra: dict[str, str] = {k.replace("__", ":"): v for k, v in specs.items()}
    if numa is not None:
        extra["hw:cpu_policy"] = "dedicated"
        extra["hw:numa_nodes"] = str(numa)
    return Flavor(name=name, vcpus=vcpus, memory_mb=mem, root_gb=10, extra_specs=extra)


def table(
    hosts: Iterable[Host],
    flavors: Iterable[Flavor],
    groups: Iterable[ServerGroup] = (),
) -> HostTable:
    return HostTable.from_fleet(
        Fleet(now=NOW, hosts=list(hosts), flavors=list(flavors), server_groups=list(groups))
    )


def scheduler(weighers: Mapping[str, float] | None = None, **kwargs: Any) -> FilterScheduler:
    w = [WeigherConfig(name=n, weight=x) for n, x in (weighers or {"ram": -1.0}).items()]
    return FilterScheduler.from_config(SchedulerConfig(weighers=w, **kwargs))


CACHE_BOOKKEEPING = ("touched",)
"""`touched`/`version` only order the derived caches; the core's own `select_destinations`
advances them (tentative claims are undone exactly, but the version never goes back)."""


def snapshot(t: HostTable) -> dict[str, Any]:
    """Everything a failed request must leave untouched, for bit-for-bit comparison: every
    column (free, capacity, generations, counts, attributes), the allocations with their exact
    footprints, and the server-group membership."""
    out: dict[str, Any] = {
        k: v.copy()
        for k, v in t.__dict__.items()
        if isinstance(v, np.ndarray) and k not in CACHE_BOOKKEEPING
    }
    out["allocations"] = sorted(
        (a.instance_id, a.host, a.flavor, a.cell_use.tobytes(), a.host_use.tobytes())
        for a in t.allocations.values()
    )
    out["group_rows"] = {g: dict(r) for g, r in t.group_rows.items()}
    return out


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k, v in a.items():
        if isinstance(v, np.ndarray):
            if not (v.shape == b[k].shape and np.array_equal(v, b[k], equal_nan=True)):
                return False
        elif v != b[k]:
            return False
    return True
