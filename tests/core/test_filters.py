"""Each host filter on small fleets: the exact mask, and `explain`'s reasons host by host.

NUMA topology has its own module (test_filter_numa.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from berth.core.errors import SpecError
from berth.core.filters.aggregate_extra_specs import AggregateInstanceExtraSpecsFilter
from berth.core.filters.all_hosts import AllHostsFilter
from berth.core.filters.availability_zone import AvailabilityZoneFilter
from berth.core.filters.base import HostFilter, Rejection
from berth.core.filters.compute import ComputeFilter, ComputeParams
from berth.core.filters.compute_capabilities import ComputeCapabilitiesFilter
from berth.core.filters.disk import DiskFilter
from berth.core.filters.image_properties import ImagePropertiesFilter
from berth.core.filters.num_instances import NumInstancesFilter, NumInstancesParams
from berth.core.filters.pci_passthrough import PciPassthroughFilter
from berth.core.filters.ram import RamFilter
from berth.core.filters.retry import RetryFilter
from berth.core.filters.same_host import DifferentHostFilter, SameHostFilter
from berth.core.filters.server_group import (
    ServerGroupAffinityFilter,
    ServerGroupAntiAffinityFilter,
)
from berth.core.filters.traits import TraitsFilter
from berth.core.filters.trusted import TrustedFilter
from berth.core.filters.vcpu import VcpuFilter
from berth.core.table import HostTable
from tests.builders import (
    NOW,
    cell,
    context,
    flavor,
    group,
    host,
    instance,
    passing,
    reasons,
    request,
    scheduler,
    table_of,
)


def rejections(
    flt: HostFilter, table: HostTable, flavor_name: str, **kwargs: Any
) -> list[tuple[Rejection, list[str]]]:
    """`explain` over the rejected hosts, reasons without hosts dropped."""
    ctx = context(table, flavor_name, **kwargs)
    failed = ~flt.mask(ctx)
    out = []
    for why, hosts in flt.explain(ctx, failed):
        names = [table.names[r] for r in np.flatnonzero(hosts & failed)]
        if names:
            out.append((why, names))
    return out


# ---------------------------------------------------------------------------- all_hosts


def test_all_hosts_passes_everything_even_disabled_and_full():
    table = table_of(
        [host("a", enabled=False), host("b", mem=1, heartbeat=None)],
        [flavor("f", vcpus=64, mem=10**6)],
    )
    assert passing(AllHostsFilter(), table, "f") == ["a", "b"]
    assert reasons(AllHostsFilter(), table, "f") == {}


# ---------------------------------------------------------------------------- compute

COMPUTE_HOSTS = [
    host("up", heartbeat=NOW - 10),
    host("disabled", enabled=False, heartbeat=NOW),
    host("stale", heartbeat=NOW - 120),
    host("never", heartbeat=None),
    host("edge", heartbeat=NOW - 60),
    host("disabled_stale", enabled=False, heartbeat=NOW - 1000),
    host("future", heartbeat=NOW + 5),
]


@pytest.mark.parametrize(
    ("down_time", "passed", "why"),
    [
        (
            None,
            ["up", "edge", "future"],
            {
                "host_disabled": ["disabled", "disabled_stale"],
                "host_down": ["stale", "never"],
            },
        ),
        (
            200.0,
            ["up", "stale", "edge", "future"],
            {"host_disabled": ["disabled", "disabled_stale"], "host_down": ["never"]},
        ),
        (
            59.0,
            ["up", "future"],
            {
                "host_disabled": ["disabled", "disabled_stale"],
                "host_down": ["stale", "never", "edge"],
            },
        ),
        (
            5000.0,
            ["up", "stale", "edge", "future"],
            {"host_disabled": ["disabled", "disabled_stale"], "host_down": ["never"]},
        ),
    ],
)
def test_compute_filter(down_time, passed, why):
    table = table_of(COMPUTE_HOSTS, [flavor("f")])
    params = ComputeParams() if down_time is None else ComputeParams(service_down_time=down_time)
    flt = ComputeFilter(params)
    assert passing(flt, table, "f") == passed
    assert reasons(flt, table, "f") == why


def test_compute_filter_message_names_down_time():
    table = table_of(COMPUTE_HOSTS, [flavor("f")])
    found = rejections(ComputeFilter(ComputeParams(service_down_time=90)), table, "f")
    messages = {why.code: why.message for why, _ in found}
    assert messages == {"host_disabled": "disabled", "host_down": "no heartbeat in the last 90 s"}


def test_compute_filter_uses_request_time():
    table = table_of([host("h", heartbeat=NOW)], [flavor("f")])
    assert passing(ComputeFilter(), table, "f", now=NOW + 60) == ["h"]
    assert passing(ComputeFilter(), table, "f", now=NOW + 61) == []


def test_compute_params_from_config_and_invalid_value():
    table = table_of(COMPUTE_HOSTS, [flavor("f")])
    sched = scheduler(["compute"], filter_params={"compute": {"service_down_time": 200}})
    chosen = {
        sched.select_destinations(table, request("f", seed=seed), NOW).hosts[0]
        for seed in range(40)
    }
    assert chosen == {"up", "stale", "edge", "future"}
    caps = sched.capacity(table, "f", NOW)
    assert caps.tolist() == [4, 0, 4, 0, 4, 0, 4]
    with pytest.raises(SpecError, match=r"filter 'compute' params\.service_down_time"):
        scheduler(["compute"], filter_params={"compute": {"service_down_time": 0}})
    with pytest.raises(SpecError, match="filter_params: 'ram' is not an enabled filter"):
        scheduler(["compute"], filter_params={"ram": {}})


# ---------------------------------------------------------------------------- ram

RAM_HOSTS = [
    host("exact", mem=2048),
    host("short", mem=2047),
    host("ratio", mem=1024, ram_ratio=2.0),
    host("reserved", mem=4096, reserved_mem=2049),
    host("two_cells", cells=2, mem=1024),
    host("ratio_reserved", mem=2024, ram_ratio=2.0, reserved_mem=1000),
    host("reserve_first", mem=2000, ram_ratio=1.5, reserved_mem=952),
    host("ratio_floor", mem=1365, ram_ratio=1.5),
]


def test_ram_filter_ratio_and_reserve():
    table = table_of(RAM_HOSTS, [flavor("f", mem=2048)])
    # Placement's arithmetic, (total - reserved) x ratio: ratio_reserved (2024 - 1000) x 2 =
    # 2048; reserve_first (2000 - 952) x 1.5 = 1572 (not 2000 x 1.5 - 952 = 2048);
    # ratio_floor int(1365 x 1.5) = 2047
    assert passing(RamFilter(), table, "f") == ["exact", "ratio", "two_cells", "ratio_reserved"]
    assert reasons(RamFilter(), table, "f") == {
        "insufficient_ram": ["short", "reserved", "reserve_first", "ratio_floor"]
    }
    [(why, hosts)] = rejections(RamFilter(), table, "f")
    assert why.resource == "ram_mb"
    assert why.requested == 2048
    assert why.message == "less than 2048 MB free RAM"
    assert why.free is not None
    assert why.free.tolist() == [2048, 2047, 2048, 2047, 2048, 2048, 1572, 2047]
    assert hosts == ["short", "reserved", "reserve_first", "ratio_floor"]


def test_ram_filter_counts_existing_instances():
    hosts = [host("a", mem=4096), host("b", mem=4096)]
    flavors = [flavor("f", mem=2048), flavor("g", mem=2049)]
    table = table_of(hosts, flavors, [instance("i1", "a", "f")])
    assert passing(RamFilter(), table, "f") == ["a", "b"]
    assert passing(RamFilter(), table, "g") == ["b"]


def test_ram_filter_ignores_hugepage_flavors():
    table = table_of(
        [host("small", mem=0, pcpus=2), host("huge", mem=0, huge=2048, pcpus=2)],
        [flavor("hp", vcpus=1, mem=2048, pinned=True, page="2MB")],
    )
    assert passing(RamFilter(), table, "hp") == ["small", "huge"]


# ---------------------------------------------------------------------------- vcpu


def test_vcpu_filter_shared_with_ratio():
    hosts = [
        host("two", vcpus=2),
        host("two_x2", vcpus=2, cpu_ratio=2.0),
        host("two_cells", cells=2, vcpus=2),
        host("floor_ok", vcpus=3, cpu_ratio=1.5),  # int(4.5) = 4
        host("floor_short", vcpus=3, cpu_ratio=1.3),  # int(3.9) = 3
        host("pinned_only", vcpus=0, pcpus=16),
    ]
    table = table_of(hosts, [flavor("f", vcpus=4)])
    assert passing(VcpuFilter(), table, "f") == ["two_x2", "two_cells", "floor_ok"]
    [(why, rejected)] = rejections(VcpuFilter(), table, "f")
    assert why.code == "insufficient_vcpu"
    assert why.resource == "vCPUs"
    assert why.requested == 4
    assert rejected == ["two", "floor_short", "pinned_only"]
    assert why.free is not None
    assert why.free.tolist() == [2, 4, 4, 4, 3, 0]


def test_vcpu_filter_pinned_counts_cells_without_ratio():
    hosts = [
        host("split", cells=2, pcpus=2),  # 2 + 2 pinned: enough in total (NUMA decides cells)
        host("one", pcpus=4),
        host("ratio", pcpus=2, cpu_ratio=4.0),  # dedicated CPUs are never over-committed
        host("shared_only", vcpus=64),
        host("uneven", numa=[cell(pcpus=3, mem=4096), cell(pcpus=0, mem=4096)]),
    ]
    table = table_of(hosts, [flavor("p", vcpus=4, pinned=True)])
    assert passing(VcpuFilter(), table, "p") == ["split", "one"]
    [(why, rejected)] = rejections(VcpuFilter(), table, "p")
    assert why.resource == "pinned CPUs"
    assert why.message == "less than 4 free pinned CPUs"
    assert rejected == ["ratio", "shared_only", "uneven"]
    assert why.free is not None
    assert why.free.tolist() == [4, 4, 2, 0, 3]


def test_vcpu_filter_pinned_after_claims():
    hosts = [host("a", cells=2, pcpus=2, mem=4096), host("b", cells=2, pcpus=2, mem=4096)]
    flavors = [flavor("p1", vcpus=1, pinned=True), flavor("p4", vcpus=4, pinned=True, numa=2)]
    table = table_of(hosts, flavors, [instance("i", "a", "p1")])
    assert passing(VcpuFilter(), table, "p4") == ["b"]
    assert passing(VcpuFilter(), table, "p1") == ["a", "b"]


# ---------------------------------------------------------------------------- disk


@pytest.mark.parametrize(
    ("ssd", "hosts", "passed", "code"),
    [
        (
            False,
            [
                host("exact", hdd=30),
                host("short", hdd=29),
                host("ssd_only", ssd=100),
                host("reserved_ok", hdd=40, reserved_disk=10),
                host("reserved_short", hdd=40, reserved_disk=11),
                host("ratio", hdd=20, disk_ratio=1.5),
            ],
            ["exact", "reserved_ok", "ratio"],
            "insufficient_disk_hdd",
        ),
        (
            True,
            [
                host("exact", ssd=30),
                host("hdd_only", hdd=100),
                host("reserve_spills", hdd=5, ssd=40, reserved_disk=10),  # 5 HDD + 5 SSD
                host("reserve_all_ssd", ssd=35, reserved_disk=10),  # 25 SSD
                host("ratio", ssd=15, disk_ratio=2.0),
            ],
            ["exact", "reserve_spills", "ratio"],
            "insufficient_disk_ssd",
        ),
    ],
)
def test_disk_filter_by_kind(ssd, hosts, passed, code):
    # root 20 + ephemeral 9 + swap 1 MB (rounded up to 1 GB) = 30 GB
    table = table_of(hosts, [flavor("f", disk=20, ephemeral=9, swap=1, ssd=ssd)])
    assert passing(DiskFilter(), table, "f") == passed
    rejected = [h.name for h in hosts if h.name not in passed]
    assert reasons(DiskFilter(), table, "f") == {code: rejected}
    [(why, _)] = rejections(DiskFilter(), table, "f")
    assert why.requested == 30
    assert why.resource == ("disk_ssd_gb" if ssd else "disk_hdd_gb")


def test_disk_filter_zero_disk_flavor_passes_diskless_hosts():
    table = table_of([host("a"), host("b", hdd=1)], [flavor("f")])
    assert passing(DiskFilter(), table, "f") == ["a", "b"]


def test_disk_filter_counts_existing_instances_per_kind():
    hosts = [host("h", hdd=50, ssd=50)]
    flavors = [flavor("hd", disk=30), flavor("sd", disk=30, ssd=True)]
    table = table_of(hosts, flavors, [instance("i", "h", "hd")])
    assert passing(DiskFilter(), table, "hd") == []
    assert passing(DiskFilter(), table, "sd") == ["h"]


# ---------------------------------------------------------------------------- availability zone


@pytest.mark.parametrize(
    ("zone", "passed"),
    [(None, ["a1", "b", "a2"]), ("az1", ["a1", "a2"]), ("az2", ["b"]), ("nowhere", [])],
)
def test_availability_zone_filter(zone, passed):
    hosts = [host("a1", az="az1"), host("b", az="az2"), host("a2", az="az1")]
    table = table_of(hosts, [flavor("f")])
    flt = AvailabilityZoneFilter()
    assert passing(flt, table, "f", availability_zone=zone) == passed
    rejected = [h.name for h in hosts if h.name not in passed]
    expected = {"availability_zone": rejected} if rejected else {}
    assert reasons(flt, table, "f", availability_zone=zone) == expected
    if rejected:
        [(why, _)] = rejections(flt, table, "f", availability_zone=zone)
        assert why.message == f"not in availability zone {zone}"


# ---------------------------------------------------------------------------- aggregates

AGGREGATES = {
    "fast": {"ssd": "true", "cores": "32"},
    "slow": {"ssd": "false", "cores": "8"},
    "gpu": {"gpu": "a100, v100"},
}
AGG_HOSTS = [
    host("fast", aggregates=["fast"]),
    host("slow", aggregates=["slow"]),
    host("both", aggregates=["fast", "slow"]),
    host("none"),
    host("gpu", aggregates=["gpu"]),
]


@pytest.mark.parametrize(
    ("specs", "passed"),
    [
        ({}, ["fast", "slow", "both", "none", "gpu"]),
        ({"ssd": "true"}, ["fast", "both"]),
        ({"ssd": "false"}, ["slow", "both"]),
        ({"ssd": "s== false"}, ["slow", "both"]),
        ({"ssd": "s!= true"}, ["slow", "both"]),
        ({"ssd": "<or> true <or> maybe"}, ["fast", "both"]),
        ({"ssd": "<or> maybe <or> never"}, []),
        ({"cores": ">= 16"}, ["fast", "both"]),
        ({"cores": ">= 8"}, ["fast", "slow", "both"]),
        ({"cores": "<= 8"}, ["slow", "both"]),
        ({"cores": ">= 64"}, []),
        ({"cores": "== 8"}, ["slow", "both"]),
        ({"ssd": "<in> ru"}, ["fast", "both"]),
        ({"gpu": "<in> a100"}, ["gpu"]),
        # Nova matches each aggregate value alone: no single value holds both words
        ({"gpu": "<all-in> a100 v100"}, []),
        ({"gpu": "<all-in> a100"}, ["gpu"]),
        # `=` is Nova's numeric "at least" (nova/scheduler/filters/extra_specs_ops.py)
        ({"cores": "= 8"}, ["fast", "slow", "both"]),
        ({"cores": "= 16"}, ["fast", "both"]),
        ({"cores": "= 64"}, []),
        ({"cores": "=8"}, []),  # no space: a bare value, string-equal to "=8"
        ({"cores": "32"}, ["fast", "both"]),  # bare: string equality, not a number
        ({"cores": "32.0"}, []),
        ({"cores": "== 32.0"}, ["fast", "both"]),
        ({"ssd": "<or> maybe <or> true"}, ["fast", "both"]),
        ({"gpu": "<all-in> a100 h100"}, []),
        ({"gpu": "v100"}, ["gpu"]),
        ({"ssd": "true", "cores": ">= 16"}, ["fast", "both"]),
        ({"ssd": "false", "cores": ">= 16"}, ["both"]),
        ({"missing_key": "x"}, []),
    ],
)
def test_aggregate_instance_extra_specs(specs, passed):
    table = table_of(AGG_HOSTS, [flavor("f", aggregate=specs)], aggregates=AGGREGATES)
    flt = AggregateInstanceExtraSpecsFilter()
    assert passing(flt, table, "f") == passed
    rejected = [h.name for h in AGG_HOSTS if h.name not in passed]
    assert reasons(flt, table, "f") == ({"aggregate_mismatch": rejected} if rejected else {})


def test_aggregate_explain_attributes_each_host_to_first_failing_spec():
    table = table_of(
        AGG_HOSTS,
        [flavor("f", aggregate={"ssd": "true", "cores": "<= 8"})],
        aggregates=AGGREGATES,
    )
    flt = AggregateInstanceExtraSpecsFilter()
    assert passing(flt, table, "f") == ["both"]
    found = [(why.message, hosts) for why, hosts in rejections(flt, table, "f")]
    assert found == [
        ("aggregate ssd not s== true", ["slow", "none", "gpu"]),
        ("aggregate cores not <= 8", ["fast"]),
    ]


# ---------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize(
    ("specs", "passed"),
    [
        ({"cpu_model": "Icelake"}, ["ice"]),
        ({"cpu_model": "<or> Icelake <or> Cascadelake"}, ["ice", "cascade"]),
        ({"cores": ">= 24"}, ["cascade"]),
        ({"cores": ">= 16"}, ["ice", "cascade"]),
        ({"cpu_model": "s!= Icelake"}, ["cascade"]),  # 'bare' lacks the key: never matches
        ({"cpu_model": "Icelake", "cores": ">= 24"}, []),
        ({"cores": "= 16"}, ["ice", "cascade"]),  # Nova's `=`: numeric at least
        ({"cores": "= 20"}, ["cascade"]),
        ({"flags": "<all-in> avx sse"}, ["ice"]),  # one value, not split at commas
        ({"flags": "sse"}, []),
    ],
)
def test_compute_capabilities(specs, passed):
    hosts = [
        host("ice", capabilities={"cpu_model": "Icelake", "cores": "16", "flags": "avx,sse"}),
        host("cascade", capabilities={"cpu_model": "Cascadelake", "cores": "28"}),
        host("bare"),
    ]
    table = table_of(hosts, [flavor("f", capabilities=specs)])
    flt = ComputeCapabilitiesFilter()
    assert passing(flt, table, "f") == passed
    rejected = [h.name for h in hosts if h.name not in passed]
    assert reasons(flt, table, "f") == ({"capability_mismatch": rejected} if rejected else {})


# ---------------------------------------------------------------------------- image properties

IMAGE_HOSTS = [
    host("x86_kvm"),
    host("arm_kvm", arch="aarch64"),
    host("x86_qemu", hypervisor="qemu"),
    host("arm_qemu", arch="aarch64", hypervisor="qemu"),
]


@pytest.mark.parametrize(
    ("image", "passed", "why"),
    [
        ({}, ["x86_kvm", "arm_kvm", "x86_qemu", "arm_qemu"], {}),
        (
            {"arch": "x86_64"},
            ["x86_kvm", "x86_qemu"],
            {"architecture_mismatch": ["arm_kvm", "arm_qemu"]},
        ),
        (
            {"hypervisor": "qemu"},
            ["x86_qemu", "arm_qemu"],
            {"hypervisor_mismatch": ["x86_kvm", "arm_kvm"]},
        ),
        (
            {"arch": "aarch64", "hypervisor": "kvm"},
            ["arm_kvm"],
            {
                "architecture_mismatch": ["x86_kvm", "x86_qemu"],
                "hypervisor_mismatch": ["arm_qemu"],
            },
        ),
        (
            {"arch": "ppc64le"},
            [],
            {"architecture_mismatch": ["x86_kvm", "arm_kvm", "x86_qemu", "arm_qemu"]},
        ),
    ],
)
def test_image_properties(image, passed, why):
    table = table_of(IMAGE_HOSTS, [flavor("f")])
    flt = ImagePropertiesFilter()
    assert passing(flt, table, "f", **image) == passed
    assert reasons(flt, table, "f", **image) == why


# ---------------------------------------------------------------------------- PCI passthrough

PCI_HOSTS = [
    host("none", cells=2),
    host(
        "one_in_cell0", numa=[cell(vcpus=4, mem=4096, pci={"gpu-a100": 1}), cell(vcpus=4, mem=4096)]
    ),
    host("one_per_cell", cells=2, pci={"gpu-a100": 1}),
    host(
        "two_in_cell1", numa=[cell(vcpus=4, mem=4096), cell(vcpus=4, mem=4096, pci={"gpu-a100": 2})]
    ),
    host("other_type", cells=2, pci={"vf": 8}),
]


@pytest.mark.parametrize(
    ("spec", "passed"),
    [
        ("a100:1", ["one_in_cell0", "one_per_cell", "two_in_cell1"]),
        ("a100", ["one_in_cell0", "one_per_cell", "two_in_cell1"]),
        ("a100:2", ["one_per_cell", "two_in_cell1"]),
        ("gpu-a100:2", ["one_per_cell", "two_in_cell1"]),  # a device type works as its own alias
        ("a100:3", []),
        ("a100:1,vf:1", []),
        ("vf:8", ["other_type"]),
    ],
)
def test_pci_passthrough_filter(spec, passed):
    table = table_of(PCI_HOSTS, [flavor("f", pci=spec)], aliases={"a100": "gpu-a100"})
    flt = PciPassthroughFilter()
    assert passing(flt, table, "f") == passed
    rejected = [h.name for h in PCI_HOSTS if h.name not in passed]
    assert reasons(flt, table, "f") == ({"insufficient_pci": rejected} if rejected else {})


def test_pci_passthrough_explain_names_device_and_best_free():
    table = table_of(PCI_HOSTS, [flavor("f", pci="a100:3")], aliases={"a100": "gpu-a100"})
    [(why, hosts)] = rejections(PciPassthroughFilter(), table, "f")
    assert why.resource == "pci:gpu-a100"
    assert why.requested == 3
    assert why.message == "fewer than 3 free gpu-a100 devices"
    assert why.free is not None
    assert why.free.tolist() == [0, 1, 2, 2, 0]
    assert hosts == [h.name for h in PCI_HOSTS]


def test_pci_passthrough_counts_used_devices():
    flavors = [flavor("g", pci="a100:1")]
    table = table_of(
        PCI_HOSTS,
        flavors,
        [instance("i1", "one_per_cell", "g"), instance("i2", "one_in_cell0", "g")],
        aliases={"a100": "gpu-a100"},
    )
    assert passing(PciPassthroughFilter(), table, "g") == ["one_per_cell", "two_in_cell1"]


def test_pci_passthrough_required_in_cell_flavor_counts_whole_host():
    """A one-cell guest with cell-local devices: this filter checks the host total only."""
    table = table_of(
        PCI_HOSTS,
        [flavor("g", vcpus=1, pinned=True, pci="a100:2")],
        aliases={"a100": "gpu-a100"},
    )
    assert passing(PciPassthroughFilter(), table, "g") == ["one_per_cell", "two_in_cell1"]


def test_unknown_pci_alias_is_a_spec_error():
    with pytest.raises(SpecError, match=r"extra_specs\['pci_passthrough:alias'\].*'nope'"):
        table_of(PCI_HOSTS, [flavor("f", pci="nope:1")], aliases={"a100": "gpu-a100"})


# ---------------------------------------------------------------------------- server groups

GROUPS = [
    group("anti", "anti-affinity"),
    group("anti2", "anti-affinity", max_per_host=2),
    group("aff", "affinity"),
    group("aff_empty", "affinity"),
    group("soft_aff", "soft-affinity"),
    group("soft_anti", "soft-anti-affinity"),
]
GROUP_INSTANCES = [
    instance("i1", "h1", "f", group_id="anti"),
    instance("i2", "h1", "f", group_id="anti2"),
    instance("i3", "h1", "f", group_id="anti2"),
    instance("i4", "h2", "f", group_id="anti2"),
    instance("i5", "h2", "f", group_id="aff"),
    instance("i6", "h3", "f", group_id="soft_aff"),
    instance("i7", "h3", "f", group_id="soft_anti"),
]


def _group_table() -> HostTable:
    hosts = [host(n, vcpus=8, mem=8192) for n in ("h1", "h2", "h3")]
    return table_of(hosts, [flavor("f")], GROUP_INSTANCES, groups=GROUPS)


@pytest.mark.parametrize(
    ("gid", "anti", "aff"),
    [
        (None, ["h1", "h2", "h3"], ["h1", "h2", "h3"]),
        ("anti", ["h2", "h3"], ["h1", "h2", "h3"]),
        ("anti2", ["h2", "h3"], ["h1", "h2", "h3"]),
        ("aff", ["h1", "h2", "h3"], ["h2"]),
        ("aff_empty", ["h1", "h2", "h3"], ["h1", "h2", "h3"]),
        ("soft_aff", ["h1", "h2", "h3"], ["h1", "h2", "h3"]),
        ("soft_anti", ["h1", "h2", "h3"], ["h1", "h2", "h3"]),
    ],
)
def test_server_group_filters(gid, anti, aff):
    table = _group_table()
    assert passing(ServerGroupAntiAffinityFilter(), table, "f", server_group=gid) == anti
    assert passing(ServerGroupAffinityFilter(), table, "f", server_group=gid) == aff


def test_server_group_explain():
    table = _group_table()
    anti = reasons(ServerGroupAntiAffinityFilter(), table, "f", server_group="anti2")
    assert anti == {"server_group_anti_affinity": ["h1"]}
    aff = reasons(ServerGroupAffinityFilter(), table, "f", server_group="aff")
    assert aff == {"server_group_affinity": ["h1", "h3"]}


def test_anti_affinity_max_server_per_host_tracks_releases():
    table = _group_table()
    table.release("i3")
    assert passing(ServerGroupAntiAffinityFilter(), table, "f", server_group="anti2") == [
        "h1",
        "h2",
        "h3",
    ]
    table.release("i5")
    assert passing(ServerGroupAffinityFilter(), table, "f", server_group="aff") == [
        "h1",
        "h2",
        "h3",
    ]


# ---------------------------------------------------------------------------- same / different host


def _hint_table() -> HostTable:
    hosts = [host(n, vcpus=8, mem=8192) for n in ("h1", "h2", "h3")]
    return table_of(hosts, [flavor("f")], [instance("a", "h1", "f"), instance("b", "h2", "f")])


@pytest.mark.parametrize(
    ("ids", "same", "different"),
    [
        ((), ["h1", "h2", "h3"], ["h1", "h2", "h3"]),
        (("a",), ["h1"], ["h2", "h3"]),
        (("a", "b"), ["h1", "h2"], ["h3"]),
        (("ghost",), [], ["h1", "h2", "h3"]),
        (("a", "ghost"), ["h1"], ["h2", "h3"]),
    ],
)
def test_same_and_different_host(ids, same, different):
    table = _hint_table()
    assert passing(SameHostFilter(), table, "f", same_host=ids) == same
    assert passing(DifferentHostFilter(), table, "f", different_host=ids) == different
    assert reasons(SameHostFilter(), table, "f", same_host=ids) == (
        {"same_host": [h for h in ("h1", "h2", "h3") if h not in same]} if ids else {}
    )


# ---------------------------------------------------------------------------- retry


@pytest.mark.parametrize(
    ("ignore", "passed"),
    [
        ((), ["h1", "h2", "h3"]),
        (("h2",), ["h1", "h3"]),
        (("h1", "h3", "unknown"), ["h2"]),
    ],
)
def test_retry_filter(ignore, passed):
    table = table_of([host(n) for n in ("h1", "h2", "h3")], [flavor("f")])
    assert passing(RetryFilter(), table, "f", ignore_hosts=ignore) == passed
    rejected = [n for n in ("h1", "h2", "h3") if n not in passed]
    assert reasons(RetryFilter(), table, "f", ignore_hosts=ignore) == (
        {"retry": rejected} if rejected else {}
    )


# ---------------------------------------------------------------------------- trusted


@pytest.mark.parametrize(
    ("value", "passed"),
    [(None, ["t", "u"]), ("trusted", ["t"]), ("untrusted", ["t", "u"])],
)
def test_trusted_filter(value, passed):
    specs = {} if value is None else {"trust:trusted_host": value}
    table = table_of([host("t", trusted=True), host("u")], [flavor("f", specs=specs)])
    assert passing(TrustedFilter(), table, "f") == passed
    assert reasons(TrustedFilter(), table, "f") == (
        {} if passed == ["t", "u"] else {"trusted": ["u"]}
    )


# ---------------------------------------------------------------------------- num_instances


def test_num_instances_filter():
    hosts = [host(n, vcpus=8, mem=8192) for n in ("zero", "one", "two")]
    existing = [instance("a", "one", "f"), instance("b", "two", "f"), instance("c", "two", "f")]
    table = table_of(hosts, [flavor("f")], existing)
    limited = NumInstancesFilter(NumInstancesParams(max_instances_per_host=2))
    assert passing(limited, table, "f") == ["zero", "one"]
    assert reasons(limited, table, "f") == {"num_instances": ["two"]}
    assert passing(NumInstancesFilter(), table, "f") == ["zero", "one", "two"]
    one = NumInstancesFilter(NumInstancesParams(max_instances_per_host=1))
    assert passing(one, table, "f") == ["zero"]


# ---------------------------------------------------------------------------- traits

TRAIT_HOSTS = [host("ab", traits=["A", "B"]), host("a", traits=["A"]), host("none")]


@pytest.mark.parametrize(
    ("required", "forbidden", "image", "passed", "why"),
    [
        ((), (), {}, ["ab", "a", "none"], {}),
        (("A",), (), {}, ["ab", "a"], {"missing_trait": ["none"]}),
        (("A", "B"), (), {}, ["ab"], {"missing_trait": ["a", "none"]}),
        ((), ("B",), {}, ["a", "none"], {"forbidden_trait": ["ab"]}),
        (("A",), ("B",), {}, ["a"], {"missing_trait": ["none"], "forbidden_trait": ["ab"]}),
        ((), (), {"image_required": ["B"]}, ["ab"], {"missing_trait": ["a", "none"]}),
        ((), (), {"image_forbidden": ["A"]}, ["none"], {"forbidden_trait": ["ab", "a"]}),
        (("A",), (), {"image_forbidden": ["B"]}, ["a"], None),
        (("UNKNOWN",), (), {}, [], {"missing_trait": ["ab", "a", "none"]}),
        ((), ("UNKNOWN",), {}, ["ab", "a", "none"], {}),
        (("A", "UNKNOWN"), (), {}, [], {"missing_trait": ["ab", "a", "none"]}),
    ],
)
def test_traits_filter(required, forbidden, image, passed, why):
    table = table_of(TRAIT_HOSTS, [flavor("f", required=required, forbidden=forbidden)])
    assert passing(TraitsFilter(), table, "f", **image) == passed
    if why is not None:
        assert reasons(TraitsFilter(), table, "f", **image) == why


def test_traits_explain_names_the_trait():
    table = table_of(TRAIT_HOSTS, [flavor("f", required=["A", "B"], forbidden=["C"])])
    found = [
        (why.code, why.resource, hosts) for why, hosts in rejections(TraitsFilter(), table, "f")
    ]
    assert found == [("missing_trait", "A", ["none"]), ("missing_trait", "B", ["a"])]


def test_traits_beyond_one_bitmask_word():
    names = [f"CUSTOM_T{i:03d}" for i in range(130)]
    hosts = [
        host("all", traits=names),
        host("low", traits=names[:64]),
        host("high", traits=names[64:]),
    ]
    table = table_of(hosts, [flavor("f", required=["CUSTOM_T129", "CUSTOM_T070"])])
    assert table.trait_bits.shape == (3, 3)
    assert passing(TraitsFilter(), table, "f") == ["all", "high"]
    table = table_of(hosts, [flavor("g", required=["CUSTOM_T063"], forbidden=["CUSTOM_T064"])])
    assert passing(TraitsFilter(), table, "g") == ["low"]
