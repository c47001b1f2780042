"""Small fleets for store and service tests."""

from __future__ import annotations

from berth.core.model import Aggregate, Flavor, Fleet, Host, NumaCell, PciAlias, ServerGroup
from berth.core.table import HostTable
from berth.store.footprint import to_named
from berth.store.repo import HostCapacity, NewInstance, Store, set_key

NOW = 1_800_000_000.0


def host(name: str, zone: str = "c1", *, pinned: int = 8, mem_gb: int = 32, gpus: int = 0) -> Host:
    pci = {"gpu-a100": gpus} if gpus else {}
    return Host(
        name=name,
        availability_zone=zone,
        aggregates=["all"],
        traits=["CUSTOM_POOL_GPU"] if gpus else ["CUSTOM_POOL_SHARED"],
        last_heartbeat=NOW - 5,
        rack=f"{zone}-r{int(name.rsplit('-', 1)[-1]) // 2}",
        disk={"hdd_gb": 1000},
        numa_cells=[
            NumaCell(shared_cpus=4, dedicated_cpus=pinned, memory_mb=mem_gb * 1024, pci=pci)
            for _ in range(2)
        ],
    )


FLAVORS = [
    Flavor(
        name="p4",
        vcpus=4,
        memory_mb=8192,
        root_gb=10,
        extra_specs={"hw:cpu_policy": "dedicated", "hw:numa_nodes": "1"},
    ),
    Flavor(
        name="p8",
        vcpus=8,
        memory_mb=16384,
        root_gb=10,
        extra_specs={"hw:cpu_policy": "dedicated", "hw:numa_nodes": "1"},
    ),
    Flavor(name="s2", vcpus=2, memory_mb=2048, root_gb=10),
    Flavor(
        name="g1",
        vcpus=4,
        memory_mb=8192,
        root_gb=10,
        extra_specs={
            "hw:cpu_policy": "dedicated",
            "hw:numa_nodes": "1",
            "pci_passthrough:alias": "a100:1",
        },
    ),
]


def small_fleet(n: int = 4, zones: tuple[str, ...] = ("c1",), gpus: int = 0) -> Fleet:
    hosts = [host(f"h-{z}-{i}", z, gpus=gpus if i == 0 else 0) for z in zones for i in range(n)]
    return Fleet(
        now=NOW,
        aggregates=[Aggregate(name="all", metadata={"kind": "test"})],
        pci_aliases=[PciAlias(name="a100", device_type="gpu-a100")],
        hosts=hosts,
        flavors=FLAVORS,
        server_groups=[ServerGroup(id="web", policy="anti-affinity")],
    )


def claim_one(
    store: Store,
    fleet: Fleet,
    instance_id: str,
    host_name: str,
    flavor: str = "p4",
    *,
    generation: int | None = None,
    group: str | None = None,
    group_generation: int = 0,
    project: str = "default",
) -> None:
    """Claim one instance through `commit_placement`, with the core's own footprint."""
    table = HostTable.from_fleet(fleet.model_copy(update={"instances": []}))
    row = table.index[host_name]
    cell_use, host_use = table.plan_for(flavor, row)
    gen = store.get_host(host_name).generation if generation is None else generation
    store.commit_placement(
        placement_id=f"p-{instance_id}",
        instances=[
            NewInstance(
                id=instance_id,
                host=host_name,
                cluster=store.get_host(host_name).cluster,
                flavor=flavor,
                footprint=to_named(cell_use, host_use, table.device_types),
                project=project,
                server_group=group,
            )
        ],
        host_generations={host_name: gen},
        group_generations={set_key(project, group): group_generation} if group else {},
        capacities={
            host_name: HostCapacity(
                table.cell_cap[row].copy(), table.host_cap[row].copy(), list(table.device_types)
            )
        },
    )
