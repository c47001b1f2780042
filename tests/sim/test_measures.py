"""Fragmentation, stranded resources and utilisation on hand-made fleets."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from berth.core.resources import C_MEM, C_VCPU, H_MEM, H_VCPU
from berth.core.table import HostTable
from berth.sim.measures import (
    cpu_capacity,
    eligible_hosts,
    fragmentation_rate,
    memory_capacity,
    snapshot,
)
from tests.builders import flavor, host, table_of


def _use(
    table: HostTable, vcpus_per_cell: list[int], mem: int = 1024
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    cell = np.zeros((2, table.width), dtype=np.int64)
    for c, v in enumerate(vcpus_per_cell):
        if v:
            cell[c, C_VCPU] = v
            cell[c, C_MEM] = mem
    hostv = np.zeros(4, dtype=np.int64)
    hostv[H_VCPU] = sum(vcpus_per_cell)
    hostv[H_MEM] = mem * sum(1 for v in vcpus_per_cell if v)
    return cell, hostv


def numa_table() -> HostTable:
    """A: two 4-vCPU cells with 3 vCPUs used in cell 0 and 1 in cell 1; B empty."""
    hosts = [host("A", cells=2, vcpus=4, mem=4096), host("B", cells=2, vcpus=4, mem=4096)]
    flavors = [
        flavor("s3", vcpus=3, mem=1024, numa=1),
        flavor("s1", vcpus=1, mem=1024, numa=1),
        flavor("n4", vcpus=4, mem=1024, numa=1),  # needs one whole cell
        flavor("f4", vcpus=4, mem=1024),  # floats over the host
    ]
    table = table_of(hosts, flavors)
    table.claim("x", "A", "s3", *_use(table, [3, 0]))
    table.claim("y", "A", "s1", *_use(table, [0, 1]))
    return table


def test_fragmentation_rate_is_numa_exact():
    table = numa_table()
    # free CPU: A 4 (1 + 3), B 8. n4 fits 0 times on A, twice on B: (12 - 2*4) / 12
    assert fragmentation_rate(table, "n4") == pytest.approx(4 / 12)
    # the floating flavor only needs 4 free vCPUs on the host: A 1, B 2 -> nothing wasted
    assert fragmentation_rate(table, "f4") == pytest.approx(0.0)
    # s3: A cell 1 has 3 -> 1, B 1 per cell -> 2: (12 - 3*3) / 12
    assert fragmentation_rate(table, "s3") == pytest.approx(3 / 12)


def test_fragmentation_counts_only_hosts_that_could_hold_the_flavor():
    hosts = [host("small", vcpus=2, mem=2048), host("big", vcpus=8, mem=8192)]
    table = table_of(hosts, [flavor("f8", vcpus=8, mem=1024)])
    assert eligible_hosts(table, "f8").tolist() == [False, True]
    assert fragmentation_rate(table, "f8") == 0.0  # the small host's CPU is not counted


def test_fragmentation_of_a_full_fleet_is_zero():
    table = table_of([host("h", vcpus=1, mem=1024)], [flavor("f", vcpus=1, mem=1024)])
    table.claim("i", "h", "f")
    assert fragmentation_rate(table, "f") == 0.0


def test_snapshot_utilisation_and_stranded_resources():
    hosts = [
        host("mem-full", vcpus=10, mem=1000),
        host("cpu-full", vcpus=10, mem=1000),
        host("empty", vcpus=10, mem=1000),
    ]
    flavors = [flavor("m", vcpus=2, mem=990), flavor("c", vcpus=10, mem=100)]
    table = table_of(hosts, flavors)
    table.claim("i1", "mem-full", "m")
    table.claim("i2", "cpu-full", "c")
    snap = snapshot(table, cpu_capacity(table), memory_capacity(table), full_fraction=0.05)
    assert snap.used_hosts == 2
    assert snap.empty_hosts == 1
    assert snap.cpu_util_used == pytest.approx(12 / 20)
    assert snap.mem_util_used == pytest.approx(1090 / 2000)
    assert snap.cpu_util == pytest.approx(12 / 30)
    # 8 vCPUs free on the memory-full host; 900 MB free on the CPU-full host
    assert snap.stranded_cpu == pytest.approx(8 / 30)
    assert snap.stranded_mem == pytest.approx(900 / 3000)
