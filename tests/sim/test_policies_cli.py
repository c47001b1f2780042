"""Policies (names, files, lean filters) and the `berth simulate` command end to end."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from berth.cli.main import app
from berth.core.errors import BerthError
from berth.core.model import Fleet
from berth.sim.policies import PolicyError, lean_config, resolve, resolve_all
from berth.sim.replay import ReplayOptions, Simulation
from berth.sim.synthetic import SyntheticConfig, generate
from tests.builders import host

runner = CliRunner()

TRACE = """id,start,end,vcpus,memory_mb,business
a,0,3600,2,2048,on-demand
b,60,,4,4096,on-demand
c,120,7200,2,2048,preemptible
d,180,,8,8192,on-demand
e,4000,,4,4096,auto-scaling
"""


def test_named_policies_and_aliases():
    assert resolve("first-fit").name == "first_fit"
    assert [p.name for p in resolve_all(["nova", "best_fit", "worst-fit", "berth"])] == [
        "nova",
        "best_fit",
        "worst_fit",
        "berth",
    ]
    with pytest.raises(PolicyError, match="unknown policy 'tetris'"):
        resolve("tetris")
    with pytest.raises(PolicyError, match="listed twice"):
        resolve_all(["nova", "nova"])


def test_policy_files(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("weighers:\n  - {name: ram, weight: -2.0}\n")
    mine = resolve(str(p))
    assert mine.name == "mine"
    assert mine.lean
    p.write_text("filters: [ram, vcpu, num_instances]\nweighers: [{name: bogus}]\n")
    with pytest.raises(BerthError, match="bogus"):
        resolve(str(p))
    p.write_text("filters: [ram, vcpu, num_instances]\n")
    assert not resolve(str(p)).lean
    p.write_text("weighers: 3\n")
    with pytest.raises(PolicyError, match=r"mine\.yaml: weighers"):
        resolve(str(p))


def test_lean_filters_keep_what_the_trace_needs():
    trace = generate(SyntheticConfig(seed=1, days=0.05, history_days=0.5))
    fleet = Fleet(hosts=[host("h", cells=2, vcpus=48, mem=262144, az="bj-a")], now=0.0)
    sim = Simulation(trace, fleet, ReplayOptions(bound=False))
    cfg = lean_config(resolve("nova"), sim.base, sim.flavors_used, sim.zoned, sim.now)
    assert cfg.filters == [
        "availability_zone",
        "traits",
        "ram",
        "vcpu",
        "disk",
        "numa_topology",
        "server_group_anti_affinity",
    ]
    # no soft groups, no PCI devices: those weighers dropped
    assert [w.name for w in cfg.weighers] == ["nova_ram", "nova_cpu", "nova_disk", "nova_io_ops"]


@pytest.mark.slow
def test_simulate_writes_report_metrics_and_plots(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--fleet",
            "2xazure-2",
            "--policy",
            "nova,first_fit,berth",
            "--out",
            str(out),
            "--sample-every",
            "600",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "first_fit" in result.output
    for name in ("report.md", "metrics.json", "utilisation.png", "acceptance.png"):
        assert (out / name).exists(), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert [p["policy"] for p in metrics["policies"]] == ["nova", "first_fit", "berth"]
    assert metrics["policies"][0]["acceptance"]["arrivals"] == 5
    report = (out / "report.md").read_text()
    assert "| acceptance (in window) |" in report
    assert "![latency.png](latency.png)" in report
    # per window and business type (the hosts are too small for any of these requests): the
    # first window has on-demand and preemptible arrivals, the last one the auto-scaling one
    table = report.split("## Acceptance per window by business type")[1].split("##")[0]
    lines = table.strip().splitlines()
    policies = ("nova", "first_fit", "berth")
    business = ("on-demand", "auto-scaling", "preemptible")
    assert (
        lines[0]
        == "| "
        + " | ".join(["window start", *(f"{p} {b}" for b in business for p in policies)])
        + " |"
    )
    assert lines[2].split(" | ")[1:] == ["0.00%"] * 3 + ["–"] * 3 + ["0.00%"] * 2 + ["0.00% |"]
    assert lines[-1].split(" | ")[1:] == ["–"] * 3 + ["0.00%"] * 3 + ["–"] * 2 + ["– |"]


def test_simulate_json_and_limit(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "\n".join(
            json.dumps({"id": f"v{i}", "start": i, "vcpus": 1, "memory_mb": 512}) for i in range(10)
        )
    )
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--fleet",
            "1xazure-2",
            "--policy",
            "best_fit",
            "--out",
            str(tmp_path / "o"),
            "--limit",
            "4",
            "--json",
            "--no-plots",
            "--no-bound",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["policies"][0]["acceptance"]["arrivals"] == 4
    assert not (tmp_path / "o" / "latency.png").exists()


def test_simulate_bad_trace_is_one_line_naming_it(tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("id,start,vcpus,memory_mb\na,5,1,512\nb,3,1,512\n")
    result = runner.invoke(
        app, ["simulate", "--trace", str(trace), "--fleet", "1xazure-2", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert f"{trace}:3: start 3 is before the previous row's start 5" in result.output
    assert "Traceback" not in result.output


def test_simulate_needs_a_fleet_for_a_file_and_a_known_policy(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--fleet is required" in result.output
    result = runner.invoke(
        app,
        ["simulate", "--trace", str(trace), "--fleet", "1xazure-2", "--policy", "x", "--out", "o"],
    )
    assert result.exit_code == 2
    assert "unknown policy 'x'" in result.output
