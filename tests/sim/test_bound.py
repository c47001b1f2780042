"""Lower bounds are valid: never above an optimum, never above what any policy achieves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from berth.core.model import Fleet
from berth.sim.bound import lower_bound
from berth.sim.policies import resolve
from berth.sim.replay import ACCEPTED, ReplayOptions, Simulation
from berth.sim.trace import Business, Trace, build_trace
from tests.builders import flavor, host, table_of

POLICIES = ("nova", "first_fit", "best_fit", "worst_fit", "berth")


def test_volume_large_items_and_exact_optimum():
    table = table_of(
        [host(f"h{i}", vcpus=10, mem=10_000) for i in range(3)],
        [flavor("six", vcpus=6, mem=1000), flavor("four", vcpus=4, mem=6000)],
    )
    # 3 x six + 3 x four: 30 vCPUs and 21 GB (volume 3); sixes cannot share a host (large
    # items 3), and one six and one four fill a host: exactly 3
    b = lower_bound(table, {"six": 3, "four": 3})
    assert b.volume_by_resource == {"vCPUs": 3, "memory MB": 3}
    assert b.large_items == 3
    assert b.mip == 3
    assert b.mip_optimal
    assert b.hosts == 3


def test_lp_bound_beats_volume_when_items_do_not_pack():
    # items of 4 on hosts of 10: volume says 40/10 = 4, but only two fit a host: 5
    table = table_of([host("h", vcpus=10, mem=100_000)], [flavor("four", vcpus=4, mem=1)])
    b = lower_bound(table, {"four": 10}, mip_instances=0)
    assert b.volume == 4
    assert b.large_items == 0
    assert b.lp == 5
    assert b.lp_converged
    assert b.hosts == 5
    assert b.method == "lp"


def test_bound_beyond_the_fleet_and_unplaceable_instances():
    table = table_of(
        [host("h", vcpus=4, mem=4096)],
        [flavor("f", vcpus=2, mem=1024), flavor("huge", vcpus=8, mem=1024)],
    )
    b = lower_bound(table, {"f": 6, "huge": 2})
    assert b.hosts == 3  # three hosts' worth although the fleet has one
    assert b.unplaceable == 2


@pytest.mark.parametrize("seed", range(6))
def test_lp_and_volume_never_exceed_the_exact_optimum(seed):
    rng = np.random.default_rng(seed)
    shapes = [(int(rng.integers(1, 9)), int(rng.integers(1, 9)) * 512) for _ in range(4)]
    flavors = [flavor(f"f{i}", vcpus=v, mem=m) for i, (v, m) in enumerate(shapes)]
    table = table_of([host("a", vcpus=8, mem=4096), host("b", vcpus=12, mem=3072)], flavors)
    load = {f"f{i}": int(rng.integers(0, 5)) for i in range(4)}
    b = lower_bound(table, load, mip_instances=100)
    assert b.mip_optimal
    assert b.mip is not None
    assert b.volume <= b.mip
    assert b.large_items <= b.mip
    if b.lp_value is not None:
        assert b.lp_value <= b.mip + 1e-6


def random_trace(seed: int, n: int = 60) -> Trace:
    rng = np.random.default_rng(seed)
    flavors = [
        flavor("s", vcpus=1, mem=1024),
        flavor("m", vcpus=2, mem=3072),
        flavor("l", vcpus=4, mem=2048),
        flavor("x", vcpus=6, mem=6144),
    ]
    start = np.sort(rng.uniform(0, 100, n))
    life = rng.exponential(40, n)
    rows = [
        (
            f"v{i}",
            float(start[i]),
            float(start[i] + life[i]) if rng.random() < 0.8 else math.inf,
            str(rng.choice(["s", "m", "l", "x"], p=[0.4, 0.3, 0.2, 0.1])),
            int(Business.PREEMPTIBLE if rng.random() < 0.2 else Business.ON_DEMAND),
        )
        for i in range(n)
    ]
    return build_trace(f"random-{seed}", rows, flavors, window=25.0, horizon=100.0)


@pytest.mark.parametrize("seed", range(4))
def test_bound_is_never_above_what_any_policy_uses(seed):
    fleet = Fleet(
        hosts=[host(f"h{i}", cells=2, vcpus=4, mem=4096) for i in range(6)],
        now=0.0,
    )
    sim = Simulation(random_trace(seed), fleet, ReplayOptions(sample_every=5.0))
    for probe in sim.probes:
        assert probe.bound is not None
    for name in POLICIES:
        run = sim.run(resolve(name))
        assert run.probes
        for p in run.probes:
            assert p["held_bound"] <= p["used_hosts"], (name, p)
        # and at the end of the replay, on what is still running
        alive = (run.outcome == ACCEPTED) & (sim.trace.end > sim.trace.horizon)
        counts = np.bincount(sim.trace.flavor[alive], minlength=len(sim.trace.flavor_names))
        load = {f: int(c) for f, c in zip(sim.trace.flavor_names, counts, strict=True)}
        used = int(run.samples[-1, 0])
        assert lower_bound(sim.base, load).hosts <= used
