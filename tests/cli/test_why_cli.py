"""`berth place --why` and `berth why-not` through Typer's runner on the shipped example fleets."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from berth.cli.main import app
from berth.core.why import Part, Scale, fold

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
FLEET = str(ROOT / "examples" / "fleet.yaml")
WHY_NOT = str(ROOT / "examples" / "why-not-fleet.yaml")


def test_place_why_json_explains_each_instance_and_adds_up() -> None:
    args = ["place", "--fleet", FLEET, "--flavor", "c3.large", "-n", "2", "--why", "--json"]
    result = runner.invoke(app, [*args, "--top", "4"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [w["instance"] for w in data["why"]] == [1, 2]
    for sel, why in zip(data["selections"], data["why"], strict=True):
        assert why["ranked"][0]["host"] == sel["host"]
        assert len(why["ranked"]) == 4
        scales = [Scale(**s) for s in why["scales"]]
        for cand in why["ranked"]:
            assert fold([Part(**p) for p in cand["parts"]], scales) == cand["score"]


def test_place_why_prints_the_table_and_the_deciding_weigher() -> None:
    result = runner.invoke(
        app, ["place", "--fleet", FLEET, "--flavor", "c3.4xlarge.numa1", "--why"]
    )
    assert result.exit_code == 0, result.output
    assert "decided by vcpu" in result.stdout
    assert "equal on all 10 candidates: soft_affinity, soft_anti_affinity" in result.stdout


def test_place_without_why_has_no_why() -> None:
    result = runner.invoke(app, ["place", "--fleet", FLEET, "--flavor", "c3.large", "--json"])
    assert "why" not in json.loads(result.stdout)


def test_why_not_lists_the_checked_ways_out() -> None:
    args = ["why-not", "--fleet", WHY_NOT, "--flavor", "m1.xlarge", "--preemptible", "batch"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "0/4 hosts fit" in result.stdout
    assert "1. enable_host (1 host): enable host h3; then fits on h3" in result.stdout
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert [o["kind"] for o in data["options"]] == [
        "enable_host",
        "migrate",
        "evict",
        "smaller_flavor",
    ]


def test_why_not_exit_codes() -> None:
    fits = runner.invoke(app, ["why-not", "--fleet", WHY_NOT, "--flavor", "m1.small"])
    assert fits.exit_code == 0
    assert "fits now" in fits.stdout
    bad = runner.invoke(app, ["why-not", "--fleet", WHY_NOT, "--flavor", "nope"])
    assert bad.exit_code == 2
    assert "nope" in bad.stderr
