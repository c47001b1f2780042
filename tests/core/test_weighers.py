"""Weighers: raw values on small fleets, normalisation, and the fragmentation measure."""

from __future__ import annotations

import numpy as np
import pytest

from berth.core.errors import SpecError
from berth.core.table import HostTable
from berth.core.weighers.affinity import SoftAffinityWeigher, SoftAntiAffinityWeigher
from berth.core.weighers.base import HostWeigher, normalise
from berth.core.weighers.fragmentation import FragmentationParams, FragmentationWeigher
from berth.core.weighers.load import IoOpsWeigher, NumInstancesWeigher
from berth.core.weighers.resources import DiskWeigher, RamWeigher, VcpuWeigher
from tests.builders import (
    NOW,
    cell,
    context,
    flavor,
    group,
    host,
    instance,
    place,
    request,
    scheduler,
    table_of,
)


def raw(weigher: HostWeigher, table, flavor_name: str, rows=None, **kwargs) -> list[float]:
    ctx = context(table, flavor_name, **kwargs)
    if rows is None:
        rows = np.arange(len(table))
    values = weigher.raw(ctx, np.asarray(rows, dtype=np.int64))
    assert values.dtype == np.float64
    return values.tolist()


# ---------------------------------------------------------------------------- normalise


@pytest.mark.parametrize(
    ("values", "scaled"),
    [
        ([3.0, 1.0, 2.0], [1.0, 0.0, 0.5]),
        ([-7.0, -1.0, -3.0], [0.0, 1.0, 4 / 6]),
        ([5.0, 5.0, 5.0], [0.0, 0.0, 0.0]),
        ([42.0], [0.0]),
        ([0.0, 1e9], [0.0, 1.0]),
    ],
)
def test_normalise(values, scaled):
    assert normalise(np.array(values)).tolist() == pytest.approx(scaled)


# ---------------------------------------------------------------------------- resource weighers


def _resource_table() -> HostTable:
    hosts = [
        host("a", vcpus=4, mem=1024, hdd=100, ssd=10),
        host("b", cells=2, vcpus=2, pcpus=2, mem=2048, cpu_ratio=2.0, hdd=50, ssd=500),
        host("c", vcpus=8, mem=8192, reserved_mem=1024, hdd=10, reserved_disk=5, io_ops=7),
    ]
    flavors = [
        flavor("f", vcpus=1, mem=512, disk=10),
        flavor("s", vcpus=1, mem=512, disk=20, ssd=True),
        flavor("p", vcpus=1, mem=256, pinned=True),
    ]
    existing = [instance("i1", "a", "f"), instance("i2", "b", "p"), instance("i3", "b", "s")]
    return table_of(hosts, flavors, existing)


def test_ram_weigher_raw_is_free_host_ram():
    table = _resource_table()
    assert raw(RamWeigher(), table, "f") == [512, 4096 - 256 - 512, 8192 - 1024]


def test_vcpu_weigher_raw_is_free_shared_plus_free_pinned():
    table = _resource_table()
    # a: 4 - 1; b: 2 * 2 * 2.0 - 1 (the SSD guest) + 4 - 1 pinned; c: 8
    assert raw(VcpuWeigher(), table, "f") == [3, 7 + 3, 8]


def test_disk_weigher_raw_is_free_disk_of_the_flavor_kind():
    table = _resource_table()
    assert raw(DiskWeigher(), table, "f") == [90, 50, 5]
    assert raw(DiskWeigher(), table, "s") == [10, 480, 0]


def test_load_weighers_raw():
    table = _resource_table()
    assert raw(IoOpsWeigher(), table, "f") == [0, 0, 7]
    assert raw(NumInstancesWeigher(), table, "f") == [1, 2, 0]


def test_raw_follows_the_candidate_rows():
    table = _resource_table()
    assert raw(RamWeigher(), table, "f", rows=[2, 0]) == [7168, 512]
    assert raw(NumInstancesWeigher(), table, "f", rows=[1]) == [2]
    assert raw(RamWeigher(), table, "f", rows=[]) == []


# ---------------------------------------------------------------------------- soft affinity


def _group_table() -> HostTable:
    hosts = [host(f"h{i}", vcpus=8, mem=8192) for i in range(3)]
    groups = [
        group("soft_aff", "soft-affinity"),
        group("soft_anti", "soft-anti-affinity"),
        group("hard", "anti-affinity"),
    ]
    existing = [
        instance("a1", "h0", "f", group_id="soft_aff"),
        instance("a2", "h0", "f", group_id="soft_aff"),
        instance("a3", "h2", "f", group_id="soft_aff"),
        instance("n1", "h1", "f", group_id="soft_anti"),
        instance("n2", "h1", "f", group_id="soft_anti"),
        instance("n3", "h2", "f", group_id="soft_anti"),
        instance("x1", "h0", "f", group_id="hard"),
    ]
    return table_of(hosts, [flavor("f", vcpus=1, mem=512)], existing, groups=groups)


@pytest.mark.parametrize(
    ("gid", "affinity", "anti"),
    [
        ("soft_aff", [2, 0, 1], [0, 0, 0]),
        ("soft_anti", [0, 0, 0], [0, -2, -1]),
        ("hard", [0, 0, 0], [0, 0, 0]),
        (None, [0, 0, 0], [0, 0, 0]),
    ],
)
def test_soft_affinity_weighers_raw(gid, affinity, anti):
    table = _group_table()
    assert raw(SoftAffinityWeigher(), table, "f", server_group=gid) == affinity
    assert raw(SoftAntiAffinityWeigher(), table, "f", server_group=gid) == anti


def test_soft_affinity_weighers_pick_hosts():
    table = _group_table()
    sched = scheduler(weighers={"soft_affinity": 1.0, "soft_anti_affinity": 1.0})
    aff = sched.select_destinations(table, request("f", server_group="soft_aff"), NOW)
    assert aff.hosts == ["h0"]
    anti = sched.select_destinations(table, request("f", server_group="soft_anti"), NOW)
    assert anti.hosts == ["h0"]
    anti3 = sched.select_destinations(
        table, request("f", server_group="soft_anti", num_instances=3), NOW
    )
    # h0 (0 members), then h2 (1) ties with h0 (now 1), ... never h1 before the others catch up
    assert anti3.hosts[0] == "h0"
    assert "h1" not in anti3.hosts[:2]


# ---------------------------------------------------------------------------- fragmentation

FRAG_FLAVORS = [
    flavor("big", vcpus=4, mem=4096, pinned=True),
    flavor("mid", vcpus=2, mem=2048, pinned=True),
    flavor("small", vcpus=1, mem=1024, pinned=True),
]


def _frag_table() -> HostTable:
    hosts = [
        host("exact", vcpus=0, pcpus=4, mem=4096),  # one whole big slot: small would break it
        host("spare", vcpus=0, pcpus=5, mem=5120),  # big slot plus one spare CPU
        host("no_big", vcpus=0, pcpus=2, mem=2048),  # too small for big already
        # two cells: the claim rule puts small in the tight cell, keeping the big slot whole
        host("cells", vcpus=0, numa=[cell(pcpus=4, mem=4096), cell(pcpus=1, mem=1024)]),
    ]
    return table_of(hosts, FRAG_FLAVORS)


def _cost_by_capacity(table, flavor_name: str, references: list[str]) -> list[float]:
    """The documented formula, measured: sum vcpus_f * (cap_f before - cap_f after a claim)."""
    sched = scheduler()
    out = []
    for name in table.names:
        after = table.copy()
        after.claim("probe", name, flavor_name)
        row = table.index[name]
        cost = 0
        for ref in references:
            before_f = int(sched.capacity(table, ref, NOW)[row])
            after_f = int(sched.capacity(after, ref, NOW)[row])
            cost += table.flavors[ref].vcpus * (before_f - after_f)
        out.append(float(cost))
    return out


@pytest.mark.parametrize(
    ("params", "references", "expected"),
    [
        (FragmentationParams(), ["big", "mid", "small"], [7, 1, 3, 1]),
        (FragmentationParams(largest=1), ["big"], [4, 0, 0, 0]),
        (FragmentationParams(largest=2), ["big", "mid"], [6, 0, 2, 0]),
        (FragmentationParams(reference_flavors=["mid"]), ["mid"], [2, 0, 2, 0]),
    ],
)
def test_fragmentation_cost_formula(params, references, expected):
    table = _frag_table()
    weigher = FragmentationWeigher(params)
    assert weigher.references(context(table, "small")) == references
    assert raw(weigher, table, "small") == [-c for c in expected]
    assert _cost_by_capacity(table, "small", references) == expected


def test_fragmentation_prefers_the_host_that_keeps_the_large_slot():
    table = _frag_table()
    sched = scheduler(weighers={"fragmentation": 1.0})
    for seed in range(8):
        chosen = sched.select_destinations(table, request("small", seed=seed), NOW).hosts
        assert chosen[0] in ("spare", "cells")  # cost 1; 'exact' would lose its big slot
    # packing by RAM alone would pick the fullest host and break its big slot
    packing = scheduler(weighers={"ram": -1.0})
    assert packing.select_destinations(table, request("small"), NOW).hosts == ["no_big"]
    # scaled: fragmentation [0, 1, 2/3, 1], RAM [2/3, 1, 0, 1]; the weights decide
    both = scheduler(weighers={"fragmentation": 2.0, "ram": -1.0})
    assert both.select_destinations(table, request("small"), NOW).hosts == ["no_big"]
    both = scheduler(weighers={"fragmentation": 5.0, "ram": -1.0})
    assert both.select_destinations(table, request("small"), NOW).hosts[0] in ("spare", "cells")


def test_fragmentation_cost_follows_claims():
    table = _frag_table()
    weigher = FragmentationWeigher()
    assert raw(weigher, table, "small") == [-7, -1, -3, -1]
    snapshot_copy = table.copy()
    table.claim("x", "spare", "small")  # spare is now an exact big slot
    table.claim("y", "exact", "mid")  # exact keeps room for one mid and two smalls
    assert raw(weigher, table, "small") == [-3, -7, -3, -1]
    assert _cost_by_capacity(table, "small", ["big", "mid", "small"]) == [3, 7, 3, 1]
    assert raw(weigher, snapshot_copy, "small") == [-7, -1, -3, -1]  # the copy is independent
    table.release("x")
    assert raw(weigher, table, "small") == [-3, -1, -3, -1]


def test_fragmentation_over_a_sequence_of_placements():
    table = _frag_table()
    sched = scheduler(weighers={"fragmentation": 1.0, "ram": -0.01})
    for seed in range(4):
        place(sched, table, "small", seed=seed)
    # four smalls fit without breaking any big slot: spare's CPU, cells' tight cell, no_big x2
    assert scheduler().capacity(table, "big", NOW).tolist() == [1, 1, 0, 1]
    assert table.n_instances.tolist() == [0, 1, 2, 1]


def test_fragmentation_unknown_reference_flavor():
    table = _frag_table()
    weigher = FragmentationWeigher(FragmentationParams(reference_flavors=["huge"]))
    with pytest.raises(SpecError, match="fragmentation weigher: unknown reference flavor 'huge'"):
        weigher.raw(context(table, "small"), np.arange(4))


def test_fragmentation_reference_order_ties_by_memory_then_name():
    flavors = [
        flavor("b", vcpus=4, mem=1024),
        flavor("a", vcpus=4, mem=1024),
        flavor("c", vcpus=4, mem=2048),
        flavor("d", vcpus=8, mem=512),
    ]
    table = table_of([host("h")], flavors)
    weigher = FragmentationWeigher(FragmentationParams(largest=4))
    assert weigher.references(context(table, "a")) == ["d", "c", "a", "b"]
