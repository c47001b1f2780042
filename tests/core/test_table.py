"""`HostTable`: capacities from the model, exact claims and releases, copies, memory per host."""

from __future__ import annotations

import numpy as np
import pytest

from berth.core.errors import ClaimError, FleetError, StaleGenerationError
from berth.core.filters.numa_topology import NumaTopologyFilter
from berth.core.flavors import parse_flavor
from berth.core.resources import (
    C_HUGE,
    C_MEM,
    C_PCPU,
    C_VCPU,
    CELL_BASE,
    H_HDD,
    H_MEM,
    H_SSD,
    H_VCPU,
)
from tests.builders import (
    NOW,
    assert_unchanged,
    cell,
    flavor,
    group,
    host,
    instance,
    passing,
    scheduler,
    snapshot,
    table_of,
)


def test_capacity_columns_from_the_model():
    h = host(
        "h",
        numa=[
            cell(vcpus=3, pcpus=5, mem=1000, huge=2048, pci={"gpu": 2}),
            cell(vcpus=4, pcpus=6, mem=3001, huge=0),
        ],
        page_kb=2048,
        cpu_ratio=1.5,
        ram_ratio=1.5,
        reserved_mem=500,
        hdd=10,
        ssd=100,
        reserved_disk=15,
        disk_ratio=2.0,
    )
    table = table_of([h], [flavor("f")])
    assert table.device_types == ["gpu"]
    assert table.cell_cap[0].tolist() == [
        [4, 5, 1500, 2048, 2],  # int(3 * 1.5) = 4
        [6, 6, 4501, 0, 0],  # int(3001 * 1.5) = 4501
    ]
    # vCPUs: int(7 * 1.5) = 10; RAM as Placement: int((4001 - 500) * 1.5); reserved disk: 10
    # from HDD, 5 from SSD, before the ratio
    assert table.host_cap[0, H_VCPU] == 10
    assert table.host_cap[0, H_MEM] == int((4001 - 500) * 1.5)
    assert table.host_cap[0, H_HDD] == (10 - 10) * 2
    assert table.host_cap[0, H_SSD] == (100 - 5) * 2
    assert np.array_equal(table.cell_free, table.cell_cap)
    assert table.page_kb.tolist() == [2048]
    assert table.n_cells.tolist() == [2]


def test_one_cell_host_has_an_empty_second_cell():
    table = table_of([host("h", pcpus=4, mem=2048)], [flavor("f")])
    assert table.cell_cap[0, 1].tolist() == [0, 0, 0, 0]
    assert table.n_cells.tolist() == [1]


def test_claim_and_release_are_exact():
    hosts = [host("h", cells=2, pcpus=4, mem=4096, hdd=100)]
    flavors = [flavor("p", vcpus=3, mem=1024, pinned=True, disk=10), flavor("s", vcpus=2, mem=512)]
    groups = [group("g", "anti-affinity", max_per_host=3)]
    table = table_of(hosts, flavors, groups=groups)
    before = snapshot(table)
    alloc = table.claim("a", "h", "p", server_group="g", project="proj")
    assert alloc.cell_use[:, C_PCPU].tolist() == [3, 0]
    assert alloc.cell_use[:, C_MEM].tolist() == [1024, 0]
    assert alloc.host_use.tolist() == [0, 1024, 10, 0]
    assert (alloc.project, alloc.server_group) == ("proj", "g")
    table.claim("b", "h", "s")  # floating: host columns only
    assert table.cell_free[0, :, C_VCPU].tolist() == [4, 4]
    assert table.host_free[0].tolist() == [8 - 2, 8192 - 1024 - 512, 90, 0]
    assert table.generation.tolist() == [2]
    assert table.n_instances.tolist() == [2]
    assert table.group_rows == {"g": {0: 1}}
    assert [a.instance_id for a in table.instances_on("h")] == ["a", "b"]
    table.release("b")
    released = table.release("a")
    assert released.instance_id == "a"
    assert_unchanged(table, before, except_={"generation"})
    assert table.generation.tolist() == [4]
    assert table.group_rows == {}


def test_single_cell_claim_rule_is_best_fit():
    # cell 1 has room for one, cell 0 for three: the guest goes to cell 1
    hosts = [host("h", numa=[cell(pcpus=6, mem=8192), cell(pcpus=2, mem=8192)])]
    table = table_of(hosts, [flavor("p", vcpus=2, pinned=True)])
    assert table.claim("a", "h", "p").cell_use[:, C_PCPU].tolist() == [0, 2]
    assert table.claim("b", "h", "p").cell_use[:, C_PCPU].tolist() == [2, 0]


def test_claim_refuses_overcommit_and_leaves_the_table_unchanged():
    hosts = [host("h", cells=2, pcpus=2, mem=2048)]
    table = table_of(hosts, [flavor("p", vcpus=2, mem=1024, pinned=True)])
    table.claim("a", "h", "p")
    table.claim("b", "h", "p")
    before = snapshot(table)
    with pytest.raises(ClaimError, match="flavor 'p' does not fit on host 'h'"):
        table.claim("c", "h", "p")
    use = np.zeros((2, 4), dtype=np.int64)
    use[1, C_PCPU] = 1
    with pytest.raises(ClaimError, match="host 'h' NUMA cell 1: pinned CPUs would be 3 of 2"):
        table.claim("c", "h", "p", use, np.zeros(4, dtype=np.int64))
    with pytest.raises(ClaimError, match="host 'h': RAM MB would be 6144 of 4096"):
        table.claim("c", "h", "p", np.zeros((2, 4), dtype=np.int64), np.array([0, 4096, 0, 0]))
    with pytest.raises(ClaimError, match="negative use on host 'h'"):
        table.claim("c", "h", "p", -use, np.zeros(4, dtype=np.int64))
    assert_unchanged(table, before)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"instance_id": "a"}, ClaimError, "instance 'a' already has an allocation"),
        ({"host": "nowhere"}, ClaimError, "unknown host 'nowhere'"),
        ({"flavor": "nope"}, Exception, "unknown flavor 'nope'"),
        ({"server_group": "ghost"}, ClaimError, "unknown server group 'ghost'"),
        (
            {"expected_generation": 0},
            StaleGenerationError,
            "host 'h' is at generation 1, not 0",
        ),
    ],
)
def test_claim_errors(kwargs, error, message):
    table = table_of([host("h", vcpus=8, mem=8192)], [flavor("f")], [instance("a", "h", "f")])
    before = snapshot(table)
    args = {"instance_id": "b", "host": "h", "flavor": "f", **kwargs}
    with pytest.raises(error, match=message):
        table.claim(args.pop("instance_id"), args.pop("host"), args.pop("flavor"), **args)
    assert_unchanged(table, before)


def test_claim_with_expected_generation():
    table = table_of([host("h", vcpus=8, mem=8192)], [flavor("f")])
    table.claim("a", "h", "f", expected_generation=0)
    table.claim("b", "h", "f", expected_generation=1)
    assert table.generation.tolist() == [2]


def test_release_and_unclaim():
    table = table_of([host("h", vcpus=8, mem=8192)], [flavor("f")])
    with pytest.raises(ClaimError, match="unknown instance 'x'"):
        table.release("x")
    before = snapshot(table)
    table.claim("a", "h", "f")
    table.unclaim("a", 0)
    assert_unchanged(table, before)


def test_set_enabled_and_heartbeat():
    table = table_of([host("h", heartbeat=None)], [flavor("f")])
    assert np.isnan(table.heartbeat[0])
    table.set_heartbeat("h", NOW)
    table.set_heartbeat("h", NOW - 100)  # older: ignored
    assert table.heartbeat[0] == NOW
    table.set_heartbeat("h", NOW + 1)
    assert table.heartbeat[0] == NOW + 1
    assert table.generation.tolist() == [0]
    table.set_enabled("h", False)
    assert not table.enabled[0]
    assert table.generation.tolist() == [1]
    with pytest.raises(ClaimError, match="unknown host 'x'"):
        table.set_enabled("x", True)


def test_copy_is_independent():
    hosts = [host("h", cells=2, pcpus=4, mem=4096, traits=["A"], aggregates=["agg"])]
    flavors = [flavor("p", vcpus=1, pinned=True)]
    table = table_of(
        hosts,
        flavors,
        [instance("a", "h", "p", group_id="g")],
        groups=[group("g", "anti-affinity", max_per_host=9)],
        aggregates={"agg": {"k": "v"}},
    )
    copy = table.copy()
    before = snapshot(table)
    copy.claim("b", "h", "p", server_group="g")
    copy.release("a")
    copy.set_enabled("h", False)
    copy.add_hosts([host("h2", traits=["B"])], {})
    assert_unchanged(table, before)
    assert table.names == ["h"]
    assert table.traits.get("B") == -1
    assert copy.group_rows == {"g": {0: 1}}
    assert table.group_rows == {"g": {0: 1}}
    assert sorted(table.allocations) == ["a"]
    assert sorted(copy.allocations) == ["b"]


def test_add_hosts_errors():
    table = table_of([host("h")], [flavor("f")])
    with pytest.raises(FleetError, match="host 'h' already exists"):
        table.add_hosts([host("h")], {})
    with pytest.raises(FleetError, match="PCI device type 'tpu' is not known"):
        table.add_hosts([host("x", pci={"tpu": 1})], {})
    with pytest.raises(FleetError, match="unknown aggregate 'agg'"):
        table.add_hosts([host("y", aggregates=["agg"])], {})


def test_instances_in_snapshot_order_claim_exactly():
    hosts = [host("h", numa=[cell(pcpus=4, mem=4096), cell(pcpus=4, mem=4096)], hdd=50)]
    flavors = [
        flavor("p", vcpus=2, mem=1024, pinned=True, disk=10),
        flavor("e", vcpus=4, mem=2048, pinned=True, numa=2),
    ]
    table = table_of(
        hosts,
        flavors,
        [
            instance("a", "h", "p", numa=[(1, 2, 1024)]),
            instance("b", "h", "e"),
            instance("c", "h", "p"),
        ],
    )
    assert table.allocations["a"].cell_use[:, C_PCPU].tolist() == [0, 2]
    assert table.allocations["b"].cell_use[:, C_PCPU].tolist() == [2, 2]
    # c: cell 0 has 2 left, cell 1 has 0 -> cell 0
    assert table.allocations["c"].cell_use[:, C_PCPU].tolist() == [2, 0]
    assert table.cell_free[0, :, C_PCPU].tolist() == [0, 0]
    assert table.host_free[0, H_HDD] == 30


def test_stated_cell_gets_the_cell_local_devices():
    hosts = [host("h", cells=2, pcpus=4, mem=4096, pci={"gpu": 1})]
    flavors = [flavor("g", vcpus=2, mem=1024, pinned=True, pci="gpu:1")]
    table = table_of(hosts, flavors, [instance("a", "h", "g", numa=[(1, 2, 1024)])])
    use = table.allocations["a"].cell_use
    assert use[:, C_PCPU].tolist() == [0, 2]
    assert use[:, CELL_BASE].tolist() == [0, 1]


def test_stated_placement_must_have_the_flavor_shape():
    hosts = [host("h", cells=2, pcpus=4, mem=4096)]
    flavors = [
        flavor("p", vcpus=2, mem=1024, pinned=True),
        flavor("e", vcpus=4, mem=2048, pinned=True, numa=2),
    ]
    with pytest.raises(FleetError):
        table_of(hosts, flavors, [instance("a", "h", "p", numa=[(0, 1, 512), (1, 1, 512)])])
    with pytest.raises(FleetError):
        table_of(hosts, flavors, [instance("b", "h", "e", numa=[(0, 3, 1024), (1, 1, 1024)])])


def test_claim_refuses_a_host_with_the_wrong_page_size():
    hosts = [host("h", pcpus=4, mem=0, huge=4096, page_kb=2048)]
    flavors = [flavor("hp", vcpus=1, mem=1024, pinned=True, page="1GB")]
    with pytest.raises(FleetError):
        table_of(hosts, flavors, [instance("a", "h", "hp")])


def test_hugepage_claims_use_the_huge_column():
    hosts = [host("h", pcpus=4, mem=1024, huge=4096, page_kb=2048)]
    table = table_of(hosts, [flavor("hp", vcpus=1, mem=2048, pinned=True, page="2MB")])
    alloc = table.claim("a", "h", "hp")
    assert alloc.cell_use[0, C_HUGE] == 2048
    assert alloc.cell_use[0, C_MEM] == 0
    assert alloc.host_use[H_MEM] == 0
    assert table.cell_free[0, 0, C_HUGE] == 2048


# ---------------------------------------------------------------------------- memory per host


def _big_fleet_hosts(n: int):
    out = []
    for i in range(n):
        two = i % 3 != 0
        pci = {"gpu-a100": 2} if i % 10 == 0 else ({"vf-dpdk": 16} if i % 10 == 1 else {})
        cells = [
            cell(vcpus=8, pcpus=24, mem=196608, huge=65536 if i % 5 == 0 else 0, pci=pci)
            for _ in range(2 if two else 1)
        ]
        out.append(
            host(
                f"host-{i:04d}",
                numa=cells,
                page_kb=1048576 if i % 5 == 0 else 0,
                az=f"az{i % 3}",
                aggregates=[f"pool-{i % 4}", "all"],
                traits=[f"CUSTOM_POOL_{i % 4}", "HW_CPU_X86_AVX512F"]
                + (["HW_NIC_SRIOV"] if i % 10 == 1 else []),
                capabilities={
                    "cpu_model": "Icelake" if i % 2 else "Cascadelake",
                    "cores": str(48 + i % 3),
                },
                cpu_ratio=4.0 if i % 2 else 1.0,
                reserved_mem=8192,
                hdd=2000,
                ssd=3840 if i % 7 == 0 else 0,
                io_ops=i % 9,
                rack=f"r{i // 40:02d}",
                trusted=i % 6 == 0,
            )
        )
    return out


def test_memory_per_host_is_at_most_one_kilobyte():
    aggregates = {
        f"pool-{k}": {"pool": str(k), "ssd": "true" if k == 1 else "false"} for k in range(4)
    }
    aggregates["all"] = {"tier": "gold"}
    table = table_of(
        _big_fleet_hosts(1000), [flavor("f", vcpus=2, mem=4096)], aggregates=aggregates
    )
    assert len(table) == 1000
    assert table.device_types == ["gpu-a100", "vf-dpdk"]
    per_host = table.nbytes() / len(table)
    assert per_host <= 1024, per_host
    # nbytes counts the real columns: at least the free and capacity arrays
    assert table.nbytes() >= 2 * table.cell_free.nbytes + 2 * table.host_free.nbytes
    # and the table is usable at that size: every host takes this flavor
    counts = scheduler().capacity(table, "f", NOW)
    assert counts.shape == (1000,)
    assert (counts > 0).all()


# ---------------------------------------------------------------------------- derived caches


def test_derived_caches_follow_claims_releases_and_state():
    hosts = [host("a", pcpus=8, mem=8192), host("b", cells=2, pcpus=4, mem=4096)]
    table = table_of(hosts, [flavor("p", vcpus=2, mem=1024, pinned=True)])
    sched = scheduler()
    assert sched.capacity(table, "p", NOW).tolist() == [4, 4]
    table.claim("x", "a", "p")
    assert sched.capacity(table, "p", NOW).tolist() == [3, 4]
    copy = table.copy()
    copy.claim("y", "b", "p")
    table.release("x")
    assert sched.capacity(table, "p", NOW).tolist() == [4, 4]
    assert sched.capacity(copy, "p", NOW).tolist() == [3, 3]
    table.set_enabled("b", False)
    assert sched.capacity(table, "p", NOW).tolist() == [4, 0]
    table.add_hosts([host("c", pcpus=2, mem=1024)], {})
    assert sched.capacity(table, "p", NOW).tolist() == [4, 0, 1]


def test_redefining_a_flavor_refreshes_its_derived_values():
    table = table_of([host("h", pcpus=8, mem=8192)], [flavor("p", vcpus=1, pinned=True)])
    sched = scheduler()
    assert sched.capacity(table, "p", NOW).tolist() == [8]
    assert passing(NumaTopologyFilter(), table, "p") == ["h"]
    table.add_flavor(parse_flavor(flavor("p", vcpus=9, pinned=True), {}))
    assert sched.capacity(table, "p", NOW).tolist() == [0]
    assert passing(NumaTopologyFilter(), table, "p") == []


def test_snapshot_reload_takes_devices_as_the_live_claim_did():
    h = host(
        "h",
        numa=[cell(pcpus=2, mem=4096, pci={"gpu": 1}), cell(pcpus=2, mem=4096, pci={"gpu": 2})],
    )
    flavors = [
        flavor("e", vcpus=2, mem=2048, pinned=True, numa=2, pci="gpu:1"),
        flavor("g", vcpus=1, mem=512, pinned=True, pci="gpu:1"),
    ]
    live = table_of([h], flavors)
    live.claim("a", "h", "e")
    assert live.cell_free[0, :, CELL_BASE].tolist() == [1, 1]  # from the cell with more free
    reloaded = table_of([h], flavors, [instance("a", "h", "e", numa=[(0, 1, 1024), (1, 1, 1024)])])
    assert reloaded.cell_free[0, :, CELL_BASE].tolist() == [1, 1]
    sched = scheduler()
    assert sched.capacity(reloaded, "g", NOW).tolist() == sched.capacity(live, "g", NOW).tolist()
