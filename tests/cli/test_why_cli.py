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


def test_schedule_why_equals_core_why_in_the_chosen_pool() -> None:
    """`berth schedule --why --json` on the demo policy: each instance's breakdown is what
    `core.why` gives for the same decision (the scheduler restricted to the chosen pool, the
    cluster's table, the same ids and seed); the text output prints the tables."""
    from berth.cli.schedule import load_engine
    from berth.core.request import RequestSpec
    from berth.core.why import explain_placement
    from berth.policy.restrict import restricted

    args = ["schedule", "-r", "beijing", "--flavor", "v.c3.large", "-n", "2", "--why"]
    result = runner.invoke(app, [*args, "--json", "--top", "4", "--seed", "5"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    engine, now = load_engine(None, None)
    cluster = engine.topology.clusters[data["cluster"]]
    traits = tuple(engine.catalogue.pools[data["pool"]].traits)
    ids = tuple(i["id"] for i in data["instances"])
    request = RequestSpec(flavor=data["flavor"], num_instances=2, instance_ids=ids, seed=5)
    scheduler = restricted(engine.scheduler, cluster.pool_mask(traits), "not in the pool")
    assert now is not None
    _, expected = explain_placement(scheduler, cluster.table, request, now, 4)
    assert data["why"] == json.loads(json.dumps([w.to_dict() for w in expected]))
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert expected[0].summary().split(":")[0] in text.stdout  # "vm-... -> host (N candidates)"
    assert "= part" in text.stdout
