"""The bundled demo: a policy and a topology of 3 regions, 5 IDCs, 10 clusters, 6 pools.

Generated deterministically (`build_demo_policy`, `build_demo_topology`); the shipped files
`berth/data/demo-policy.yaml` and `berth/data/demo-topology.yaml` are these, written by
`python -m berth.policy.demo` (a test checks they match). Running instances are placed by the
policy engine itself on empty clusters, so each is an exact, valid claim, with a business type,
a user and a creation time.
"""

from __future__ import annotations

import random
import sys
from importlib import resources
from pathlib import Path

from berth.core.model import DiskInventory, Host, NumaCell, PciAlias
from berth.policy import pipeline
from berth.policy.loader import dump_text
from berth.policy.model import (
    BaseFlavor,
    Business,
    BusinessRule,
    ClusterInstance,
    ClusterSpec,
    DeploymentDefaults,
    DeploymentSetSpec,
    FamilyRule,
    IdcSpec,
    Network,
    Placement,
    Policy,
    Pool,
    PreemptibleLimits,
    RegionSpec,
    TopologySpec,
    UserRule,
    Variant,
)
from berth.policy.outcome import Placement as PipelinePlacement
from berth.policy.outcome import ScheduleRequest

DEMO_NOW = 1_780_000_000.0
POLICY_FILE = "demo-policy.yaml"
TOPOLOGY_FILE = "demo-topology.yaml"

_PINNED = {"hw:cpu_policy": "dedicated"}
_DPDK = {"hw:mem_page_size": "1GB", "pci_passthrough:alias": "dpdk-vf:1"}
_SIZES = {"large": 2, "xlarge": 4, "2xlarge": 8, "4xlarge": 16}


def build_demo_policy() -> Policy:
    """The demo policy: six pools, five variants, three business types, four special users."""
    return Policy(
        pools=_demo_pools(),
        families=_demo_families(),
        flavors=_demo_flavors(),
        variants=_demo_variants(),
        pci_aliases=[
            PciAlias(name="dpdk-vf", device_type="vf-dpdk"),
            PciAlias(name="a100", device_type="gpu-a100"),
        ],
        business={
            "on-demand": BusinessRule(
                variants=["dpdk-numa1", "dpdk-numa2", "numa1", "numa2"], may_preempt=True
            ),
            "auto-scaling": BusinessRule(variants=["numa1"]),
            "preemptible": BusinessRule(variants=["numa2"]),
        },
        users=[
            UserRule(user="bigdata", business="preemptible", variants=["numa2-flex", "numa2"]),
            UserRule(user="fin-core", pool="enterprise", variants=["numa1", "numa2"]),
            UserRule(user="ci-runner", business="auto-scaling", variants=["numa1", "numa2"]),
            UserRule(user="game-ops", business="auto-scaling", may_preempt=True),
        ],
        preemptible_limits=PreemptibleLimits(default=150, idcs={"gz-th": 30}),
        deployment_sets=DeploymentDefaults(max_size=20, scope="host"),
        placement=Placement(cluster_choice="most-capacity", profile="berth"),
    )


def _demo_pools() -> list[Pool]:
    return [
        Pool(name="shared", traits=["CUSTOM_POOL_SHARED"], description="cloud-disk, shared"),
        Pool(name="enterprise", traits=["CUSTOM_POOL_ENTERPRISE"], description="enterprise"),
        Pool(name="local-hdd", traits=["CUSTOM_POOL_LOCAL_HDD"], description="local HDD"),
        Pool(name="local-ssd", traits=["CUSTOM_POOL_LOCAL_SSD"], description="local NVMe SSD"),
        Pool(name="dpdk", traits=["CUSTOM_POOL_DPDK"], description="network-enhanced (DPDK)"),
        Pool(name="gpu", traits=["CUSTOM_POOL_GPU"], description="GPU passthrough"),
    ]


def _demo_families() -> list[FamilyRule]:
    return [
        FamilyRule(name="compute", pool="shared"),
        FamilyRule(name="general", pool="shared"),
        FamilyRule(name="memory", pool="shared"),
        FamilyRule(name="local-hdd", pool="local-hdd"),
        FamilyRule(name="local-ssd", pool="local-ssd", disk_kind="ssd"),
        FamilyRule(name="gpu", pool="gpu", extra_specs={"pci_passthrough:alias": "a100:1"}),
    ]


def _demo_flavors() -> list[BaseFlavor]:
    """Four sizes in each cloud family, two in each local-disk family and in the GPU family."""
    flavors: list[BaseFlavor] = []
    for prefix, family, gb in (("c3", "compute", 2), ("g3", "general", 4), ("m3", "memory", 8)):
        for size, vcpus in _SIZES.items():
            flavors.append(
                BaseFlavor(
                    name=f"v.{prefix}.{size}",
                    family=family,
                    vcpus=vcpus,
                    memory_mb=vcpus * gb * 1024,
                    root_gb=40,
                )
            )
    for size, vcpus in (("2xlarge", 8), ("4xlarge", 16)):
        flavors.append(
            BaseFlavor(
                name=f"v.d3.{size}",
                family="local-hdd",
                vcpus=vcpus,
                memory_mb=vcpus * 4 * 1024,
                root_gb=40,
                ephemeral_gb=vcpus * 250,
            )
        )
        flavors.append(
            BaseFlavor(
                name=f"v.i3.{size}",
                family="local-ssd",
                vcpus=vcpus,
                memory_mb=vcpus * 8 * 1024,
                root_gb=40,
                ephemeral_gb=vcpus * 100,
            )
        )
    for size, vcpus in (("4xlarge", 16), ("8xlarge", 32)):
        flavors.append(
            BaseFlavor(
                name=f"v.gn3.{size}",
                family="gpu",
                vcpus=vcpus,
                memory_mb=vcpus * 8 * 1024,
                root_gb=100,
            )
        )
    return flavors


def _demo_variants() -> list[Variant]:
    cloud = ["compute", "general", "memory"]
    return [
        Variant(
            name="dpdk-numa1",
            suffix=".numa1.dpdk",
            description="DPDK, single NUMA node",
            pool="dpdk",
            families=cloud,
            extra_specs={**_PINNED, "hw:numa_nodes": "1", **_DPDK},
        ),
        Variant(
            name="dpdk-numa2",
            suffix=".dpdk",
            description="DPDK, two NUMA nodes",
            pool="dpdk",
            families=cloud,
            extra_specs={**_PINNED, "hw:numa_nodes": "2", **_DPDK},
        ),
        Variant(
            name="numa1",
            suffix=".numa1",
            description="single NUMA node",
            extra_specs={**_PINNED, "hw:numa_nodes": "1"},
        ),
        Variant(
            name="numa2",
            suffix="",
            description="two NUMA nodes, even split (carries the base name)",
            extra_specs={**_PINNED, "hw:numa_nodes": "2"},
        ),
        Variant(
            name="numa2-flex",
            suffix=".flex",
            description="two NUMA nodes, uneven split allowed (big data)",
            families=[*cloud, "local-hdd"],
            extra_specs={**_PINNED, "hw:numa_nodes": "2", "berth:numa_split": "flexible"},
        ),
    ]


# pool: (shared cpus, dedicated cpus, small-page GB, hugepage GB, pci, hdd GB, ssd GB) per cell;
# also the hardware of benchmarks/bench_policy.py
HARDWARE: dict[str, tuple[int, int, int, int, dict[str, int], int, int]] = {
    "shared": (4, 24, 96, 0, {}, 2000, 0),
    "enterprise": (4, 28, 128, 0, {}, 2000, 0),
    "local-hdd": (4, 20, 96, 0, {}, 12000, 0),
    "local-ssd": (4, 20, 128, 0, {}, 500, 7680),
    "dpdk": (2, 20, 32, 64, {"vf-dpdk": 8}, 1000, 0),
    "gpu": (4, 24, 192, 0, {"gpu-a100": 2}, 2000, 0),
}
POOL_TRAITS = {
    "shared": ["CUSTOM_POOL_SHARED"],
    "enterprise": ["CUSTOM_POOL_ENTERPRISE"],
    "local-hdd": ["CUSTOM_POOL_LOCAL_HDD"],
    "local-ssd": ["CUSTOM_POOL_LOCAL_SSD"],
    "dpdk": ["CUSTOM_POOL_DPDK", "HW_NIC_SRIOV"],
    "gpu": ["CUSTOM_POOL_GPU"],
}

# region -> IDC -> (clusters, images missing, offered families or None)
_REGIONS: dict[str, dict[str, tuple[int, list[str], list[str] | None]]] = {
    "beijing": {"bj-yz": (2, [], None), "bj-zw": (2, ["windows-2022"], None)},
    "shanghai": {
        "sh-jd": (2, [], None),
        "sh-pd": (2, ["windows-2022"], ["compute", "general", "memory", "local-hdd"]),
    },
    "guangzhou": {"gz-th": (2, ["windows-2022", "debian-12"], None)},
}
_IMAGES = ["centos-7.9", "ubuntu-22.04", "debian-12", "windows-2022"]


def _cluster_hosts(idc: str, cluster: str, index: int, rng: random.Random) -> list[Host]:
    mix = {"shared": 10, "enterprise": 3, "local-hdd": 3, "local-ssd": 2, "dpdk": 4, "gpu": 2}
    if index % 2:
        mix["gpu"] = 0
        mix["local-ssd"] = 3
    hosts = []
    i = 0
    for pool, n in mix.items():
        shared, dedicated, mem_gb, huge_gb, pci, hdd, ssd = HARDWARE[pool]
        for k in range(n):
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
                    name=f"{cluster}-{pool}-{k:02d}",
                    availability_zone=idc,
                    traits=list(POOL_TRAITS[pool]),
                    enabled=rng.random() > 0.03,
                    last_heartbeat=DEMO_NOW - rng.randint(1, 30),
                    trusted=pool == "enterprise",
                    reserved_memory_mb=4096,
                    hugepage_size_kb=1048576 if huge_gb else 0,
                    disk=DiskInventory(hdd_gb=hdd, ssd_gb=ssd),
                    # racks are per IDC and shared by its clusters (two clusters per rack row)
                    rack=f"{idc}-r{(i + index * 3) % 8 + 1:02d}",
                    numa_cells=cells,
                )
            )
            i += 1
    return hosts


def _empty_topology(rng: random.Random) -> TopologySpec:
    regions = []
    for region, idcs in _REGIONS.items():
        idc_specs = []
        for idc, (n_clusters, missing, offered) in idcs.items():
            clusters = []
            for c in range(n_clusters):
                name = f"{idc}-c{c + 1}"
                networks = [Network(name=f"{name}-net1", free_ips=rng.randint(300, 600))]
                if c == 1:
                    networks.append(Network(name=f"{name}-net2", free_ips=rng.randint(50, 120)))
                if name == "sh-pd-c2":
                    networks = [Network(name=f"{name}-net1", free_ips=3)]
                clusters.append(
                    ClusterSpec(
                        name=name,
                        enabled=name != "gz-th-c2",
                        networks=networks,
                        hosts=_cluster_hosts(idc, name, c, rng),
                    )
                )
            idc_specs.append(
                IdcSpec(
                    name=idc,
                    images=[i for i in _IMAGES if i not in missing],
                    flavors=offered,
                    clusters=clusters,
                )
            )
        regions.append(RegionSpec(name=region, idcs=idc_specs))
    return TopologySpec(
        now=DEMO_NOW,
        regions=regions,
        deployment_sets=[
            DeploymentSetSpec(name="web-prod", max_size=20, scope="host"),
            DeploymentSetSpec(name="db-prod", max_size=6, scope="rack"),
        ],
    )


def build_demo_topology(seed: int = 11, requests: int = 420) -> TopologySpec:
    """Hosts for every cluster, then `requests` mixed requests placed by the engine itself."""
    rng = random.Random(seed)
    empty = _empty_topology(rng)
    # clusters built without their fill, then filled by scheduling (enabled for the fill)
    fill_spec = empty.model_copy(
        update={
            "regions": [
                r.model_copy(
                    update={
                        "idcs": [
                            i.model_copy(
                                update={
                                    "clusters": [
                                        c.model_copy(update={"enabled": True}) for c in i.clusters
                                    ]
                                }
                            )
                            for i in r.idcs
                        ]
                    }
                )
                for r in empty.regions
            ]
        }
    )
    policy = build_demo_policy()
    engine = pipeline.PolicyEngine(policy, fill_spec)
    bases = [f.name for f in policy.flavors]
    weights = [1 if f.family == "gpu" else 3 if f.vcpus <= 4 else 2 for f in policy.flavors]
    businesses = [Business.ON_DEMAND, Business.AUTO_SCALING, Business.PREEMPTIBLE]
    users = ["default", "default", "default", "bigdata", "fin-core", "ci-runner", "web-team"]
    regions = [r.name for r in empty.regions] + [i.name for r in empty.regions for i in r.idcs]
    for n in range(requests):
        business = rng.choices(businesses, weights=[55, 15, 30])[0]
        ds = None
        count = rng.choice([1, 1, 1, 2, 3])
        if n % 37 == 0:
            ds, count = "web-prod", 2
        elif n % 101 == 0:
            ds, count = "db-prod", 1
        request = ScheduleRequest(
            region=rng.choice(regions),
            flavor=rng.choices(bases, weights=weights)[0],
            count=count,
            business=business,
            user=rng.choice(users),
            deployment_set=ds,
            seed=n,
        )
        when = DEMO_NOW - rng.uniform(60, 30 * 86400)
        outcome = engine.decide(request, DEMO_NOW)
        if isinstance(outcome, PipelinePlacement) and not outcome.evictions:
            engine.commit(outcome, when)
    return _snapshot(engine, empty)


def _snapshot(engine: pipeline.PolicyEngine, empty: TopologySpec) -> TopologySpec:
    regions = []
    for region in empty.regions:
        idcs = []
        for idc in region.idcs:
            clusters = []
            for spec in idc.clusters:
                cluster = engine.topology.clusters[spec.name]
                table = cluster.table
                instances = []
                for inst in sorted(table.snapshot_instances(), key=lambda i: i.id):
                    meta = cluster.meta[inst.id]
                    instances.append(
                        ClusterInstance(
                            id=inst.id,
                            host=inst.host,
                            flavor=inst.flavor,
                            project=inst.project,
                            numa=inst.numa,
                            business=meta.business,
                            created_at=round(meta.created_at, 1),
                            user=meta.user,
                            deployment_set=meta.deployment_set,
                        )
                    )
                clusters.append(
                    spec.model_copy(
                        update={
                            "instances": instances,
                            "networks": [
                                Network(name=k, free_ips=v) for k, v in cluster.networks.items()
                            ],
                        }
                    )
                )
            idcs.append(idc.model_copy(update={"clusters": clusters}))
        regions.append(region.model_copy(update={"idcs": idcs}))
    return empty.model_copy(update={"regions": regions})


def demo_policy_text() -> str:
    return dump_text(build_demo_policy())


def demo_topology_text() -> str:
    return dump_text(build_demo_topology())


def shipped(name: str) -> str:
    return (resources.files("berth") / "data" / name).read_text(encoding="utf-8")


def shipped_path(name: str) -> str:
    return str(resources.files("berth") / "data" / name)


def main(argv: list[str] | None = None) -> int:
    """Write the demo files (default: into the package's data directory)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else Path(str(resources.files("berth") / "data"))
    (out / POLICY_FILE).write_text(demo_policy_text(), encoding="utf-8")
    (out / TOPOLOGY_FILE).write_text(demo_topology_text(), encoding="utf-8")
    print(f"wrote {out / POLICY_FILE} and {out / TOPOLOGY_FILE}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
