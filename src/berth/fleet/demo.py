"""The bundled demo fleet: a few hundred mixed hosts, several zones, GPUs and DPDK NICs.

Generated deterministically from a seed so that tests can rebuild it and compare with the
shipped file (`berth/data/demo-fleet.yaml`). Existing instances are placed by the core itself
(chance driver), so every one of them is a valid, exact claim.
"""

from __future__ import annotations

import random
from importlib import resources

from berth.core.config import SchedulerConfig
from berth.core.engine import FilterScheduler, commit
from berth.core.explain import NoValidHost
from berth.core.model import (
    Aggregate,
    DiskInventory,
    Flavor,
    Fleet,
    Host,
    NumaCell,
    PciAlias,
    ServerGroup,
)
from berth.core.request import RequestSpec
from berth.core.table import HostTable

DEMO_NOW = 1_780_000_000.0
DEMO_FILE = "demo-fleet.yaml"

# name: (hosts, shared cpus/cell, dedicated cpus/cell, memory GB/cell, hugepages GB/cell,
#        pci per cell, traits, hdd GB, ssd GB)
_HARDWARE: dict[str, tuple[int, int, int, int, int, dict[str, int], list[str], int, int]] = {
    "std": (120, 8, 24, 192, 0, {}, ["CUSTOM_POOL_SHARED"], 2000, 0),
    "ent": (60, 4, 28, 256, 0, {}, ["CUSTOM_POOL_ENTERPRISE"], 2000, 0),
    "dpdk": (40, 4, 28, 128, 64, {"vf-dpdk": 16}, ["CUSTOM_POOL_DPDK", "HW_NIC_SRIOV"], 1000, 0),
    "ssd": (30, 8, 24, 192, 0, {}, ["CUSTOM_POOL_LOCAL_SSD"], 500, 3840),
    "gpu": (20, 4, 28, 256, 0, {"gpu-a100": 2}, ["CUSTOM_POOL_GPU"], 2000, 0),
}

_ZONES = ["az1", "az2", "az3"]


def demo_flavors() -> list[Flavor]:
    flavors: list[Flavor] = []
    families = {"c3": 2, "g3": 4, "m3": 8}  # memory GB per vCPU
    sizes = {"large": 2, "xlarge": 4, "2xlarge": 8, "4xlarge": 16, "8xlarge": 32}
    for family, gb in families.items():
        for size, vcpus in sizes.items():
            base = f"{family}.{size}"
            mem = vcpus * gb * 1024
            pinned = {
                "hw:cpu_policy": "dedicated",
                "trait:CUSTOM_POOL_DPDK": "forbidden",
                "trait:CUSTOM_POOL_GPU": "forbidden",
            }
            flavors.append(Flavor(name=base, vcpus=vcpus, memory_mb=mem, root_gb=40))
            flavors.append(
                Flavor(
                    name=f"{base}.numa1",
                    vcpus=vcpus,
                    memory_mb=mem,
                    root_gb=40,
                    extra_specs={**pinned, "hw:numa_nodes": "1"},
                )
            )
            if vcpus >= 4:
                flavors.append(
                    Flavor(
                        name=f"{base}.numa2",
                        vcpus=vcpus,
                        memory_mb=mem,
                        root_gb=40,
                        extra_specs={**pinned, "hw:numa_nodes": "2"},
                    )
                )
                flavors.append(
                    Flavor(
                        name=f"{base}.flex",
                        vcpus=vcpus,
                        memory_mb=mem,
                        root_gb=40,
                        extra_specs={
                            **pinned,
                            "hw:numa_nodes": "2",
                            "berth:numa_split": "flexible",
                        },
                    )
                )
    for size, vcpus in {"xlarge": 4, "2xlarge": 8, "4xlarge": 16}.items():
        flavors.append(
            Flavor(
                name=f"n3.{size}.dpdk",
                vcpus=vcpus,
                memory_mb=vcpus * 4 * 1024,
                root_gb=40,
                extra_specs={
                    "hw:cpu_policy": "dedicated",
                    "hw:numa_nodes": "1",
                    "hw:mem_page_size": "1GB",
                    "pci_passthrough:alias": "dpdk-vf:2",
                    "trait:CUSTOM_POOL_DPDK": "required",
                },
            )
        )
    flavors.append(
        Flavor(
            name="gn3.4xlarge",
            vcpus=16,
            memory_mb=128 * 1024,
            root_gb=100,
            extra_specs={
                "hw:cpu_policy": "dedicated",
                "hw:numa_nodes": "1",
                "pci_passthrough:alias": "a100:1",
                "trait:CUSTOM_POOL_GPU": "required",
            },
        )
    )
    for size, vcpus in {"2xlarge": 8, "4xlarge": 16}.items():
        flavors.append(
            Flavor(
                name=f"i3.{size}",
                vcpus=vcpus,
                memory_mb=vcpus * 8 * 1024,
                root_gb=40,
                ephemeral_gb=vcpus * 100,
                disk_kind="ssd",
                extra_specs={"trait:CUSTOM_POOL_LOCAL_SSD": "required"},
            )
        )
    return flavors


def _hosts(rng: random.Random) -> list[Host]:
    hosts: list[Host] = []
    for kind, (
        count,
        shared,
        dedicated,
        mem_gb,
        huge_gb,
        pci,
        traits,
        hdd,
        ssd,
    ) in _HARDWARE.items():
        for i in range(count):
            zone = _ZONES[i % len(_ZONES)]
            rack = f"{zone}-r{(i // 10) + 1:02d}"
            enabled = rng.random() > 0.02
            stale = rng.random() < 0.02
            cells = [
                NumaCell(
                    shared_cpus=shared,
                    dedicated_cpus=dedicated,
                    memory_mb=mem_gb * 1024,
                    hugepages_mb=huge_gb * 1024,
                    pci=dict(pci),
                )
                for _ in range(2)
            ]
            hosts.append(
                Host(
                    name=f"{kind}-{zone}-{i:03d}",
                    availability_zone=zone,
                    aggregates=[f"{kind}-pool"],
                    traits=list(traits),
                    enabled=enabled,
                    last_heartbeat=DEMO_NOW - (600 if stale else rng.randint(1, 30)),
                    trusted=kind in ("ent", "gpu"),
                    capabilities={"cpu_model": "Icelake" if i % 2 else "Cascadelake"},
                    cpu_allocation_ratio={"std": 4.0, "ssd": 2.0}.get(kind, 1.0),
                    ram_allocation_ratio=1.0,
                    reserved_memory_mb=8192,
                    hugepage_size_kb=1048576 if huge_gb else 0,
                    disk=DiskInventory(hdd_gb=hdd, ssd_gb=ssd),
                    io_ops=rng.randint(0, 8),
                    rack=rack,
                    numa_cells=cells,
                )
            )
    return hosts


def build_demo_fleet(seed: int = 7, fill: int = 500) -> Fleet:
    """The demo fleet: hosts, flavors, two server groups and `fill` existing instances."""
    rng = random.Random(seed)
    hosts = _hosts(rng)
    flavors = demo_flavors()
    base = Fleet(
        now=DEMO_NOW,
        aggregates=[Aggregate(name=f"{kind}-pool", metadata={"pool": kind}) for kind in _HARDWARE],
        pci_aliases=[
            PciAlias(name="a100", device_type="gpu-a100"),
            PciAlias(name="dpdk-vf", device_type="vf-dpdk"),
        ],
        hosts=hosts,
        flavors=flavors,
        server_groups=[
            ServerGroup(id="web-prod", policy="anti-affinity"),
            ServerGroup(id="db-prod", policy="anti-affinity"),
        ],
    )
    table = HostTable.from_fleet(base)
    scheduler = FilterScheduler.from_config(SchedulerConfig(driver="chance"))
    names = [f.name for f in flavors if not f.name.endswith(".8xlarge")]
    placed = 0
    for n in range(fill * 2):
        if placed == fill:
            break
        flavor = rng.choice(names)
        group = "web-prod" if n % 97 == 0 else None
        request = RequestSpec(
            flavor=flavor, seed=n, instance_ids=(f"vm-{n:05d}",), server_group=group
        )
        try:
            commit(table, scheduler.select_destinations(table, request, DEMO_NOW))
            placed += 1
        except NoValidHost:
            continue
    instances = [
        inst.model_copy(update={"project": f"project-{int(inst.id[3:]) % 5}"})
        for inst in table.snapshot_instances()
    ]
    return base.model_copy(update={"instances": instances})


def demo_fleet_text() -> str:
    """The shipped demo fleet file's text."""
    return (resources.files("berth") / "data" / DEMO_FILE).read_text(encoding="utf-8")


def demo_fleet_path() -> str:
    return str(resources.files("berth") / "data" / DEMO_FILE)
