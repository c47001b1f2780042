"""The per-host sums the table keeps for every decision (`core.table_free`) and the PCI filter's
kept request stay exact through claims, releases, undone decisions, added hosts and redefined
flavors, and no reader can write into the shared arrays.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.errors import ClaimError
from berth.core.explain import NoValidHost
from berth.core.filters.pci_passthrough import PciPassthroughFilter
from berth.core.filters.vcpu import VcpuFilter
from berth.core.flavors import parse_flavor
from berth.core.resources import C_PCPU, H_VCPU
from berth.core.table import HostTable
from berth.core.table_free import free_pinned, free_vcpus
from berth.core.weighers.resources import VcpuWeigher
from tests.builders import NOW, cell, context, flavor, host, passing, request, scheduler, table_of
from tests.core.strategies import examples, tables


def _fresh(table: HostTable) -> tuple[np.ndarray, np.ndarray]:
    pinned = table.cell_free[:, :, C_PCPU].sum(axis=1)
    return pinned, table.host_free[:, H_VCPU] + pinned


def _assert_exact(table: HostTable) -> None:
    pinned, vcpus = _fresh(table)
    assert np.array_equal(free_pinned(table), pinned)
    assert np.array_equal(free_vcpus(table), vcpus)
    assert free_pinned(table).dtype == free_vcpus(table).dtype == np.int64


@settings(max_examples=examples(0.15), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=5, cells=(2, 1, 2, 4)), data=st.data())
def test_kept_sums_follow_claims_releases_and_undone_decisions(
    table: HostTable, data: st.DataObject
) -> None:
    sched = scheduler(weighers={"vcpu": -1.0})
    flavors = sorted(table.flavors)
    _assert_exact(table)  # warm
    for step in range(8):
        action = data.draw(st.sampled_from(["claim", "release", "decide"]))
        name = data.draw(st.sampled_from(flavors))
        if action == "claim":
            with contextlib.suppress(ClaimError):  # no room: nothing changes
                table.claim(f"c{step}", data.draw(st.sampled_from(table.names)), name)
        elif action == "release" and table.allocations:
            table.release(data.draw(st.sampled_from(sorted(table.allocations))))
        elif action == "decide":  # tentative claims, undone exactly
            ids = (f"d{step}a", f"d{step}b")
            req = request(name, num_instances=2, instance_ids=ids, seed=step)
            with contextlib.suppress(NoValidHost):  # the undo is what is checked
                sched.select_destinations(table, req, NOW)
        _assert_exact(table)


def test_kept_sums_cover_added_hosts_and_are_read_only() -> None:
    numa = [cell(vcpus=4, pcpus=4, mem=4096), cell(vcpus=4, pcpus=6, mem=4096)]
    table = table_of([host("a", numa=numa)], [flavor("p", vcpus=2, mem=512, pinned=True)])
    assert free_pinned(table).tolist() == [10]
    assert free_vcpus(table).tolist() == [18]
    for kept in (free_pinned(table), free_vcpus(table)):
        with pytest.raises(ValueError, match="read-only"):
            kept[0] = 0
    table.claim("x", "a", "p")
    assert free_pinned(table).tolist() == [8]
    table.add_hosts([host("b", numa=[cell(vcpus=2, pcpus=3, mem=1024)] * 2)], {})
    assert free_pinned(table).tolist() == [8, 6]
    assert free_vcpus(table).tolist() == [16, 10]
    table.release("x")
    assert free_pinned(table).tolist() == [10, 6]
    # their readers: the vCPU filter (pinned guests) and the vCPU weigher's column
    assert passing(
        VcpuFilter(),
        table,
        "p",
    ) == ["a", "b"]
    assert VcpuWeigher().column(context(table, "p")).tolist() == [18, 10]


def test_pci_filter_keeps_the_request_per_flavor_and_reads_free_devices_afresh() -> None:
    numa = [cell(vcpus=8, mem=8192, pci={"a100": 1}), cell(vcpus=8, mem=8192, pci={"a100": 1})]
    hosts = [host("g", numa=numa), host("plain", vcpus=16, mem=16384)]
    gpu = flavor("gpu", vcpus=2, mem=1024, pci="a100:2")
    table = table_of(hosts, [gpu, flavor("f", vcpus=2, mem=1024)])
    flt = PciPassthroughFilter()
    assert passing(flt, table, "gpu") == ["g"]
    assert flt.mask(context(table, "f")) is table.everyone()  # asks for no device
    table.claim("one", "g", "gpu")
    assert passing(flt, table, "gpu") == []  # the kept request, the free devices of now
    table.release("one")
    assert passing(flt, table, "gpu") == ["g"]
    # a redefined flavor drops the kept request (`add_flavor` drops the table's state)
    table.add_flavor(parse_flavor(flavor("gpu", vcpus=2, mem=1024, pci="a100:3"), {}))
    assert passing(flt, table, "gpu") == []
