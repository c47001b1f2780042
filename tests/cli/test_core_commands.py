"""The `berth` commands of the placement core, through Typer's runner (real files, real core)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from berth.cli.main import app
from berth.fleet.io import dump_fleet
from tests.builders import NOW, flavor, fleet, host

runner = CliRunner()


@pytest.fixture
def small_fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    hosts = [
        host("a", cells=2, pcpus=8, mem=16384, az="az1"),
        host("b", cells=2, pcpus=4, mem=16384, az="az2"),
        host("off", cells=2, pcpus=8, mem=16384, enabled=False),
    ]
    flavors = [
        flavor("p4", vcpus=4, mem=4096, pinned=True, numa=1),
        flavor("huge", vcpus=64, mem=4096, pinned=True, numa=1),
    ]
    dump_fleet(fleet(hosts, flavors).model_copy(update={"now": NOW}), path)
    return path


def test_place_prints_hosts_and_alternates_as_json(small_fleet: Path) -> None:
    result = runner.invoke(
        app, ["place", "--fleet", str(small_fleet), "--flavor", "p4", "--count", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s["instance_id"] for s in data["selections"]] == ["p4-0-0", "p4-0-1"]
    assert {s["host"] for s in data["selections"]} <= {"a", "b"}
    for s in data["selections"]:
        assert s["host"] not in s["alternates"]


def test_place_failure_explains_and_exits_1(small_fleet: Path) -> None:
    result = runner.invoke(app, ["place", "--fleet", str(small_fleet), "--flavor", "huge"])
    assert result.exit_code == 1
    assert "0/3 hosts fit" in result.stderr
    assert "1 disabled" in result.stderr
    json_result = runner.invoke(
        app, ["place", "--fleet", str(small_fleet), "--flavor", "huge", "--json"]
    )
    assert json_result.exit_code == 1
    data = json.loads(json_result.stdout)
    assert data["error"] == "no_valid_host"
    assert sum(r["hosts"] for r in data["reasons"]) == 3


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["place", "--flavor", "nope"], "unknown flavor 'nope'"),
        (["place", "--flavor", "p4", "--group", "ghost"], "unknown server group 'ghost'"),
        (["capacity", "--by", "rack"], "--by: must be flavor, zone, aggregate or host"),
        (["capacity", "--flavor", "nope"], "unknown flavor 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(small_fleet: Path, args: list[str], needle: str) -> None:
    result = runner.invoke(app, [*args, "--fleet", str(small_fleet)])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr
    assert "Traceback" not in result.output


def test_bad_fleet_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"hosts": [{"name": "h", "numa_cells": [{"memory_mb": -1}]}]}))
    result = runner.invoke(app, ["capacity", "--fleet", str(path)])
    assert result.exit_code == 2
    assert "hosts[0].numa_cells[0].memory_mb" in result.stderr
    missing = runner.invoke(app, ["validate", str(tmp_path / "missing.yaml")])
    assert missing.exit_code == 2
    assert "cannot read" in missing.stderr


def test_capacity_counts_by_flavor_zone_and_host(small_fleet: Path) -> None:
    base = ["capacity", "--fleet", str(small_fleet), "--json"]
    total = json.loads(runner.invoke(app, base).stdout)
    # a: 2 cells x 8 pinned / 4 = 4; b: 2 x 4 / 4 = 2; off: disabled
    assert total["counts"] == {"fleet": {"huge": 0, "p4": 6}}
    zones = json.loads(runner.invoke(app, [*base, "--by", "zone"]).stdout)
    assert zones["counts"]["az1"]["p4"] == 4
    assert zones["counts"]["az2"]["p4"] == 2
    hosts = json.loads(runner.invoke(app, [*base, "--by", "host", "--flavor", "p4"]).stdout)
    assert hosts["counts"] == {"a": {"p4": 4}, "b": {"p4": 2}, "off": {"p4": 0}}


def test_validate_and_plugins_and_demo() -> None:
    plugins = json.loads(runner.invoke(app, ["plugins", "--json"]).stdout)
    assert "numa_topology" in plugins["filters"]
    assert "fragmentation" in plugins["weighers"]
    demo = runner.invoke(app, ["demo"])
    assert demo.exit_code == 0, demo.output
    assert "Remaining capacity" in demo.stdout


def test_seed_makes_placement_repeatable(small_fleet: Path) -> None:
    args = ["place", "--fleet", str(small_fleet), "--flavor", "p4", "--seed", "5", "--json"]
    first = json.loads(runner.invoke(app, args).stdout)
    second = json.loads(runner.invoke(app, args).stdout)
    assert first == second


def test_demo_load_fills_an_empty_service_database_once(tmp_path: Path) -> None:
    first = runner.invoke(app, ["demo", "load", "--data-dir", str(tmp_path)])
    assert first.exit_code == 0, first.output
    assert "'hosts': 270" in first.stdout
    again = runner.invoke(app, ["demo", "load", "--data-dir", str(tmp_path)])
    assert again.exit_code == 2
    assert "already holds hosts" in again.stderr
