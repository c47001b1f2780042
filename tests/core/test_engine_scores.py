"""The engine's scores are ``sum_w weight * normalise(raw_w)``, bit for bit.

`FilterScheduler._scores` skips steps that cannot change a value (all-equal weighers, a weight
of 1, the zeros of the first term, a weight of -1 as a subtraction) and reads the extremes at
argmin/argmax. Random fleets and weights: the scores must equal the textbook sum exactly (only
the sign of a zero may differ, which `array_equal` and every comparison ignore).
"""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.engine import FilterScheduler
from berth.core.errors import BerthError
from berth.core.filters.base import Context
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.core.weighers.base import normalise
from tests.builders import NOW, scheduler
from tests.core.strategies import examples, tables

WEIGHERS = ["ram", "vcpu", "fragmentation", "leftover", "first_fit", "num_instances", "disk"]
WEIGHTS = [1.0, -1.0, 2.0, -0.5, 0.3, 1e-3]


@settings(max_examples=examples(0.6), deadline=None)
@given(
    table=tables(min_hosts=1, max_hosts=8),
    chosen=st.lists(
        st.tuples(st.sampled_from(WEIGHERS), st.sampled_from(WEIGHTS)),
        min_size=1,
        max_size=4,
        unique_by=lambda x: x[0],
    ),
    data=st.data(),
)
def test_scores_equal_the_weighted_sum_of_normalised_values(
    table: HostTable, chosen: list[tuple[str, float]], data: st.DataObject
) -> None:
    for k in range(data.draw(st.integers(0, 6))):  # some hosts in use
        name = data.draw(st.sampled_from(sorted(table.flavors)))
        host = data.draw(st.sampled_from(table.names))
        with contextlib.suppress(BerthError):  # does not fit: leave the host as it is
            table.claim(f"c{k}", host, name)
    sched: FilterScheduler = scheduler(weighers=dict(chosen))
    flavor = data.draw(st.sampled_from(sorted(table.flavors)))
    ctx = Context(table, RequestSpec(flavor=flavor), table.demand(flavor), NOW)
    keep = data.draw(st.lists(st.booleans(), min_size=len(table), max_size=len(table)))
    rows = np.flatnonzero(keep)
    if rows.size == 0:
        rows = np.arange(len(table))
    want = np.zeros(rows.size, dtype=np.float64)
    for weigher, weight in sched.weighers:
        want += weight * normalise(weigher.raw(ctx, rows))
    got = sched._scores(ctx, rows)
    assert got.dtype == np.float64
    assert np.array_equal(got, want)
    scored = sched._tie_pool(ctx, rows)  # the compiled path of `_pick`
    if scored is None:  # a weigher with other values than float64 decides through `_scores`
        assert any(w.raw(ctx, rows).dtype != np.float64 for w, _ in sched.weighers)
        return
    scores, ties = scored
    assert np.array_equal(scores, want)
    assert np.array_equal(ties, np.flatnonzero(want >= want.max() - 1e-9))
