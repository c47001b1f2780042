"""Regression tests for the defragmentation reproductions (small fleets in tests/defrag/data):
the planner finds the moves a greedy finds, chooses target cells by the objective, counts the
hosts capacity counts; the simulator survives an arrival on a report-window boundary; hosts
without heartbeats are explained; `--config` reaches the offline planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.cli.main import app
from berth.core.config import profile
from berth.core.defrag import Budget, Objective, Target, check_plan, plan_defrag
from berth.core.engine import FilterScheduler
from berth.core.fragmentation import fragmentation_rate
from berth.core.host_state import unavailable_hosts
from berth.core.table import HostTable
from berth.fleet.io import load_fleet
from berth.sim.policies import resolve
from berth.sim.replay import ReplayOptions, Simulation
from berth.sim.tracefile import read_trace
from berth.solvers.defrag_exact import exact_optimum, plan_value

DATA = Path(__file__).parent / "data"
SCHED = FilterScheduler.from_config(profile("berth"))
runner = CliRunner()


def load(name: str) -> tuple[HostTable, float]:
    fleet = load_fleet(DATA / name)
    assert fleet.now is not None
    return HostTable.from_fleet(fleet), fleet.now


def big16(budget: int, objective: Objective = Objective.CAPACITY) -> tuple[Target, Budget]:
    return Target(objective=objective, flavors=("big16",)), Budget(max_migrations=budget)


@pytest.mark.parametrize("budget", [1, 2, 3])
def test_subset_finds_the_move_the_largest_vm_hid(budget: int) -> None:
    """On ties the old planner tried the host's largest VM, gained nothing and gave up."""
    table, now = load("subset.yaml")
    target, limits = big16(budget)
    plan = plan_defrag(table, target, limits, scheduler=SCHED, now=now)
    check_plan(table, plan, scheduler=SCHED, now=now)
    assert plan.before.capacity["big16"] == 2
    assert plan.after.capacity["big16"] == 3
    assert [(m.instance_id, m.target) for m in plan.moves] == [("mover", "T")]
    best = exact_optimum(table, target, limits, scheduler=SCHED, now=now, time_limit=10)
    assert best.optimal
    assert plan_value(plan) == best.value == 3


def test_subset_pinned_agrees() -> None:
    table, now = load("subset-pinned.yaml")
    plan = plan_defrag(table, *big16(1), scheduler=SCHED, now=now)
    assert plan.after.capacity["big16"] == 3


def test_cellchoice_lands_on_the_cell_the_objective_wants() -> None:
    """The moved VM goes to the cell that keeps the target's slot, not its own best fit."""
    table, now = load("cellchoice.yaml")
    plan = plan_defrag(table, *big16(1), scheduler=SCHED, now=now)
    check_plan(table, plan, scheduler=SCHED, now=now)
    (move,) = plan.moves
    assert (move.instance_id, move.target) == ("mover", "T")
    assert move.cell_use[0][0] == 0  # not the tight cell 0
    assert move.cell_use[1][0] == 8  # but cell 1, where 16 stay free
    assert plan.after.capacity["big16"] == 3
    after, _ = load("cellchoice-moved.yaml")
    assert SCHED.capacity(after, "big16", now).sum() == 3
    assert plan.after.fragmentation["big16"] == pytest.approx(
        fragmentation_rate(after, "big16"), abs=1e-12
    )


def test_fragment_rate_target_on_cellchoice() -> None:
    table, now = load("cellchoice.yaml")
    target, limits = big16(1, Objective.FRAGMENT_RATE)
    plan = plan_defrag(table, target, limits, scheduler=SCHED, now=now)
    assert plan.before.fragmentation["big16"] == pytest.approx(1 / 3)
    assert plan.after.fragmentation["big16"] == 0.0


def test_disabled_host_counts_nowhere() -> None:
    """Capacity, fragmentation and empty hosts all leave the disabled host out."""
    table, now = load("disabled.yaml")
    plan = plan_defrag(table, *big16(1), scheduler=SCHED, now=now)
    assert plan.before.capacity["big16"] == 0
    assert plan.before.fragmentation["big16"] == 1.0  # host A: 8 + 8 free, no 16-slot
    assert plan.before.empty_hosts == 0  # B is empty but disabled
    assert fragmentation_rate(table, "big16") == 1.0
    args = ["defrag", "plan", "--fleet", str(DATA / "disabled.yaml"), "--flavor", "big16"]
    result = runner.invoke(app, [*args, "--budget", "1"])
    assert result.exit_code == 0, result.output
    assert "100.0%" in result.stdout
    assert "disabled ('compute' filter) (B)" in result.stderr


def test_simulator_arrival_on_a_window_boundary(tmp_path: Path) -> None:
    trace = read_trace(DATA / "boundary.csv")
    fleet = load_fleet(DATA / "tiny-fleet.yaml")
    sim = Simulation(trace, fleet, ReplayOptions(bound=False))
    run = sim.run(resolve("first_fit"))
    assert run.decisions == 2
    assert int(run.arrivals.sum()) == 2  # every arrival lands in a window
    args = ["simulate", "--trace", str(DATA / "boundary.csv")]
    args += ["--fleet", str(DATA / "tiny-fleet.yaml"), "--out", str(tmp_path), "--no-bound"]
    args += ["--policy", "first_fit", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


def test_hosts_without_heartbeat_are_explained(tmp_path: Path) -> None:
    text = (DATA / "disabled.yaml").read_text().replace("last_heartbeat: 1700000000, ", "")
    path = tmp_path / "silent.yaml"
    path.write_text(text)
    table, now = load_path(path)
    notes = unavailable_hosts(SCHED, table, now)
    assert [(n.code, n.hosts) for n in notes] == [("host_disabled", ("B",)), ("host_down", ("A",))]
    assert "no last_heartbeat" in notes[1].reason
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0
    assert "no last_heartbeat" in result.stderr
    result = runner.invoke(
        app, ["defrag", "plan", "--fleet", str(path), "--flavor", "big16", "--budget", "1"]
    )
    assert result.exit_code == 0
    assert "1 of 2 hosts count no capacity: never reported a heartbeat" in result.stderr


def load_path(path: Path) -> tuple[HostTable, float]:
    fleet = load_fleet(path)
    assert fleet.now is not None
    return HostTable.from_fleet(fleet), fleet.now


def test_defrag_plan_takes_a_scheduler_configuration(tmp_path: Path) -> None:
    """A configuration without the compute filter counts the disabled-and-silent hosts; one
    naming an unknown filter is refused with the file's name."""
    config = tmp_path / "sched.yaml"
    config.write_text("filters: [ram, vcpu, numa_topology]\n")
    args = ["defrag", "plan", "--fleet", str(DATA / "disabled.yaml"), "--flavor", "big16"]
    result = runner.invoke(app, [*args, "--budget", "1", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["before"]["capacity"]["big16"] == 2  # B (disabled) counts without the filter
    bad = tmp_path / "bad.yaml"
    bad.write_text("filters: [no_such_filter]\n")
    result = runner.invoke(app, [*args, "--budget", "1", "--config", str(bad)])
    assert result.exit_code == 2
    assert "no_such_filter" in result.stderr


def test_fragment_rate_target_on_the_command_line() -> None:
    """One reference flavor, no weights; the plan moves the VM and the rate drops to 0."""
    base = ["defrag", "plan", "--fleet", str(DATA / "cellchoice.yaml"), "--budget", "1"]
    result = runner.invoke(app, [*base, "--target", "fragment-rate", "--flavor", "big16"])
    assert result.exit_code == 0, result.output
    assert "33.3%" in result.stdout
    assert "0.0%" in result.stdout
    two = [*base, "--target", "fragment-rate", "--flavor", "big16", "--flavor", "small8"]
    result = runner.invoke(app, two)
    assert result.exit_code == 2
    assert "--flavor: the fragment-rate target takes exactly one reference flavor" in result.stderr
    args = [*base, "--target", "fragment-rate", "--flavor", "big16", "--search-seconds", "30"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["after"]["capacity"] == {"big16": 3}
