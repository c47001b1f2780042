"""Preemption on tables wider than two cells (hosts of 4 and 8 NUMA cells, docs/numa.md): the
eviction reported, applied, makes the request fit, and it is the least damage a brute force
over every subset of victims finds."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.explain import NoValidHost
from berth.core.request import RequestSpec
from berth.policy.preemption import plan_preemption
from berth.policy.restrict import only_hosts
from tests.policy.helpers import NOW, flavor, host, same, scheduler, snapshot, table
from tests.policy.test_preemption import _fill, _plan_key, brute_force

FLAVORS = [
    flavor("s1", 1, 1024, numa=1),
    flavor("s2", 2, 2048, numa=1),
    flavor("d2", 2, 2048, numa=2),
    flavor("e4", 4, 4096, numa=4),
    flavor("x4", 4, 4096, numa=2, berth__numa_split="flexible"),
    flavor("big", 4, 4096, numa=1),
    flavor("float2", 2, 2048),
]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    cells=st.sampled_from([4, 8]),
    two_cell_too=st.booleans(),
    fill=st.integers(4, 9),
    want=st.sampled_from(["big", "e4", "x4", "d2"]),
)
def test_wide_tables_evict_what_makes_the_request_fit(seed, cells, two_cell_too, fill, want):
    rng = np.random.default_rng(seed)
    per_cell = 16 // cells  # 16 pinned CPUs and 16 GB a host, however many cells
    hosts = [host("h0", pcpus=per_cell, mem=per_cell * 1024, cells=cells)]
    if two_cell_too:
        hosts.append(host("h1", pcpus=4, mem=4096))
    t = table(hosts, FLAVORS)
    _fill(t, rng, fill, ["s1", "s2", "d2", "x4", "float2"])
    preemptible = {iid for iid in t.allocations if rng.random() < 0.8}
    created = {iid: float(rng.integers(0, 5000)) for iid in t.allocations}
    sched = scheduler()
    request = RequestSpec(flavor=want, instance_ids=("new",))
    before = snapshot(t)
    plan = plan_preemption(
        sched,
        t,
        request,
        NOW,
        lambda a: a.instance_id in preemptible,
        lambda a: created[a.instance_id],
    )
    assert same(before, snapshot(t)), "plan_preemption must not change the table"
    try:
        sched.select_destinations(t, request, NOW)
        assert plan is not None
        assert plan.evictions == ()
        return
    except NoValidHost:
        pass
    expected = brute_force(sched, t, request, preemptible, created)
    if expected is None:
        assert plan is None
        return
    assert plan is not None
    assert set(plan.evictions) <= preemptible
    after = t.copy()
    for iid in plan.evictions:
        after.release(iid)
    row = after.index[plan.decision.hosts[0]]
    only_hosts(sched, len(after), [row]).select_destinations(after, request, NOW)  # fits
    got = _plan_key(t, plan.evictions, plan.decision.hosts[0], want, plan.decision, created)
    assert got == expected
