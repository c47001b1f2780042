"""Periodic defragmentation in the replay: a run that consolidates makes a later large request
fit that fails without it; budgets, records and determinism; the option parsers."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from berth.core.model import Fleet
from berth.sim.defrag import DefragOptionError, PeriodicDefrag, parse_budget, parse_interval
from berth.sim.policies import resolve
from berth.sim.replay import ACCEPTED, EVICTED, REJECTED, ReplayOptions, Simulation
from berth.sim.report import summarize
from berth.sim.trace import Business, Trace, build_trace
from tests.builders import flavor, host

OD, PRE = int(Business.ON_DEMAND), int(Business.PREEMPTIBLE)
INF = math.inf


def fleet() -> Fleet:
    return Fleet(hosts=[host("h0", vcpus=4, mem=4096), host("h1", vcpus=4, mem=4096)], now=0.0)


def fragmenting_trace(before_big: Sequence[tuple[str, float, float, str, int]] = ()) -> Trace:
    """First fit fills h0 with a-d, e goes to h1; a and b leave: 2 free on h0, 3 on h1, so the
    4-vCPU 'big' at t=10 fits nowhere unless e moves to h0 (one migration empties h1).
    `before_big`: rows inserted before 'big'."""
    small = flavor("small", vcpus=1, mem=1024)
    big = flavor("big", vcpus=4, mem=4096)
    rows = [
        ("a", 0.0, 5.0, "small", OD),
        ("b", 1.0, 5.0, "small", OD),
        ("c", 2.0, INF, "small", OD),
        ("d", 3.0, INF, "small", PRE),
        ("e", 4.0, INF, "small", PRE),
        *before_big,
        ("big", 10.0, INF, "big", OD),
    ]
    return build_trace("frag", rows, [small, big], window=12.0, horizon=12.0)


def simulate(defrag: PeriodicDefrag | None, seed: int = 0):
    sim = Simulation(
        fragmenting_trace(),
        fleet(),
        ReplayOptions(seed=seed, sample_every=3.0, track_flavors=["big"], bound=False),
    )
    periodic = [defrag] if defrag is not None else []
    return sim, sim.run(resolve("first_fit"), periodic=periodic)


def test_without_defragmentation_the_large_request_fails():
    sim, run = simulate(None)
    hosts = [sim.base.names[r] if r >= 0 else None for r in run.host]
    assert hosts == ["h0", "h0", "h0", "h0", "h1", None]
    assert run.outcome[-1] == REJECTED
    assert run.periodic_log == []
    assert run.migrations.sum() == 0


def test_a_defrag_run_makes_the_large_request_fit():
    defrag = PeriodicDefrag(interval=6.0, migrations=2)
    sim, run = simulate(defrag)
    assert run.outcome.tolist() == [ACCEPTED] * 6
    # one run at t=6 (window start 0 + interval): e moves from h1 to h0, h1 is empty for 'big'
    (record,) = run.periodic_log
    assert record["action"] == "defrag"
    assert record["time"] == 6.0
    assert record["running"] == 3
    assert record["budget"] == 2
    assert record["migrations"] == 1
    assert record["capacity_before"] == {"big": 0}
    assert record["capacity_after"] == {"big": 1}
    assert sim.base.names[run.host[-1]] == "h1"
    assert run.periodic_events == 1
    assert run.migrations.tolist() == [0, 1]  # window 0 is the warm-up
    s = summarize(sim, run)
    assert s["defrag"] == {
        "runs": 1,
        "skipped": 0,
        "migrations": 1,
        "by_window": [1],
        "capacity_gained": {"big": 1},
    }
    assert s["acceptance"]["overall"] == 1.0


def test_on_pressure_a_run_waits_for_a_request_that_found_no_room():
    # nothing was refused before t=6: the run is skipped and 'big' fails at t=10
    sim, run = simulate(PeriodicDefrag(interval=6.0, migrations=2, on_pressure=True))
    (record,) = run.periodic_log
    assert record["skipped"] == "no pressure"
    assert run.outcome[-1] == REJECTED
    assert summarize(sim, run)["defrag"]["skipped"] == 1
    # a 'big' refused at 5.5 is pressure: the run at 6 consolidates and the one at 10 fits
    trace = fragmenting_trace([("big0", 5.5, 5.8, "big", OD)])
    sim = Simulation(trace, fleet(), ReplayOptions(track_flavors=["big"], bound=False))
    run = sim.run(
        resolve("first_fit"),
        periodic=[PeriodicDefrag(interval=6.0, migrations=2, on_pressure=True)],
    )
    assert run.outcome.tolist() == [ACCEPTED] * 5 + [REJECTED, ACCEPTED]
    (record,) = run.periodic_log
    assert "skipped" not in record
    assert record["migrations"] == 1


def test_a_policy_brings_its_own_defragmenter_and_a_run_may_replace_it():
    own = resolve("berth-placement")
    mine = PeriodicDefrag(interval=6.0, migrations=2, name="defrag")
    policy = replace(own, name="mine", periodic=(mine,))
    sim = Simulation(
        fragmenting_trace(), fleet(), ReplayOptions(track_flavors=["big"], bound=False)
    )
    run = sim.run(policy)
    assert [r["migrations"] for r in run.periodic_log] == [1]
    other = PeriodicDefrag(interval=6.0, migrations=2, on_pressure=True)
    run = sim.run(policy, periodic=[other])
    assert [r.get("skipped") for r in run.periodic_log] == ["no pressure"]  # replaced, not added
    (action,) = resolve("berth").periodic
    assert isinstance(action, PeriodicDefrag)
    assert (action.interval, action.share, action.on_pressure) == (6 * 3600.0, 0.01, True)
    assert resolve("berth-placement").periodic == ()


def test_a_moved_preemptible_instance_is_evicted_from_its_new_host():
    pytest.importorskip("berth.policy.preemption")
    from berth.sim.evictions import default_evictor

    small = flavor("small", vcpus=1, mem=1024)
    mid = flavor("mid", vcpus=3, mem=3072)
    big = flavor("big", vcpus=4, mem=4096)
    rows = [
        ("a", 0.0, 5.0, "small", OD),
        ("b", 1.0, 5.0, "small", OD),
        ("c", 2.0, INF, "small", PRE),
        ("d", 3.0, INF, "small", OD),
        ("e", 4.0, INF, "small", PRE),  # h1; moved to h0 at t=6
        ("big", 10.0, INF, "big", OD),  # h1, emptied by the move
        ("mid", 11.0, INF, "mid", OD),  # h0 has 1 free: evicting c and e (on h0 now) frees 3
    ]
    trace = build_trace("moves", rows, [small, mid, big], window=12.0, horizon=12.0)
    opts = ReplayOptions(track_flavors=["big"], bound=False, evictor=default_evictor())
    sim = Simulation(trace, fleet(), opts)
    run = sim.run(resolve("first_fit"), periodic=[PeriodicDefrag(interval=6.0, migrations=1)])
    assert run.periodic_log[0]["migrations"] == 1
    outcome = dict(zip(trace.ids, run.outcome.tolist(), strict=True))
    assert outcome == {
        "a": ACCEPTED,
        "b": ACCEPTED,
        "c": EVICTED,
        "d": ACCEPTED,
        "e": EVICTED,
        "big": ACCEPTED,
        "mid": ACCEPTED,
    }
    assert sim.base.names[run.host[-1]] == "h0"


def test_budget_share_of_running_vms():
    d = PeriodicDefrag(interval=1.0, share=0.03)
    assert [d.budget(n) for n in (0, 33, 34, 1000)] == [0, 0, 1, 30]
    assert PeriodicDefrag(interval=1.0, share=None, migrations=7).budget(1000) == 7
    # below one migration the run plans nothing (and still records itself)
    _, run = simulate(PeriodicDefrag(interval=6.0, share=0.1))
    assert run.periodic_log[0]["budget"] == 0
    assert run.outcome[-1] == REJECTED


def test_replays_with_defragmentation_are_deterministic():
    runs = [simulate(PeriodicDefrag(interval=2.0, migrations=3), seed=s)[1] for s in (0, 0)]
    a, b = runs
    assert np.array_equal(a.host, b.host)
    assert np.array_equal(a.outcome, b.outcome)
    assert a.periodic_log == b.periodic_log
    assert np.array_equal(a.samples, b.samples)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600", 3600.0), ("90s", 90.0), ("30m", 1800.0), ("12h", 43200.0), ("0.5d", 43200.0)],
)
def test_parse_interval(text, seconds):
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["", "1w", "-1h", "0", "h"])
def test_parse_interval_rejects(text):
    with pytest.raises(DefragOptionError, match="--defrag-every"):
        parse_interval(text)


def test_parse_budget():
    assert parse_budget("3%") == (0.03, None)
    assert parse_budget("50") == (None, 50)
    for bad in ("0%", "150%", "0", "-3", "x"):
        with pytest.raises(DefragOptionError, match="--defrag-budget"):
            parse_budget(bad)
    with pytest.raises(DefragOptionError, match="budget"):
        PeriodicDefrag(interval=1.0, share=None)


CSV = """id,start,end,vcpus,memory_mb,business
a,0,5,1,1024,on-demand
b,1,5,1,1024,on-demand
c,2,,1,1024,on-demand
d,3,,1,1024,preemptible
e,4,,1,1024,preemptible
big,10,,4,4096,on-demand
"""

SIZING = """kind: sizing
host_types:
  tiny:
    numa_cells: [{shared_cpus: 4, memory_mb: 4096}]
per_cluster: {tiny: 2}
"""


@pytest.mark.slow
def test_simulate_with_defrag_every(tmp_path):
    from typer.testing import CliRunner

    from berth.cli.main import app

    (tmp_path / "t.csv").write_text(CSV)
    (tmp_path / "fleet.yaml").write_text(SIZING)
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--fleet", str(tmp_path / "fleet.yaml")]
    args += [
        "--policy",
        "first_fit",
        "--out",
        str(out),
        "--no-plots",
        "--no-bound",
        "--no-preemption",
    ]
    args += ["--flavor", "v4-m4096", "--defrag-every", "6s", "--defrag-budget", "2"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "migr" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    runs = {p["policy"]: p for p in metrics["policies"]}
    assert list(runs) == ["first_fit", "first_fit+defrag"]
    assert runs["first_fit"]["acceptance"]["overall"] == pytest.approx(5 / 6)
    assert runs["first_fit"]["defrag"] is None
    assert runs["first_fit+defrag"]["acceptance"]["overall"] == 1.0
    assert runs["first_fit+defrag"]["defrag"]["migrations"] == 1
    assert metrics["options"]["defrag"]["flavors"] == ["v4-m4096"]
    report = (out / "report.md").read_text()
    assert "## Periodic defragmentation" in report
    assert "| first_fit+defrag | 83.33% | 100.00% |" in report
    assert "| migrations (defrag) | – | 1 |" in report


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--defrag-every", "soon", "--defrag-every: 'soon' is not a duration"),
        ("--defrag-budget", "200%", "--defrag-budget: '200%' is neither"),
        ("--defrag-flavor", "nope", "--defrag-flavor: unknown flavor 'nope'"),
    ],
)
def test_simulate_bad_defrag_options_fail_in_one_line(tmp_path, option, value, message):
    from typer.testing import CliRunner

    from berth.cli.main import app

    (tmp_path / "t.csv").write_text(CSV)
    (tmp_path / "fleet.yaml").write_text(SIZING)
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--fleet", str(tmp_path / "fleet.yaml")]
    args += ["--out", str(tmp_path / "o"), "--no-plots", "--no-bound", "--policy", "first_fit"]
    args += ["--defrag-every", "6s", option, value]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
