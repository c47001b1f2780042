"""Fleet snapshot files: YAML and JSON round trips, and errors that name the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from berth.core.errors import FleetError, SpecError
from berth.core.model import Fleet
from berth.core.resources import C_MEM, C_PCPU, H_MEM
from berth.core.table import HostTable
from berth.fleet.io import FleetFileError, dump_fleet, load_fleet, parse_fleet
from tests.builders import cell, flavor, fleet, group, host, instance


def small_fleet() -> Fleet:
    return fleet(
        [
            host("h1", cells=2, pcpus=4, mem=8192, aggregates=["fast"], traits=["HW_X"]),
            host(
                "h2",
                numa=[cell(pcpus=2, mem=4096, pci={"gpu": 1}), cell(vcpus=8, mem=4096)],
                hdd=100,
            ),
        ],
        [
            flavor("p2", vcpus=2, mem=2048, pinned=True),
            flavor("e4", vcpus=4, mem=4096, pinned=True, numa=2),
            flavor("s1", vcpus=1, mem=512, disk=10),
        ],
        [
            instance("i1", "h1", "e4", group_id="g"),
            instance("i2", "h2", "p2", numa=[(0, 2, 2048)]),
            instance("i3", "h2", "s1"),
        ],
        groups=[group("g", "anti-affinity")],
        aggregates={"fast": {"ssd": "true"}},
        aliases={"a100": "gpu"},
    )


def raw(f: Fleet) -> dict[str, Any]:
    return f.model_dump(mode="json", exclude_defaults=True)


def write(tmp_path: Path, name: str, data: Any) -> Path:
    p = tmp_path / name
    if isinstance(data, str):
        p.write_text(data, encoding="utf-8")
    elif name.endswith(".json"):
        p.write_text(json.dumps(data), encoding="utf-8")
    else:
        p.write_text(yaml.safe_dump(data), encoding="utf-8")
    return p


@pytest.mark.parametrize("name", ["fleet.yaml", "fleet.yml", "fleet.json", "fleet.txt"])
def test_round_trip(tmp_path, name):
    original = small_fleet()
    path = tmp_path / name
    dump_fleet(original, path)
    loaded = load_fleet(path)
    assert loaded == original
    if name.endswith(".json"):
        assert json.loads(path.read_text())["hosts"][0]["name"] == "h1"
    else:
        assert yaml.safe_load(path.read_text())["hosts"][0]["name"] == "h1"
    table = HostTable.from_fleet(loaded)
    assert table.names == ["h1", "h2"]
    assert sorted(table.allocations) == ["i1", "i2", "i3"]
    assert table.cell_free[0, :, C_PCPU].tolist() == [2, 2]
    assert table.cell_free[1, :, C_PCPU].tolist() == [0, 0]
    assert table.cell_free[1, :, C_MEM].tolist() == [2048, 4096]
    assert table.host_free[1, H_MEM] == 8192 - 2048 - 512


def test_yaml_with_integer_extra_specs(tmp_path):
    text = """
hosts:
  - name: h1
    numa_cells:
      - {dedicated_cpus: 4, memory_mb: 4096}
      - {dedicated_cpus: 4, memory_mb: 4096}
flavors:
  - name: e
    vcpus: 4
    memory_mb: 4096
    extra_specs: {hw:numa_nodes: 2, hw:cpu_policy: dedicated}
"""
    f = load_fleet(write(tmp_path, "f.yaml", text))
    assert f.flavors[0].extra_specs == {"hw:numa_nodes": "2", "hw:cpu_policy": "dedicated"}
    table = HostTable.from_fleet(f)
    assert table.demands["e"].cells[:, C_PCPU].tolist() == [2, 2]


# ---------------------------------------------------------------------------- bad files


def _bad_memory(d: dict[str, Any]) -> None:
    d["hosts"][0]["numa_cells"][0]["memory_mb"] = -1


def _bad_memory_type(d: dict[str, Any]) -> None:
    d["hosts"][1]["numa_cells"][1]["memory_mb"] = "lots"


def _nine_cells(d: dict[str, Any]) -> None:
    d["hosts"][0]["numa_cells"] = d["hosts"][0]["numa_cells"][:1] * 9


def _no_cells(d: dict[str, Any]) -> None:
    del d["hosts"][1]["numa_cells"]


def _extra_field(d: dict[str, Any]) -> None:
    d["flavors"][2]["colour"] = "blue"


def _bad_ratio(d: dict[str, Any]) -> None:
    d["hosts"][0]["cpu_allocation_ratio"] = 0


def _bad_page(d: dict[str, Any]) -> None:
    d["hosts"][0]["hugepage_size_kb"] = 4096


def _huge_without_size(d: dict[str, Any]) -> None:
    d["hosts"][0]["numa_cells"][0]["hugepages_mb"] = 1024


def _bad_policy(d: dict[str, Any]) -> None:
    d["server_groups"][0]["policy"] = "sometimes"


def _bad_cell(d: dict[str, Any]) -> None:
    d["instances"][1]["numa"][0]["cell"] = 8


def _unknown_host(d: dict[str, Any]) -> None:
    d["instances"][2]["host"] = "h9"


def _unknown_flavor(d: dict[str, Any]) -> None:
    d["instances"][0]["flavor"] = "nope"


def _unknown_group(d: dict[str, Any]) -> None:
    d["instances"][0]["server_group"] = "ghost"


def _unknown_aggregate(d: dict[str, Any]) -> None:
    d["hosts"][1]["aggregates"] = ["slow"]


def _dup_host(d: dict[str, Any]) -> None:
    d["hosts"][1]["name"] = "h1"


def _dup_flavor(d: dict[str, Any]) -> None:
    d["flavors"][2]["name"] = "p2"


def _dup_instance(d: dict[str, Any]) -> None:
    d["instances"][2]["id"] = "i1"


def _dup_group(d: dict[str, Any]) -> None:
    d["server_groups"].append({"id": "g", "policy": "affinity"})


def _bad_version(d: dict[str, Any]) -> None:
    d["version"] = 2


def _vcpus_zero(d: dict[str, Any]) -> None:
    d["flavors"][0]["vcpus"] = 0


def _empty_name(d: dict[str, Any]) -> None:
    d["hosts"][0]["name"] = ""


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_bad_memory, "hosts[0].numa_cells[0].memory_mb: Input should be greater than or equal"),
        (_bad_memory_type, "hosts[1].numa_cells[1].memory_mb: Input should be a valid integer"),
        (_nine_cells, "hosts[0]: host 'h1': numa_cells: at most 8 NUMA cells, got 9"),
        (_no_cells, "hosts[1].numa_cells: Field required"),
        (_extra_field, "flavors[2].colour: Extra inputs are not permitted"),
        (_bad_ratio, "hosts[0].cpu_allocation_ratio: Input should be greater than 0"),
        (_bad_page, "hosts[0].hugepage_size_kb: Input should be 0, 2048 or 1048576"),
        (_huge_without_size, "hosts[0]: numa_cells declare hugepages_mb but hugepage_size_kb is 0"),
        (_bad_policy, "server_groups[0].policy: Input should be"),
        (_bad_cell, "instances[1].numa[0].cell: Input should be less than 8"),
        (_unknown_host, "instances[2].host: unknown host 'h9'"),
        (_unknown_flavor, "instances[0].flavor: unknown flavor 'nope'"),
        (_unknown_group, "instances[0].server_group: unknown server group 'ghost'"),
        (_unknown_aggregate, "hosts[1].aggregates: unknown aggregate 'slow'"),
        (_dup_host, "hosts[1]: duplicate name 'h1'"),
        (_dup_flavor, "flavors[2]: duplicate name 'p2'"),
        (_dup_instance, "instances[2]: duplicate name 'i1'"),
        (_dup_group, "server_groups[1]: duplicate name 'g'"),
        (_bad_version, "version: Input should be 1"),
        (_vcpus_zero, "flavors[0].vcpus: Input should be greater than or equal to 1"),
        (_empty_name, "hosts[0].name: String should have at least 1 character"),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else "",
)
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_invalid_fleet_names_path_and_field(tmp_path, mutate, expected, suffix):
    data = raw(small_fleet())
    mutate(data)
    path = write(tmp_path, "fleet" + suffix, data)
    with pytest.raises(FleetFileError) as err:
        load_fleet(path)
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message


def test_error_lists_at_most_three_problems(tmp_path):
    data = raw(small_fleet())
    for h in data["hosts"]:
        for c in h["numa_cells"]:
            c["memory_mb"] = -1
    with pytest.raises(FleetFileError) as err:
        load_fleet(write(tmp_path, "f.yaml", data))
    message = str(err.value)
    assert message.count("memory_mb: Input should be greater than or equal to 0") == 3
    assert message.endswith("... and 1 more")


def test_parse_fleet_names_the_source():
    with pytest.raises(FleetFileError, match=r"^snapshot: hosts\[0\]\.numa_cells: Field required"):
        parse_fleet({"hosts": [{"name": "h"}]}, "snapshot")


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("f.yaml", "hosts: [\n  - name: h1\n", "not valid YAML"),
        ("f.yaml", "hosts:\n\t- bad tab", "not valid YAML"),
        ("f.json", '{"hosts": [}', "not valid JSON"),
        ("f.json", "hosts: []", "not valid JSON"),
        ("f.yaml", "- just\n- a list\n", "expected a mapping with hosts, flavors and instances"),
        ("f.yaml", "", "expected a mapping"),
        ("f.json", "42", "expected a mapping"),
    ],
)
def test_not_a_fleet_file(tmp_path, name, text, expected):
    path = write(tmp_path, name, text)
    with pytest.raises(FleetFileError) as err:
        load_fleet(path)
    assert str(err.value).startswith(f"{path}: {expected}")


def test_unreadable_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(FleetFileError, match=r"missing\.yaml: cannot read \(No such file"):
        load_fleet(missing)
    with pytest.raises(FleetFileError, match=r": cannot read \(Is a directory\)"):
        load_fleet(tmp_path)


def test_file_that_is_not_utf8_is_a_fleet_file_error(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(FleetFileError, match=r"binary\.yaml: "):
        load_fleet(binary)


def test_empty_fleet_is_valid(tmp_path):
    f = load_fleet(write(tmp_path, "f.json", {}))
    table = HostTable.from_fleet(f)
    assert len(table) == 0
    assert table.cell_free.shape == (0, 2, 4)


# ---------------------------------------------------------------------------- table building


def test_instance_that_does_not_fit_its_host_is_a_fleet_error():
    f = fleet(
        [host("h1", pcpus=2, mem=4096)],
        [flavor("p2", vcpus=2, pinned=True)],
        [instance("a", "h1", "p2"), instance("b", "h1", "p2")],
    )
    with pytest.raises(
        FleetError, match=r"^instances\[1\] \(b\): flavor 'p2' does not fit on host 'h1'"
    ):
        HostTable.from_fleet(f)


def test_stated_placement_that_overcommits_a_cell_is_a_fleet_error():
    f = fleet(
        [host("h1", cells=2, pcpus=2, mem=4096)],
        [flavor("p2", vcpus=2, pinned=True)],
        [
            instance("a", "h1", "p2", numa=[(1, 2, 1024)]),
            instance("b", "h1", "p2", numa=[(1, 2, 1024)]),
        ],
    )
    with pytest.raises(
        FleetError,
        match=r"instances\[1\] \(b\): host 'h1' NUMA cell 1: pinned CPUs would be 4 of 2",
    ):
        HostTable.from_fleet(f)


@pytest.mark.parametrize(
    ("numa", "expected"),
    [
        ([(0, 1, 1024)], "numa placement must add up to the flavor's vcpus and memory"),
        ([(0, 2, 1000)], "numa placement must add up"),
    ],
)
def test_stated_placement_must_match_the_flavor(numa, expected):
    f = fleet(
        [host("h1", cells=2, pcpus=4, mem=4096)],
        [flavor("p2", vcpus=2, pinned=True)],
        [instance("a", "h1", "p2", numa=numa)],
    )
    with pytest.raises(FleetError, match=rf"^instances\[0\] \(a\): {expected}"):
        HostTable.from_fleet(f)


def test_stated_placement_for_a_floating_flavor_is_a_fleet_error():
    f = fleet(
        [host("h1", cells=2, mem=4096)],
        [flavor("s", vcpus=2)],
        [instance("a", "h1", "s", numa=[(0, 2, 1024)])],
    )
    with pytest.raises(FleetError, match="numa placement given for a flavor without a NUMA"):
        HostTable.from_fleet(f)


def test_host_pci_type_and_alias_types_become_columns():
    f = small_fleet()
    table = HostTable.from_fleet(f)
    assert table.device_types == ["gpu"]
    assert table.cell_cap[1, :, 4].tolist() == [1, 0]
    with pytest.raises(SpecError, match="unknown PCI alias or device type 'tpu'"):
        HostTable.from_fleet(f.model_copy(update={"flavors": [flavor("t", pci="tpu:1")]}))


def test_stated_placement_is_claimed_exactly():
    f = fleet(
        [host("h1", cells=2, pcpus=4, mem=4096)],
        [flavor("f", vcpus=4, mem=4096, pinned=True, numa=2, split="flexible", min_vcpus=1)],
        [instance("a", "h1", "f", numa=[(0, 3, 1024), (1, 1, 3072)])],
    )
    table = HostTable.from_fleet(f)
    alloc = table.allocations["a"]
    assert alloc.cell_use[:, C_PCPU].tolist() == [3, 1]
    assert alloc.cell_use[:, C_MEM].tolist() == [1024, 3072]
    assert np.array_equal(table.cell_free[0, :, C_PCPU], [1, 3])
