"""The capacity planner: its answer meets the target in a replay, one host fewer of the mix does
not, the bound never prunes a purchase that could pass, and the cover is the cheapest."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.model import Flavor, Fleet
from berth.sim.capacity_bound import CoverBound, cover_bound
from berth.sim.capacity_exec import CapacityProblem, SerialRunner, evaluate, purchase_fleet
from berth.sim.capacity_offers import parse_offers
from berth.sim.capacity_plan import Evaluate, Offer, Outcome, PlanError, Purchase, Target, plan
from berth.sim.growth import grow
from berth.sim.policies import resolve
from berth.sim.synthetic import SyntheticConfig, generate
from berth.sim.trace import TraceError, build_trace
from berth.solvers.cover import cheapest_cover

TARGET = Target(0.99)


@cache
def problem() -> CapacityProblem:
    """A small 360-like slice: two IDCs, all three pools, a few hundred VMs."""
    trace = generate(
        SyntheticConfig(
            seed=3, days=0.1, history_days=0.4, creations_per_day=1000, idcs=2, clusters=2
        )
    )
    _, types = parse_offers(["std-2s:10", "ssd-2s:12", "dpdk-2s:15"])
    return CapacityProblem(
        trace, Fleet(hosts=[], now=0.0), types, trace.clusters, resolve("first_fit")
    )


OFFERS = [Offer("std-2s", 10.0), Offer("ssd-2s", 12.0), Offer("dpdk-2s", 15.0)]


def bound_of(p: CapacityProblem, acceptance: float = TARGET.acceptance):
    return cover_bound(p.trace, p.fleet, p.offered, acceptance, p.target, p.clusters)


@cache
def planned():
    p = problem()
    return plan(bound_of(p), OFFERS, TARGET, SerialRunner(p), clusters=len(p.clusters), width=2)


def test_the_answer_meets_the_target_in_a_fresh_replay_and_one_host_fewer_does_not():
    p, result = problem(), planned()
    assert result.purchase is not None
    assert result.claim in ("optimal", "minimal")
    assert evaluate(p, result.purchase).meets(TARGET)
    for t, n in enumerate(result.purchase):
        if n:
            fewer = tuple(v - (i == t) for i, v in enumerate(result.purchase))
            assert not evaluate(p, fewer).meets(TARGET), fewer
    # the report's checks are those purchases, all failing
    assert {o.purchase for o in result.checks} == {
        tuple(v - (i == t) for i, v in enumerate(result.purchase))
        for t in range(3)
        if result.purchase[t]
    } or result.claim == "optimal"
    assert all(not o.meets(TARGET) for o in result.checks)


def test_the_bound_prunes_only_purchases_that_fail_in_replay():
    p, result = problem(), planned()
    b = bound_of(p)
    lower = result.bound_purchase
    assert lower is not None
    assert b.violated(lower) is None
    assert result.cost(lower) <= result.cost(result.purchase)
    for t in range(3):
        if lower[t]:
            fewer = tuple(v - (i == t) for i, v in enumerate(lower))
            assert b.violated(fewer) is not None
            assert not evaluate(p, fewer).meets(TARGET)


def test_the_curve_holds_every_purchase_evaluated_and_the_answer_is_the_cheapest_pass_seen():
    result = planned()
    seen = [o.purchase for o in result.evaluated]
    assert len(seen) == len(set(seen))
    assert result.purchase in seen
    passing = [o for o in result.evaluated if o.meets(TARGET)]
    assert min(result.cost(o.purchase) for o in passing) == result.cost(result.purchase)


def test_nothing_to_buy_when_the_fleet_already_holds_the_answer():
    p = problem()
    big = purchase_fleet(p, planned().purchase)
    rich = CapacityProblem(p.trace, big, p.offered, p.clusters, p.policy)
    assert evaluate(rich, (0, 0, 0)).meets(TARGET)
    result = plan(bound_of(rich), OFFERS, TARGET, SerialRunner(rich), clusters=2)
    assert result.purchase == (0, 0, 0)
    assert result.claim == "optimal"


def test_an_unreachable_target_says_which_demand_no_offer_can_hold():
    p = problem()
    only_std = {"std-2s": p.offered["std-2s"]}
    q = CapacityProblem(p.trace, p.fleet, only_std, p.clusters, p.policy)
    result = plan(bound_of(q), [Offer("std-2s", 1.0)], TARGET, SerialRunner(q), clusters=2)
    assert result.purchase is None
    assert result.claim == "none"
    assert "n3." in result.notes[0] or "i3." in result.notes[0], result.notes


@pytest.mark.parametrize(
    ("acceptance", "evictions"), [(0.0, None), (1.5, None), (-1.0, None), (0.99, 1.2)]
)
def test_targets_out_of_range_are_refused(acceptance, evictions):
    with pytest.raises(PlanError, match="--target-"):
        Target(acceptance, evictions)


@settings(max_examples=40)
@given(
    st.integers(1, 3),
    st.lists(st.integers(0, 40), min_size=2, max_size=4),
    st.lists(st.integers(1, 9), min_size=3, max_size=3),
    st.data(),
)
def test_cheapest_cover_equals_brute_force(types, needs, prices, data):
    rows = len(needs)
    matrix = np.array(
        [[data.draw(st.integers(0, 6)) for _ in range(types)] for _ in range(rows)], dtype=float
    )
    need = np.array(needs, dtype=float)
    price = np.array(prices[:types], dtype=float)
    upper = np.full(types, 12, dtype=np.int64)
    got = cheapest_cover(matrix, need, price, upper)
    feasible = [
        x
        for x in itertools.product(range(13), repeat=types)
        if (matrix @ np.array(x) >= need).all()
    ]
    if not feasible:
        assert got is None
        return
    assert got is not None
    assert (matrix @ got >= need).all()
    assert price @ got == min(price @ np.array(x) for x in feasible)


def test_growth_scales_the_requests_keeps_sets_and_is_deterministic():
    trace = problem().trace
    double = grow(trace, 2.0, seed=1)
    assert len(double) == 2 * len(trace)
    assert len(set(double.ids)) == len(double.ids)
    assert (np.diff(double.start) >= 0).all()
    assert double.flavor_counts() == {f: 2 * c for f, c in trace.flavor_counts().items()}
    sizes = np.bincount(trace.group[trace.group >= 0])
    grown = np.bincount(double.group[double.group >= 0])
    assert sorted(grown[grown > 0]) == sorted([*sizes[sizes > 0]] * 2)
    half = grow(trace, 0.5, seed=1)
    assert 0.4 * len(trace) < len(half) < 0.6 * len(trace)
    assert grow(trace, 1.3, seed=4).ids == grow(trace, 1.3, seed=4).ids
    with pytest.raises(TraceError, match="--growth"):
        grow(trace, 0.0)


SMALL = {"numa_cells": [{"shared_cpus": 16, "memory_mb": 32768}]}
TALL = {"numa_cells": [{"shared_cpus": 8, "memory_mb": 65536}]}


@settings(max_examples=10)
@given(
    st.lists(
        st.tuples(
            st.floats(-500, 900), st.floats(10, 2000), st.sampled_from(["s", "m", "l"]),
            st.sampled_from([0, 0, 0, 2]),
        ),
        min_size=4,
        max_size=40,
    ),
    st.tuples(st.integers(0, 6), st.integers(0, 6)),
    st.sampled_from([0.8, 0.95, 1.0]),
)  # fmt: skip
def test_a_purchase_the_bound_rules_out_fails_in_replay(rows, purchase, acceptance):
    """The bound's whole point: whatever it prunes could not have met the target."""
    flavors = [
        Flavor(name="s", vcpus=2, memory_mb=4096),
        Flavor(name="m", vcpus=4, memory_mb=16384),
        Flavor(name="l", vcpus=8, memory_mb=8192),
    ]
    rows = sorted(rows)
    trace = build_trace(
        "random",
        [(f"vm{i}", s, s + d, f, b) for i, (s, d, f, b) in enumerate(rows)],
        flavors,
        window=600.0,
    )
    offered = {"small": SMALL, "tall": TALL}
    p = CapacityProblem(
        trace, Fleet(hosts=[], now=0.0), offered, [("nova", "c1")], resolve("first_fit")
    )
    target = Target(acceptance)
    b = cover_bound(trace, p.fleet, offered, acceptance, p.target, p.clusters)
    if b.violated(purchase) is not None:
        assert not evaluate(p, purchase).meets(target)
    cheapest = cheapest_cover(b.matrix, b.need(), np.array([1.0, 1.0]), np.array([50, 50]))
    assert cheapest is not None
    lower = tuple(int(v) for v in cheapest)
    assert b.violated(lower) is None
    for t in range(2):  # anything cheaper than the cheapest cover is pruned, and fails
        if lower[t]:
            fewer = tuple(v - (i == t) for i, v in enumerate(lower))
            assert b.violated(fewer) is not None
            assert not evaluate(p, fewer).meets(target)


def _fake(weights: list[int], need: int, floor: list[int]) -> Evaluate:
    """A replay stand-in: a purchase passes iff weights @ x >= need and x >= floor."""

    def run(purchases: Sequence[Purchase]) -> list[Outcome]:
        out = []
        for x in purchases:
            ok = float(np.dot(weights, x)) >= need and all(
                v >= f for v, f in zip(x, floor, strict=True)
            )
            out.append(Outcome(tuple(x), acceptance=1.0 if ok else 0.5, warmup_acceptance=1.0))
        return out

    return run


@settings(max_examples=25)
@given(
    st.lists(st.integers(1, 5), min_size=2, max_size=3),
    st.integers(1, 60),
    st.data(),
    st.integers(1, 3),
)
def test_the_search_answer_passes_and_one_fewer_fails_for_any_monotone_target(
    weights, need, data, width
):
    """The pure search on a stand-in for replays (a monotone threshold): the answer passes,
    one host fewer of any type in it fails, and "optimal" is the true optimum."""
    k = len(weights)
    floor = [data.draw(st.integers(0, 3)) for _ in range(k)]
    prices = np.array([data.draw(st.integers(1, 9)) for _ in range(k)], dtype=float)
    scale = data.draw(st.sampled_from([0.5, 0.9, 1.0]))  # the bound forces part of the need
    bound = CoverBound(
        matrix=np.array([weights], dtype=float), forced=np.array([scale * need]),
        base=np.zeros(1), labels=["volume"],
    )  # fmt: skip
    run = _fake(weights, need, floor)
    offers = [Offer(f"t{i}", float(p)) for i, p in enumerate(prices)]
    result = plan(bound, offers, TARGET, run, width=width, upper=200)
    assert result.purchase is not None
    assert run([result.purchase])[0].meets(TARGET)
    if result.claim == "optimal":
        # the true optimum of the stand-in (cheapest_cover is checked by brute force above)
        rows = np.vstack([np.array([weights], dtype=float), np.eye(k)])
        optimum = cheapest_cover(rows, np.array([need, *floor], dtype=float), prices,
                                 np.full(k, 200, dtype=np.int64))  # fmt: skip
        assert optimum is not None
        assert prices @ np.array(result.purchase) == prices @ optimum
    else:
        assert result.claim == "minimal"
        for t in range(k):
            if result.purchase[t]:
                fewer = tuple(v - (i == t) for i, v in enumerate(result.purchase))
                assert not run([fewer])[0].meets(TARGET)


def test_a_spent_replay_budget_is_said():
    bound = CoverBound(np.array([[1.0]]), np.array([1.0]), np.zeros(1), ["volume"])
    result = plan(bound, [Offer("t", 1.0)], TARGET, _fake([1], 40, [0]), width=1, max_replays=3)
    assert result.claim in ("none", "unverified")
    assert any("budget" in n for n in result.notes)
