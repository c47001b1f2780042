"""`berth schedule` and `berth capacity --topology` through the real command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from berth.cli.main import app
from berth.policy.demo import POLICY_FILE, TOPOLOGY_FILE, shipped_path

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_schedule_prints_cluster_pool_variant_hosts():
    code, out, _ = run("schedule", "--region", "beijing", "--flavor", "v.c3.large", "-n", "2")
    assert code == 0
    assert "cluster" in out
    assert "pool" in out
    assert "variant" in out
    assert "evictions: none" in out


def test_schedule_json_with_explicit_files():
    code, out, _ = run(
        "schedule",
        "--topology",
        shipped_path(TOPOLOGY_FILE),
        "--policy",
        shipped_path(POLICY_FILE),
        "--region",
        "shanghai",
        "--flavor",
        "v.m3.2xlarge",
        "--business",
        "preemptible",
        "--user",
        "bigdata",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["ok"] is True
    assert data["candidates"] == ["numa2-flex", "numa2"]
    assert data["variant"] in ("numa2-flex", "numa2")
    assert len(data["instances"]) == 1


def test_schedule_failure_is_explained_with_exit_1():
    code, _, err = run("schedule", "--region", "sh-pd", "--flavor", "v.gn3.4xlarge")
    assert code == 1
    assert "flavor_not_offered" in err
    code, out, _ = run("schedule", "-r", "sh-pd", "--flavor", "v.gn3.4xlarge", "--json")
    assert code == 1
    assert json.loads(out)["step"] == "precheck"


def test_schedule_with_deployment_set():
    code, out, _ = run(
        "schedule", "-r", "beijing", "--flavor", "v.c3.large", "-n", "3", "-d", "new-set", "--json"
    )
    assert code == 0
    hosts = [i["host"] for i in json.loads(out)["instances"]]
    assert len(set(hosts)) == 3


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--region", "mars", "--flavor", "v.c3.large"], "unknown region or IDC 'mars'"),
        (["--region", "beijing", "--flavor", "nope"], "unknown flavor 'nope'"),
        (["--region", "beijing", "--flavor", "v.c3.large", "--policy", "/no/such"], "cannot read"),
    ],
)
def test_schedule_bad_input_is_one_line_exit_2(args, fragment):
    code, out, err = run("schedule", *args)
    assert code == 2
    assert fragment in err
    assert "Traceback" not in err + out
    assert len(err.strip().splitlines()) == 1


def test_schedule_bad_policy_field_named(tmp_path: Path):
    raw = yaml.safe_load(Path(shipped_path(POLICY_FILE)).read_text(encoding="utf-8"))
    raw["business"]["auto-scaling"]["variants"] = ["numa9"]
    bad = tmp_path / "policy.yaml"
    bad.write_text(yaml.safe_dump(raw), encoding="utf-8")
    code, _, err = run("schedule", "-r", "beijing", "--flavor", "v.c3.large", "--policy", str(bad))
    assert code == 2
    assert "business.auto-scaling.variants[0]: unknown variant 'numa9'" in err


@pytest.mark.parametrize("by", ["idc", "cluster", "pool", "host", "region", "flavor"])
def test_capacity_by_topology(by):
    code, out, _ = run(
        "capacity", "--topology", shipped_path(TOPOLOGY_FILE), "--by", by, "--flavor", "v.c3.large"
    )
    assert code == 0, out
    assert "Remaining capacity" in out


def test_capacity_by_topology_json_and_bad_by():
    code, out, _ = run(
        "capacity", "--topology", shipped_path(TOPOLOGY_FILE), "--by", "idc", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["by"] == "idc"
    assert "bj-yz" in data["counts"]
    assert "v.c3.large.numa1" in data["counts"]["bj-yz"]
    code, _, err = run("capacity", "--topology", shipped_path(TOPOLOGY_FILE), "--by", "zone")
    assert code == 2
    assert "--by" in err


def test_capacity_fleet_mode_unchanged():
    code, out, _ = run("capacity", "--by", "zone", "--flavor", "c3.large", "--json")
    assert code == 0
    assert json.loads(out)["by"] == "zone"
