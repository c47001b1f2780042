"""Bad input to the CLI is one line on stderr naming the field, exit code 2, never a traceback:
fleet files with absurd numbers or broken server groups, sizing specs past the stated limit,
topology names the API could not address, and ports that are not TCP ports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from berth.cli.main import app
from berth.policy.demo import shipped_path
from berth.sim.fleets import MAX_SIZING_HOSTS
from berth.store.repo import Store

runner = CliRunner()

HOST = {"name": "h1", "numa_cells": [{"shared_cpus": 8, "memory_mb": 8192}]}
FLAVOR = {"name": "small", "vcpus": 1, "memory_mb": 512}


def _one_error(args: list[str], *needles: str) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _fleet(tmp_path: Path, data: dict[str, Any], name: str = "fleet.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("a.json", '{"hosts": [{"name": "h1", "numa_cells": [{"shared_cpus": 1e30, '),
        ("b.yaml", "hosts: [{name: h1, numa_cells: [{shared_cpus: 1.0e+30, "),
        ("c.yaml", "hosts: [{name: h1, numa_cells: [{shared_cpus: 1e30, "),
        ("d.yaml", "hosts: [{name: h1, numa_cells: [{shared_cpus: 1000000000000000000000, "),
        ("e.yaml", "hosts: [{name: h1, numa_cells: [{shared_cpus: 10000000, "),
        ("f.json", '{"hosts": [{"name": "h1", "numa_cells": [{"shared_cpus": true, '),
    ],
)
def test_absurd_cpu_counts_name_the_field(tmp_path: Path, name: str, text: str) -> None:
    close = '"memory_mb": 1024}]}]}' if name.endswith(".json") else "memory_mb: 1024}]}]"
    path = tmp_path / name
    path.write_text(text + close)
    _one_error(["validate", str(path)], "hosts[0].numa_cells[0].shared_cpus")


def test_huge_memory_is_refused_not_overflowed(tmp_path: Path) -> None:
    host = {"name": "h1", "numa_cells": [{"shared_cpus": 8, "memory_mb": 10**19}]}
    _one_error(["validate", _fleet(tmp_path, {"hosts": [host]})], "memory_mb")


def test_validate_reports_broken_anti_affinity(tmp_path: Path) -> None:
    second = {"id": "b", "host": "h1", "flavor": "small", "server_group": "web"}
    fleet: dict[str, Any] = {
        "hosts": [HOST, dict(HOST, name="h2")],
        "flavors": [FLAVOR],
        "server_groups": [{"id": "web", "policy": "anti-affinity"}],
        "instances": [
            {"id": "a", "host": "h1", "flavor": "small", "server_group": "web"},
            second,
        ],
    }
    _one_error(["validate", _fleet(tmp_path, fleet)], "instances[1].host", "'web'", "'h1'")
    second["host"] = "h2"
    ok = runner.invoke(app, ["validate", _fleet(tmp_path, fleet, "ok.json")])
    assert ok.exit_code == 0, ok.output


def test_validate_reports_broken_affinity(tmp_path: Path) -> None:
    fleet = {
        "hosts": [HOST, dict(HOST, name="h2")],
        "flavors": [FLAVOR],
        "server_groups": [{"id": "db", "policy": "affinity"}],
        "instances": [
            {"id": "a", "host": "h1", "flavor": "small", "server_group": "db"},
            {"id": "b", "host": "h2", "flavor": "small", "server_group": "db"},
        ],
    }
    _one_error(["validate", _fleet(tmp_path, fleet)], "instances[1].host", "'db'")


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "trace.csv"
    path.write_text("id,start,end,vcpus,memory_mb\nvm-1,0,10,2,4096\n")
    return str(path)


@pytest.mark.parametrize(
    "fleet", ["99999999999xstd-2s", f"{MAX_SIZING_HOSTS}xstd-2s+1xssd-2s", "1xstd-2s+1e9xssd-2s"]
)
def test_simulate_refuses_oversized_fleets(tmp_path: Path, fleet: str) -> None:
    args = ["simulate", "--trace", _trace(tmp_path), "-o", str(tmp_path / "o"), "--fleet", fleet]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "sizing spec" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"per_cluster": {"std-2s": 10**12}}, "per_cluster.std-2s"),
        ({"per_cluster": {"std-2s": True}}, "per_cluster must map host type"),
        (
            {"per_cluster": {}, "clusters": [{"idc": "a", "name": "c", "hosts": {"std-2s": "x"}}]},
            "clusters[0].hosts.std-2s",
        ),
        (
            {
                "per_cluster": {"std-2s": MAX_SIZING_HOSTS // 2},
                "clusters": [
                    {"idc": "a", "name": "c1"},
                    {"idc": "a", "name": "c2"},
                    {"idc": "a", "name": "c3"},
                ],
            },
            "3 cluster(s)",
        ),
    ],
)
def test_sizing_files_are_bounded(tmp_path: Path, body: dict[str, Any], field: str) -> None:
    sizing = tmp_path / "sizing.yaml"
    sizing.write_text(yaml.safe_dump({"kind": "sizing", **body}))
    args = ["simulate", "--trace", _trace(tmp_path), "-o", str(tmp_path / "o")]
    _one_error([*args, "--fleet", str(sizing)], field)


@pytest.mark.parametrize("port", ["99999", "0", "-1", "65536"])
def test_serve_refuses_a_port_out_of_range(tmp_path: Path, port: str) -> None:
    args = ["serve", "--port", port, "--data-dir", str(tmp_path / "d")]
    _one_error(args, "--port", port)
    assert not (tmp_path / "d").exists()


def test_topology_names_follow_the_api_identifier_rule(tmp_path: Path) -> None:
    data = yaml.safe_load(Path(shipped_path("demo-topology.yaml")).read_text())
    cluster = data["regions"][0]["idcs"][0]["clusters"][0]
    old = cluster["hosts"][0]["name"]
    cluster["hosts"][0]["name"] = "bad host name"
    for inst in cluster.get("instances", []):
        if inst["host"] == old:
            inst["host"] = "bad host name"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    db = f"sqlite:///{tmp_path / 'berth.db'}"
    _one_error(
        ["db", "load-topology", "--topology", str(bad), "--db", db],
        "regions[0].idcs[0].clusters[0].hosts[0].name",
        "'bad host name'",
    )
    store = Store.open(db)
    try:
        assert store.is_empty()
        assert store.list_flavors() == []
    finally:
        store.close()
