"""The replay's lean path (`place_one`) gives every placement of the general path.

Replays a synthetic day (NUMA flavors, pools by trait, zones, deployment sets, preemption) on a
fleet small enough that requests fail and evict, once with `select_destinations` + `commit` and
once with `place_one`, under every built-in policy, and compares request by request.
"""

from __future__ import annotations

import numpy as np
import pytest

from berth.sim.evictions import default_evictor
from berth.sim.fleets import load_fleet_or_sizing
from berth.sim.policies import resolve
from berth.sim.replay import REJECTED, ReplayOptions, Simulation
from berth.sim.synthetic import SyntheticConfig, generate

TRACE = generate(SyntheticConfig(seed=3, days=0.25, history_days=3.0))
FLEET, _ = load_fleet_or_sizing("6xstd-2s+1xssd-2s+1xdpdk-2s", TRACE)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["nova", "first_fit", "best_fit", "worst_fit", "berth"])
def test_fast_path_places_every_request_as_the_general_path(policy):
    runs = {}
    for fast in (False, True):
        options = ReplayOptions(seed=11, bound=False, fast=fast, evictor=default_evictor())
        runs[fast] = Simulation(TRACE, FLEET, options).run(resolve(policy))
    general, lean = runs[False], runs[True]
    assert general.decisions == lean.decisions == len(TRACE)
    assert (general.outcome == REJECTED).any()  # the fleet is tight enough to reject
    assert np.array_equal(general.outcome, lean.outcome)
    assert np.array_equal(general.host, lean.host)
    assert general.failures == lean.failures
    assert general.evictions == lean.evictions
    assert np.array_equal(general.samples, lean.samples)
    assert np.array_equal(general.fragmentation, lean.fragmentation)
    assert general.fragmentation_final == lean.fragmentation_final
