"""NUMA topology filter: every guest shape against hosts built to pass or fail one rule each."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from berth.core.errors import SpecError
from berth.core.filters.numa_topology import NumaTopologyFilter
from berth.core.filters.pci_passthrough import PciPassthroughFilter
from berth.core.filters.ram import RamFilter
from berth.core.model import Flavor, Host
from berth.core.resources import C_HUGE, C_MEM, C_PCPU, C_VCPU, CELL_BASE
from berth.core.table import HostTable
from tests.builders import cell, context, flavor, host, instance, passing, reasons, table_of

NUMA = NumaTopologyFilter()


def check(
    hosts: list[Host],
    flv: Flavor,
    passed: list[str],
    why: dict[str, list[str]],
    **table_kwargs: Any,
) -> HostTable:
    table = table_of(hosts, [flv], **table_kwargs)
    assert passing(NUMA, table, flv.name) == passed
    assert reasons(NUMA, table, flv.name) == why
    return table


# ---------------------------------------------------------------------------- no topology


def test_floating_guest_is_not_checked_per_cell():
    # 4 shared vCPUs floating over a host whose cells have 2 each: fine for the NUMA filter
    check([host("h", cells=2, vcpus=2)], flavor("f", vcpus=4, mem=4096), ["h"], {})


# ---------------------------------------------------------------------------- one cell


def test_single_cell_pinned():
    hosts = [
        host("split", cells=2, pcpus=2, mem=8192),  # 4 pinned in total, never 4 in one cell
        host("one", pcpus=4, mem=8192),
        host("low_mem", cells=2, pcpus=4, mem=1024),
        host("uneven", numa=[cell(pcpus=1, mem=8192), cell(pcpus=4, mem=8192)]),
        host("crossed", numa=[cell(pcpus=4, mem=1024), cell(pcpus=1, mem=4096)]),
        host("shared_only", cells=2, vcpus=16, mem=8192),
    ]
    table = check(
        hosts,
        flavor("p", vcpus=4, mem=2048, pinned=True),
        ["one", "uneven"],
        {
            "numa_pinned_cpus": ["split", "shared_only"],
            "numa_memory_mb": ["low_mem"],
            "numa_combined": ["crossed"],
        },
    )
    ctx = context(table, "p")
    found = {
        why.code: (why.message, why.requested, why.resource, why.free)
        for why, _ in NUMA.explain(ctx, ~NUMA.mask(ctx))
    }
    message, requested, resource, free = found["numa_pinned_cpus"]
    assert message == "no NUMA cell with 4 free pinned CPUs"
    assert (requested, resource) == (4, "pinned CPUs")
    assert free is not None
    assert free.tolist() == [2, 4, 4, 4, 4, 0]  # best cell per host
    assert found["numa_memory_mb"][0] == "no NUMA cell with 2048 free memory MB"


def test_single_cell_shared_uses_cell_ratio():
    hosts = [
        host("ratio", cells=2, vcpus=2, cpu_ratio=2.0, mem=4096),  # 4 per cell
        host("no_ratio", cells=2, vcpus=2, mem=4096),
    ]
    check(
        hosts,
        flavor("s", vcpus=4, mem=1024, numa=1),
        ["ratio"],
        {"numa_shared_vcpus": ["no_ratio"]},
    )


def test_single_cell_memory_ratio_applies_per_cell():
    hosts = [host("a", cells=2, mem=1024, ram_ratio=2.0), host("b", cells=2, mem=1024)]
    check(hosts, flavor("s", vcpus=1, mem=2048, numa=1), ["a"], {"numa_memory_mb": ["b"]})


def test_single_cell_after_existing_usage():
    hosts = [host("h", cells=2, pcpus=4, mem=8192)]
    flavors = [flavor("p3", vcpus=3, mem=1024, pinned=True), flavor("p2", vcpus=2, pinned=True)]
    # p3 in cell 0 and in cell 1: one pinned CPU left in each, so p2 fits nowhere
    table = table_of(
        hosts,
        flavors,
        [
            instance("a", "h", "p3", numa=[(0, 3, 1024)]),
            instance("b", "h", "p3", numa=[(1, 3, 1024)]),
        ],
    )
    assert passing(NUMA, table, "p2") == []
    assert table.cell_free[0, :, C_PCPU].tolist() == [1, 1]
    table.release("b")
    assert passing(NUMA, table, "p2") == ["h"]


# ---------------------------------------------------------------------------- two even cells


def test_even_two_cell_split():
    hosts = [
        host("even", cells=2, pcpus=2, mem=2048),
        host("one_cell", pcpus=8, mem=8192),
        host("lopsided", numa=[cell(pcpus=4, mem=4096), cell(pcpus=1, mem=4096)]),
        host("mem_short", numa=[cell(pcpus=2, mem=2048), cell(pcpus=2, mem=2047)]),
    ]
    table = check(
        hosts,
        flavor("e", vcpus=4, mem=4096, pinned=True, numa=2),
        ["even"],
        {
            "numa_cells": ["one_cell"],
            "numa_pinned_cpus": ["lopsided"],
            "numa_memory_mb": ["mem_short"],
        },
    )
    assert table.demands["e"].cells[:, C_PCPU].tolist() == [2, 2]
    ctx = context(table, "e")
    messages = {why.code: why.message for why, _ in NUMA.explain(ctx, ~NUMA.mask(ctx))}
    assert messages["numa_cells"] == "host has one NUMA cell, flavor needs two"
    assert messages["numa_pinned_cpus"] == "NUMA cells lack 2 free pinned CPUs for the guest split"


# ---------------------------------------------------------------------------- explicit uneven split

FIXED = flavor(
    "x", vcpus=4, mem=4096, pinned=True, numa=2, numa_cpus=("0", "1-3"), numa_mem=(1024, 3072)
)


def test_explicit_uneven_split_either_orientation():
    hosts = [
        host("as_stated", numa=[cell(pcpus=1, mem=1024), cell(pcpus=3, mem=3072)]),
        host("flipped", numa=[cell(pcpus=3, mem=3072), cell(pcpus=1, mem=1024)]),
        host("even", cells=2, pcpus=2, mem=2048),  # 4 CPUs, 4096 MB but no cell has 3 CPUs
        host("crossed", numa=[cell(pcpus=3, mem=1024), cell(pcpus=1, mem=3072)]),
        host("mem_even", numa=[cell(pcpus=3, mem=2048), cell(pcpus=3, mem=2048)]),
        host("one_cell", pcpus=8, mem=8192),
    ]
    check(
        hosts,
        FIXED,
        ["as_stated", "flipped"],
        {
            "numa_cells": ["one_cell"],
            "numa_pinned_cpus": ["even"],
            "numa_memory_mb": ["mem_even"],
            "numa_combined": ["crossed"],
        },
    )


def test_explicit_uneven_split_claims_the_fitting_orientation():
    hosts = [host("flipped", numa=[cell(pcpus=3, mem=3072), cell(pcpus=1, mem=1024)])]
    table = table_of(hosts, [FIXED])
    cell_use, _ = table.plan_for("x", 0)
    assert cell_use[:, C_PCPU].tolist() == [3, 1]
    assert cell_use[:, C_MEM].tolist() == [3072, 1024]


# ---------------------------------------------------------------------------- flexible split

FLEX = flavor(
    "fx", vcpus=8, mem=8192, pinned=True, numa=2, split="flexible", min_vcpus=2, min_mem=2048
)


def test_flexible_split_with_minimums():
    hosts = [
        host("ok", numa=[cell(pcpus=6, mem=6144), cell(pcpus=2, mem=2048)]),
        host("cpu_min", numa=[cell(pcpus=7, mem=7168), cell(pcpus=1, mem=8192)]),
        host("cpu_sum", numa=[cell(pcpus=4, mem=4096), cell(pcpus=3, mem=4096)]),
        host("mem_min", numa=[cell(pcpus=6, mem=7168), cell(pcpus=2, mem=1024)]),
        host("one_cell", pcpus=16, mem=16384),
    ]
    table = check(
        hosts,
        FLEX,
        ["ok"],
        {
            "numa_cells": ["one_cell"],
            "numa_pinned_cpus": ["cpu_min", "cpu_sum"],
            "numa_memory_mb": ["mem_min"],
        },
    )
    ctx = context(table, "fx")
    found = {why.code: why for why, _ in NUMA.explain(ctx, ~NUMA.mask(ctx))}
    why = found["numa_pinned_cpus"]
    assert why.message == "two NUMA cells lack 8 free pinned CPUs in all (min 2 each)"
    assert why.requested == 8
    assert why.free is not None
    assert why.free.tolist() == [8, 8, 7, 8, 16]  # free over both cells
    cell_use, _ = table.plan_for("fx", 0)
    assert cell_use[:, C_PCPU].tolist() == [6, 2]
    assert cell_use[:, C_MEM].tolist() == [6144, 2048]


def test_flexible_split_default_minimums():
    # vcpus 8 -> min 2 vCPUs per cell; memory 8192 * 2 // 8 = 2048 MB per cell
    table = table_of(
        [host("h", cells=2, pcpus=8, mem=8192)],
        [flavor("fx", vcpus=8, mem=8192, pinned=True, numa=2, split="flexible")],
    )
    assert table.flavors["fx"].cells[0].vcpus == 2
    assert table.flavors["fx"].cells[0].memory_mb == 2048
    hosts = [
        host("ok", numa=[cell(pcpus=6, mem=6144), cell(pcpus=2, mem=2048)]),
        host("short", numa=[cell(pcpus=7, mem=6144), cell(pcpus=1, mem=2048)]),
    ]
    check(
        hosts,
        flavor("fx", vcpus=8, mem=8192, pinned=True, numa=2, split="flexible"),
        ["ok"],
        {"numa_pinned_cpus": ["short"]},
    )


def test_flexible_split_balances_leftover():
    table = table_of([host("h", numa=[cell(pcpus=10, mem=10240), cell(pcpus=4, mem=4096)])], [FLEX])
    cell_use, _ = table.plan_for("fx", 0)
    # equal leftovers (3 and 3) would need a 7/1 split; the 2-CPU minimum makes it 6/2
    assert cell_use[:, C_PCPU].tolist() == [6, 2]
    assert cell_use[:, C_PCPU].sum() == 8
    assert cell_use[:, C_MEM].tolist() == [6144, 2048]


def test_flexible_split_refuses_hugepages():
    with pytest.raises(SpecError, match=r"extra_specs\['berth:numa_split'\].*huge pages"):
        table_of(
            [host("h")], [flavor("fx", vcpus=4, mem=4096, numa=2, split="flexible", page="2MB")]
        )


# ---------------------------------------------------------------------------- huge pages

HUGE_HOSTS = [
    host("hp2m", pcpus=4, mem=0, huge=4096, page_kb=2048),
    host("hp1g", pcpus=4, mem=0, huge=4096, page_kb=1048576),
    host("small", pcpus=4, mem=8192),
    host("hp2m_short", pcpus=4, mem=8192, huge=1024, page_kb=2048),
]


@pytest.mark.parametrize(
    ("page", "mem", "passed", "why"),
    [
        (
            "2MB",
            2048,
            ["hp2m"],
            {"page_size": ["hp1g", "small"], "numa_huge-page_memory_mb": ["hp2m_short"]},
        ),
        (
            "2048",
            2048,
            ["hp2m"],
            {"page_size": ["hp1g", "small"], "numa_huge-page_memory_mb": ["hp2m_short"]},
        ),
        (
            "1GB",
            2048,
            ["hp1g"],
            {"page_size": ["hp2m", "small", "hp2m_short"]},
        ),
        (
            "1GB",
            1536,  # not a whole number of 1 GB pages
            [],
            {"page_size": ["hp2m", "hp1g", "small", "hp2m_short"]},
        ),
        (
            "large",
            2048,
            ["hp2m", "hp1g"],
            {"page_size": ["small"], "numa_huge-page_memory_mb": ["hp2m_short"]},
        ),
        ("small", 2048, ["small", "hp2m_short"], {"numa_memory_mb": ["hp2m", "hp1g"]}),
    ],
)
def test_hugepages(page, mem, passed, why):
    flv = flavor("hp", vcpus=2, mem=mem, pinned=True, page=page)
    table = check(HUGE_HOSTS, flv, passed, why)
    if page != "small":
        # huge-page memory is not small-page RAM: the RAM filter has nothing to check
        assert passing(RamFilter(), table, "hp") == [h.name for h in HUGE_HOSTS]
        assert table.demands["hp"].cells[0, C_HUGE] == mem
        assert table.demands["hp"].cells[0, C_MEM] == 0


def test_hugepage_page_size_mismatch_message():
    table = table_of(HUGE_HOSTS, [flavor("hp", vcpus=2, mem=2048, pinned=True, page="1GB")])
    ctx = context(table, "hp")
    found = {why.code: why.message for why, _ in NUMA.explain(ctx, ~NUMA.mask(ctx))}
    assert found["page_size"] == "no huge pages of size 1048576 KB"
    table = table_of(HUGE_HOSTS, [flavor("hp", vcpus=2, mem=2048, pinned=True, page="large")])
    ctx = context(table, "hp")
    found = {why.code: why.message for why, _ in NUMA.explain(ctx, ~NUMA.mask(ctx))}
    assert found["page_size"] == "no huge pages of size any"


def test_hugepages_even_split_needs_whole_pages_per_cell():
    hosts = [host("h", cells=2, pcpus=4, mem=0, huge=4096, page_kb=1048576)]
    # 2048 MB over two cells = 1024 MB per cell: one 1 GB page each
    check(hosts, flavor("ok", vcpus=2, mem=2048, pinned=True, numa=2, page="1GB"), ["h"], {})
    # 3072 MB over two cells = 1536 MB per cell: not whole pages
    check(
        hosts,
        flavor("bad", vcpus=2, mem=3072, pinned=True, numa=2, page="1GB"),
        [],
        {"page_size": ["h"]},
    )


# ---------------------------------------------------------------------------- PCI NUMA affinity

PCI_SPLIT = [
    # CPUs only in cell 0, the GPU only in cell 1
    host("apart", numa=[cell(pcpus=4, mem=4096), cell(pcpus=0, mem=4096, pci={"gpu": 1})]),
    # CPUs and GPU together in cell 1
    host("together", numa=[cell(pcpus=4, mem=4096), cell(pcpus=4, mem=4096, pci={"gpu": 1})]),
    host("no_gpu", cells=2, pcpus=4, mem=4096),
]


def test_pci_required_in_the_guest_cell():
    flv = flavor("g", vcpus=2, mem=1024, pinned=True, numa=1, pci="gpu:1")
    table = check(
        PCI_SPLIT,
        flv,
        ["together"],
        {"numa_combined": ["apart"], "numa_pci": ["no_gpu"]},
    )
    cell_use, _ = table.plan_for("g", 1)
    assert cell_use[1, C_PCPU] == 2
    assert cell_use[1, CELL_BASE] == 1  # the device comes from the guest's own cell
    assert cell_use[0].tolist() == [0, 0, 0, 0, 0]


def test_pci_preferred_any_cell():
    flv = flavor("g", vcpus=2, mem=1024, pinned=True, numa=1, pci="gpu:1", pci_policy="preferred")
    table = check(PCI_SPLIT, flv, ["apart", "together", "no_gpu"], {})
    # the PCI filter (host total) is what rejects the host without a GPU
    assert passing(PciPassthroughFilter(), table, "g") == ["apart", "together"]
    cell_use, _ = table.plan_for("g", 0)
    assert cell_use[:, C_PCPU].tolist() == [2, 0]
    assert cell_use[:, CELL_BASE].tolist() == [0, 1]  # from the other cell, as allowed
    cell_use, _ = table.plan_for("g", 1)
    assert cell_use[:, CELL_BASE].sum() == 1


def test_pci_numa_affinity_socket_is_preferred_and_legacy_required():
    required = flavor("r", vcpus=2, pinned=True, pci="gpu:1", pci_policy="legacy")
    socket = flavor("s", vcpus=2, pinned=True, pci="gpu:1", pci_policy="socket")
    table = table_of(PCI_SPLIT, [required, socket])
    assert passing(NUMA, table, "r") == ["together"]
    assert passing(NUMA, table, "s") == ["apart", "together", "no_gpu"]


def test_two_cell_guest_takes_devices_from_either_cell():
    flv = flavor("g2", vcpus=4, mem=2048, pinned=True, numa=2, pci="gpu:1")
    hosts = [
        host("gpu1", numa=[cell(pcpus=2, mem=4096), cell(pcpus=2, mem=4096, pci={"gpu": 1})]),
    ]
    table = check(hosts, flv, ["gpu1"], {})
    cell_use, _ = table.plan_for("g2", 0)
    assert cell_use[:, CELL_BASE].tolist() == [0, 1]


# ---------------------------------------------------------------------------- one-cell hosts


@pytest.mark.parametrize(
    "flv",
    [
        flavor("even", vcpus=2, mem=2048, pinned=True, numa=2),
        flavor("even_shared", vcpus=2, mem=2048, numa=2),
        FIXED,
        FLEX,
    ],
    ids=["even", "even_shared", "fixed", "flex"],
)
def test_one_cell_host_rejects_two_cell_guests(flv):
    hosts = [
        host("one", vcpus=64, pcpus=64, mem=65536),
        host("two", cells=2, vcpus=32, pcpus=32, mem=32768),
    ]
    table = check(hosts, flv, ["two"], {"numa_cells": ["one"]})
    assert table.n_cells.tolist() == [1, 2]


def test_numa_filter_sees_the_live_table():
    hosts = [host("h", pcpus=4, mem=4096)]
    table = table_of(hosts, [flavor("p", vcpus=2, pinned=True)])
    assert passing(NUMA, table, "p") == ["h"]
    table.claim("a", "h", "p")
    assert passing(NUMA, table, "p") == ["h"]
    table.claim("b", "h", "p")
    assert passing(NUMA, table, "p") == []
    assert np.array_equal(table.cell_free[0, 0, :4], [4, 0, 4096 - 2048, 0])
    assert table.cell_free[0, 0, C_VCPU] == 4
