"""`berth defrag plan` through Typer's runner on real fleet files and the real planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.cli.main import app
from berth.core.defrag import Plan, check_plan
from berth.core.table import HostTable
from berth.fleet.demo import demo_fleet_path
from berth.fleet.io import dump_fleet, load_fleet
from tests.builders import NOW, flavor, fleet, host, instance

runner = CliRunner()


@pytest.fixture
def fragmented(tmp_path: Path) -> Path:
    """Three 8-CPU hosts; a and b each hold one small VM, c two: two moves free two hosts."""
    path = tmp_path / "fleet.yaml"
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")]
    flavors = [
        flavor("small", vcpus=2, mem=2048),
        flavor("tiny", vcpus=1, mem=1024),
        flavor("large", vcpus=8, mem=8192),
    ]
    instances = [
        instance("s1", "a", "small"),
        instance("t1", "b", "tiny"),
        instance("m1", "c", "small").model_copy(update={"migratable": False}),
        instance("m2", "c", "small").model_copy(update={"migratable": False}),
    ]
    dump_fleet(fleet(hosts, flavors, instances).model_copy(update={"now": NOW}), path)
    return path


def plan_args(path: Path, *extra: str) -> list[str]:
    return ["defrag", "plan", "--fleet", str(path), *extra]


def test_plan_json_is_a_valid_plan(fragmented: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    args = plan_args(fragmented, "--flavor", "large", "--budget", "2", "--json", "--out", str(out))
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate(json.loads(result.stdout))
    assert [(m.instance_id, m.source, m.target) for m in plan.moves] == [
        ("t1", "b", "c"),
        ("s1", "a", "c"),
    ]
    assert (plan.before.capacity, plan.after.capacity) == ({"large": 0}, {"large": 2})
    assert Plan.model_validate_json(out.read_text()) == plan
    check_plan(HostTable.from_fleet(load_fleet(fragmented)), plan)


def test_plan_tables(fragmented: Path) -> None:
    args = plan_args(fragmented, "--flavor", "large", "--budget", "1", "--concurrent", "2")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "1 live migrations in 1 waves" in text
    assert "t1" in text
    assert "capacity large" in text
    assert "1 of 1" in text


def test_exact_reports_the_gap(fragmented: Path) -> None:
    args = plan_args(fragmented, "--flavor", "large", "--budget", "2", "--exact", "--json")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["exact"]["value"] == 2.0
    assert data["exact"]["optimal"] is True
    assert data["exact"]["gap"] == 0.0
    assert Plan.model_validate(data["plan"]).after.capacity == {"large": 2}
    table = runner.invoke(app, args[:-1])
    assert "gap to the bound" in table.stdout


def test_empty_hosts_and_drain(fragmented: Path) -> None:
    args = plan_args(fragmented, "--target", "empty-hosts", "--drain", "a", "--budget", "3")
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate(json.loads(result.stdout))
    assert plan.after.drained_left == 0
    assert all(m.target != "a" for m in plan.moves)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--flavor", "nope", "--budget", "1"], "--flavor: unknown flavor 'nope'"),
        (["--flavor", "large", "--drain", "zz", "--budget", "1"], "--drain: unknown host 'zz'"),
        (["--budget", "1"], "--flavor: the capacity objective needs at least one flavor"),
        (["--target", "tidy", "--budget", "1"], "--target: 'tidy' is not one of"),
        (["--flavor", "large", "--budget", "-1"], "--budget:"),
        (["--flavor", "large", "--budget", "1", "--concurrent", "0"], "--concurrent:"),
        (["--flavor", "large", "--budget", "1", "--profile", "x"], "unknown profile 'x'"),
        (["--flavor", "large", "--weight", "1", "--weight", "2", "--budget", "1"], "--weight:"),
    ],
)
def test_bad_input_names_the_option(fragmented: Path, extra: list[str], message: str) -> None:
    result = runner.invoke(app, plan_args(fragmented, *extra))
    assert result.exit_code == 2
    assert message in result.stderr.replace("\n", " ")


def test_missing_fleet_file_is_named(tmp_path: Path) -> None:
    result = runner.invoke(app, plan_args(tmp_path / "none.yaml", "--flavor", "x", "--budget", "1"))
    assert result.exit_code == 2
    assert "none.yaml" in result.stderr


def test_keep_trait_keeps_moves_in_their_pool(tmp_path: Path) -> None:
    """c (the fullest host) is in another pool: with both pool traits kept, the small VMs
    consolidate between a and b instead of moving to c."""
    path = tmp_path / "pools.yaml"
    pool = {"a": "CUSTOM_POOL_A", "b": "CUSTOM_POOL_A", "c": "CUSTOM_POOL_B"}
    hosts = [host(h, vcpus=8, mem=8192, traits=[pool[h]]) for h in ("a", "b", "c")]
    flavors = [flavor("small", vcpus=2, mem=2048), flavor("large", vcpus=8, mem=8192)]
    instances = [
        instance("s1", "a", "small"),
        instance("s2", "b", "small"),
        instance("m1", "c", "small").model_copy(update={"migratable": False}),
    ]
    dump_fleet(fleet(hosts, flavors, instances).model_copy(update={"now": NOW}), path)
    args = plan_args(path, "--flavor", "large", "--budget", "2", "--json")
    free = Plan.model_validate(json.loads(runner.invoke(app, args).stdout))
    assert any(pool[m.source] != pool[m.target] for m in free.moves)
    kept_args = [*args, "--keep-trait", "CUSTOM_POOL_A", "--keep-trait", "CUSTOM_POOL_B"]
    result = runner.invoke(app, kept_args)
    assert result.exit_code == 0, result.output
    kept = Plan.model_validate(json.loads(result.stdout))
    assert kept.target.keep_traits == ("CUSTOM_POOL_A", "CUSTOM_POOL_B")
    assert kept.moves
    assert all(pool[m.source] == pool[m.target] for m in kept.moves)
    assert kept.after.capacity["large"] > kept.before.capacity["large"]


def test_without_fleet_the_demo_fleet_is_planned() -> None:
    result = runner.invoke(
        app, ["defrag", "plan", "--flavor", "c3.8xlarge.flex", "--budget", "3", "--json"]
    )
    assert result.exit_code == 0, result.output
    plan = Plan.model_validate(json.loads(result.stdout))
    assert len(plan.moves) == 3
    assert plan.after.capacity["c3.8xlarge.flex"] > plan.before.capacity["c3.8xlarge.flex"]
    check_plan(HostTable.from_fleet(load_fleet(demo_fleet_path())), plan)


def admit_args(path: Path, *extra: str) -> list[str]:
    return ["defrag", "admit", "--fleet", str(path), *extra]


def test_admit_shows_the_migration_that_makes_room(fragmented: Path) -> None:
    result = runner.invoke(app, admit_args(fragmented, "--flavor", "large", "--json"))
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["fits_on"] == []
    admission = data["admission"]
    # b misses one CPU: its tiny VM moves where it fits tightest (c has 4 CPUs left, a 6)
    assert admission["host"] == "b"
    assert [(m["instance_id"], m["source"], m["target"]) for m in admission["moves"]] == [
        ("t1", "b", "c")
    ]
    text = runner.invoke(app, admit_args(fragmented, "--flavor", "large"))
    assert text.exit_code == 0, text.output
    assert "then large fits on b" in text.output


def test_admit_when_it_fits_already_or_cannot(fragmented: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, admit_args(fragmented, "--flavor", "small"))
    assert result.exit_code == 0, result.output
    assert "fits without migrations on 3 host(s)" in result.output
    path = tmp_path / "full.yaml"
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b")]
    flavors = [flavor("small", vcpus=2, mem=2048), flavor("large", vcpus=8, mem=8192)]
    instances = [instance("s1", "a", "small"), instance("l1", "b", "large")]
    dump_fleet(fleet(hosts, flavors, instances).model_copy(update={"now": NOW}), path)
    result = runner.invoke(app, admit_args(path, "--flavor", "large", "--json"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["admission"] is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--flavor", "huge"], "--flavor: unknown flavor 'huge'"),
        (["--flavor", "large", "--migrations", "9"], "--migrations"),
        (["--flavor", "large", "--profile", "tetris"], "--profile: unknown profile"),
    ],
)
def test_admit_bad_input_names_the_option(fragmented: Path, extra: list[str], message: str) -> None:
    result = runner.invoke(app, admit_args(fragmented, *extra))
    assert result.exit_code == 2
    assert message in result.output
