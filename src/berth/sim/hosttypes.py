"""Built-in host types for fleet sizing specs ("N hosts of type X per cluster").

A host type is a `berth.core.model.Host` without its name and zone. Two sets are built in:

* ``azure-1`` ... ``azure-16``: the machine types of CoSpot's ``server_vm_cores_ram.json``
  (Protean/CoSpot units: shared CPUs = server cores / 2, memory_mb = server ram, one NUMA cell;
  see `berth.sim.azure` for why). ``azure-1`` fits every VM of the sample.
* 360-like two-socket hosts for the synthetic generator (`berth.sim.synthetic`):
  ``std-2s`` (general pool: 2 x 48 shared CPUs, 2 x 256 GiB, 4 TB local HDD),
  ``ssd-2s`` (local-SSD pool, trait CUSTOM_POOL_LOCAL_SSD, 2 x 48 CPUs, 2 x 256 GiB, 6.4 TB
  SSD) and ``dpdk-2s`` (network-enhanced pool, trait CUSTOM_POOL_DPDK: 2 x 32 pinnable CPUs
  and 2 x 160 GiB of 1 GiB huge pages for DPDK guests, 2 x 16 GiB small pages).
"""

from __future__ import annotations

from typing import Any

GIB = 1024

AZURE_SERVERS: dict[int, tuple[float, float]] = {
    1: (9600.0, 2250.0),
    2: (2400.0, 768.0),
    4: (16.0, 125.0),
    10: (6400.0, 3072.0),
    12: (4000.0, 2048.0),
    16: (10400.0, 2250.0),
}
"""CoSpot's machine capacities (server_cores[k], server_ram[k]) in the sample's units."""


def _azure(cores: float, ram: float) -> dict[str, Any]:
    return {
        "numa_cells": [{"shared_cpus": int(cores // 2), "memory_mb": int(ram)}],
    }


def _two_socket(
    shared: int, memory_gib: int, *, hdd: int = 0, ssd: int = 0, traits: list[str] | None = None
) -> dict[str, Any]:
    cell = {"shared_cpus": shared, "memory_mb": memory_gib * GIB}
    return {
        "numa_cells": [dict(cell), dict(cell)],
        "disk": {"hdd_gb": hdd, "ssd_gb": ssd},
        "traits": list(traits or []),
    }


HOST_TYPES: dict[str, dict[str, Any]] = {
    **{f"azure-{k}": _azure(c, r) for k, (c, r) in AZURE_SERVERS.items()},
    "std-2s": _two_socket(48, 256, hdd=4000),
    "ssd-2s": _two_socket(48, 256, ssd=6400, traits=["CUSTOM_POOL_LOCAL_SSD"]),
    "dpdk-2s": {
        "numa_cells": [
            {
                "shared_cpus": 0,
                "dedicated_cpus": 32,
                "memory_mb": 16 * GIB,
                "hugepages_mb": 160 * GIB,
            }
        ]
        * 2,
        "hugepage_size_kb": 1048576,
        "disk": {"hdd_gb": 1000},
        "traits": ["CUSTOM_POOL_DPDK"],
    },
}
