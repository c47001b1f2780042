"""Admission by migration in the replay: a request that fits nowhere is placed after one live
migration makes room; Berth's default admits, its placement alone and the classic policies do
not; the setting is validated at the edges (policy files, --admit-migrations)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from typer.testing import CliRunner

from berth.cli.main import app
from berth.core.model import Fleet
from berth.sim.evictions import default_evictor
from berth.sim.policies import PolicyError, resolve, with_admission
from berth.sim.replay import ACCEPTED, REJECTED, ReplayOptions, Simulation
from berth.sim.report import summarize
from berth.sim.trace import Business, Trace, build_trace
from berth.sim.types import PolicyRun
from tests.builders import flavor, host

OD, PRE = int(Business.ON_DEMAND), int(Business.PREEMPTIBLE)
INF = math.inf
SMALL = flavor("small", vcpus=1, mem=1024)
TWO = flavor("two", vcpus=2, mem=2048)
BIG = flavor("big", vcpus=4, mem=4096)


def fleet() -> Fleet:
    return Fleet(hosts=[host("h0", vcpus=4, mem=4096), host("h1", vcpus=4, mem=4096)], now=0.0)


def trace(c_business: int = OD) -> Trace:
    return build_trace("admit", _rows(c_business), [SMALL, TWO, BIG], window=10.0, horizon=4.0)


def _rows(c_business: int = OD) -> list[tuple[str, float, float, str, int]]:
    return [
        ("a", 0.0, 2.5, "small", OD),  # h0
        ("b", 0.5, INF, "small", OD),  # h0
        ("x", 1.0, INF, "two", OD),  # h0, now full
        ("c", 2.0, INF, "small", c_business),  # h1 (3 left)
        # a leaves at 2.5: h0 has 1 vCPU free, h1 3; "d" needs 4 and fits nowhere, but moving
        # c from h1 to h0 empties h1
        ("d", 3.0, INF, "big", OD),
    ]


def replay(policy: str, migrations: int | None = None, **kw: Any) -> tuple[Simulation, PolicyRun]:
    sim = Simulation(trace(**kw.pop("trace", {})), fleet(), ReplayOptions(bound=False, **kw))
    chosen = resolve(policy)
    if migrations is not None:
        chosen = with_admission(chosen, migrations)
    return sim, sim.run(chosen)


def hosts(sim: Simulation, run: PolicyRun) -> list[str | None]:
    return [sim.base.names[r] if r >= 0 else None for r in run.host]


def test_one_migration_admits_the_request_that_fits_nowhere() -> None:
    sim, run = replay("first_fit", 1)
    assert run.outcome.tolist() == [ACCEPTED] * 5
    assert hosts(sim, run) == ["h0", "h0", "h0", "h1", "h1"]  # where each was placed
    assert run.admitted.tolist() == [0, 1]  # window 0 is the warm-up
    assert run.admission_moves.tolist() == [0, 1]
    assert run.failures["on-demand"] == {}
    # five arrivals, one departure, one migration
    assert run.events == 5 + 1 + 1
    s = summarize(sim, run)
    assert s["performance"]["admission_search_us_mean"] > 0
    assert s["admission"] == {
        "max_migrations": 1,
        "requests": 1,
        "migrations": 1,
        "by_window": [1],
        "searches": 1,
        "initial": {"requests": 0, "migrations": 0},
    }
    assert s["acceptance"]["overall"] == 1.0


def test_a_common_warm_up_places_the_initial_vms_without_migrations() -> None:
    # the window opens at 3.5: 'd' (t=3) is an initial VM, placed by the warm-up policy
    rows = [(r, t0, t1, f, b) for r, t0, t1, f, b in _rows()]
    early = build_trace("warm", rows, [SMALL, TWO, BIG], window=10.0, horizon=4.0)
    early = replace(early, window_start=3.5)
    own = Simulation(early, fleet(), ReplayOptions(bound=False)).run(resolve("berth"))
    assert own.outcome[-1] == ACCEPTED
    assert own.admitted.tolist() == [1, 0]  # admitted at warm-up, by the policy itself
    common = Simulation(
        early, fleet(), ReplayOptions(bound=False, warmup=resolve("first_fit"))
    ).run(resolve("berth"))
    assert common.outcome[-1] == REJECTED
    assert common.admitted.sum() == 0


def test_without_admission_the_request_is_rejected() -> None:
    sim, run = replay("first_fit")
    assert run.outcome.tolist() == [ACCEPTED] * 4 + [REJECTED]
    assert run.admitted.sum() == 0
    assert run.admission_moves.sum() == 0
    assert summarize(sim, run)["admission"] is None


def test_migration_comes_before_eviction() -> None:
    pytest.importorskip("berth.policy.preemption")
    # c is preemptible: without admission the evictor kills it to make room for d
    _, evicting = replay("first_fit", evictor=default_evictor(), trace={"c_business": PRE})
    assert evicting.evictions == 1
    _, moving = replay("first_fit", 1, evictor=default_evictor(), trace={"c_business": PRE})
    assert moving.evictions == 0
    assert moving.outcome.tolist() == [ACCEPTED] * 5
    assert moving.admitted.sum() == 1


def test_berth_admits_by_one_migration_and_its_placement_alone_does_not() -> None:
    assert resolve("berth").admission_migrations == 1
    placement = resolve("berth-placement")
    assert placement.admission_migrations == 0
    assert placement.config == resolve("berth").config
    for classic in ("nova", "first_fit", "best_fit", "worst_fit"):
        assert resolve(classic).admission_migrations == 0
    _, run = replay("berth")
    assert run.outcome.tolist()[-1] == ACCEPTED
    _, run = replay("berth-placement")
    assert run.outcome.tolist()[-1] == REJECTED


def test_with_admission_renames_only_a_changed_policy() -> None:
    assert with_admission(resolve("first_fit"), 1).name == "first_fit+admit1"
    assert with_admission(resolve("berth"), 0).name == "berth-noadmit"
    assert with_admission(resolve("berth"), 1).name == "berth"
    with pytest.raises(PolicyError, match="--admit-migrations: must be a whole number"):
        with_admission(resolve("berth"), 9)


@pytest.mark.parametrize("value", ["-1", "5", "two", "true", "1.5"])
def test_policy_file_admission_is_validated(tmp_path: Any, value: str) -> None:
    p = tmp_path / "mine.yaml"
    p.write_text(f"weighers: [{{name: ram, weight: -1.0}}]\nadmission_migrations: {value}\n")
    with pytest.raises(PolicyError, match=r"mine\.yaml: admission_migrations: must be"):
        resolve(str(p))


def test_policy_file_admission(tmp_path: Any) -> None:
    p = tmp_path / "mine.yaml"
    p.write_text("weighers: [{name: first_fit, weight: 1.0}]\nadmission_migrations: 2\n")
    mine = resolve(str(p))
    assert mine.admission_migrations == 2
    assert [w.name for w in mine.config.weighers] == ["first_fit"]


def test_cli_admit_migrations(tmp_path: Any) -> None:
    rows = "id,start,end,vcpus,memory_mb,business\n" + "".join(
        f"v{i},{i},,1,512,on-demand\n" for i in range(6)
    )
    path = tmp_path / "t.csv"
    path.write_text(rows)

    def simulate(out: str, *extra: str) -> Any:
        base = ["simulate", "--trace", str(path), "--fleet", "1xazure-2"]
        return CliRunner().invoke(app, [*base, "--out", str(tmp_path / out), *extra])

    result = simulate(
        "o",
        "--policy",
        "first_fit,berth",
        "--admit-migrations",
        "2",
        "--json",
        "--no-plots",
        "--no-bound",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    names = [p["policy"] for p in data["policies"]]
    assert names == ["first_fit+admit2", "berth+admit2"]
    assert all(p["admission"]["max_migrations"] == 2 for p in data["policies"])
    bad = simulate("b", "--admit-migrations", "7")
    assert bad.exit_code == 2
    assert "--admit-migrations" in bad.output
