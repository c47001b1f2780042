"""Sizing specs ("N hosts of type X per cluster"), fleet files and merging a trace in."""

from __future__ import annotations

import math

import pytest

from berth.core.model import Fleet
from berth.fleet.io import dump_fleet
from berth.sim.fleets import FleetSpecError, load_fleet_or_sizing, merge_trace, parse_sizing
from berth.sim.synthetic import SyntheticConfig, generate
from berth.sim.trace import build_trace
from tests.builders import flavor, host


def test_inline_sizing_repeats_per_cluster():
    tr = generate(SyntheticConfig(seed=3, days=0.05, history_days=0.5))
    fleet, desc = load_fleet_or_sizing("3xstd-2s+1xdpdk-2s", tr)
    assert len(fleet.hosts) == 4 * len(tr.clusters) == 32
    assert desc == "sizing 3xstd-2s+1xdpdk-2s (32 hosts)"
    first = fleet.hosts[0]
    assert first.name == "bj-a-c1-std-2s-0000"
    assert first.availability_zone == "bj-a"
    assert len(first.numa_cells) == 2
    assert {h.availability_zone for h in fleet.hosts} == set(tr.zones)


def test_sizing_without_clusters_is_one_cluster():
    fleet, _ = load_fleet_or_sizing("2 x azure-1")
    assert [h.name for h in fleet.hosts] == ["nova-c1-azure-1-0000", "nova-c1-azure-1-0001"]
    assert fleet.hosts[0].numa_cells[0].shared_cpus == 4800
    assert fleet.hosts[0].numa_cells[0].memory_mb == 2250


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("3xnope", "unknown host type 'nope'"),
        ("0xazure-1", "gives no hosts"),
        ("nothing-here", "no such file, and not a sizing spec"),
    ],
)
def test_bad_sizing_specs(spec, message):
    with pytest.raises(FleetSpecError, match=message):
        load_fleet_or_sizing(spec)


def test_parse_sizing_adds_repeated_types():
    assert parse_sizing("2xa+3xb+1xa per cluster").per_cluster == {"a": 3, "b": 3}


def test_sizing_file_with_own_types_and_overrides(tmp_path):
    p = tmp_path / "sizing.yaml"
    p.write_text(
        """
kind: sizing
host_types:
  tiny: {numa_cells: [{shared_cpus: 2, memory_mb: 2048}]}
per_cluster: {tiny: 2}
clusters:
  - {idc: x, name: c1}
  - {idc: y, name: c1, hosts: {tiny: 1, azure-2: 1}}
"""
    )
    fleet, desc = load_fleet_or_sizing(str(p))
    assert [h.name for h in fleet.hosts] == [
        "x-c1-tiny-0000",
        "x-c1-tiny-0001",
        "y-c1-tiny-0000",
        "y-c1-azure-2-0000",
    ]
    assert "sizing file" in desc


def test_sizing_file_errors(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("kind: sizing\nper_cluster: {a: -1}\n")
    with pytest.raises(FleetSpecError, match="per_cluster must map host type"):
        load_fleet_or_sizing(str(p))
    p.write_text("kind: sizing\nbogus: 1\n")
    with pytest.raises(FleetSpecError, match="unknown key 'bogus'"):
        load_fleet_or_sizing(str(p))


def test_fleet_snapshot_files_are_used_as_they_are(tmp_path):
    fleet = Fleet(hosts=[host("h1"), host("h2")], flavors=[flavor("m1", vcpus=1)], now=5.0)
    p = tmp_path / "fleet.yaml"
    dump_fleet(fleet, p)
    got, desc = load_fleet_or_sizing(str(p))
    assert [h.name for h in got.hosts] == ["h1", "h2"]
    assert got.now == 5.0
    assert desc.startswith(f"fleet file {p}")


def test_merge_trace_flavors_must_agree():
    fleet = Fleet(hosts=[host("h")], flavors=[flavor("f", vcpus=2)])
    same = build_trace("t", [("a", 0.0, math.inf, "f", 0)], [flavor("f", vcpus=2)])
    assert [f.name for f in merge_trace(fleet, same).flavors] == ["f"]
    other = build_trace("t", [("a", 0.0, math.inf, "f", 0)], [flavor("f", vcpus=4)])
    with pytest.raises(FleetSpecError, match="defined differently"):
        merge_trace(fleet, other)


def test_merge_trace_needs_every_flavor_defined():
    tr = build_trace("t", [("a", 0.0, 1.0, "f", 0)], [flavor("f")])
    tr.flavors.clear()
    tr.source = "trace.csv"
    with pytest.raises(FleetSpecError, match=r"trace.csv:1: flavor 'f' is not defined"):
        merge_trace(Fleet(hosts=[host("h")]), tr)
