"""`select_destinations` decides as the plain filter-then-weigh algorithm, bit for bit.

The engine skips masks that pass every host, checks free-column minimums in a compiled pass,
scores in compiled passes, skips weighers whose values are all equal and computes footprints
in compiled code. The reference below does none of that: every filter's mask ANDed into a new
array, ``flatnonzero``, the numpy scores (`FilterScheduler._scores` with terms, itself held to
the textbook sum by `test_engine_scores`), the same top-slice choice, footprints from the
claim rule in plain integers (`numa.scalar.place`), tentative claims undone. Hosts,
alternates, footprints, generations and failures must be equal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.engine import FilterScheduler, commit
from berth.core.explain import NoValidHost, diagnose
from berth.core.filters.base import Context
from berth.core.numa import scalar
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from tests.builders import NOW, scheduler
from tests.core.strategies import examples, fleets
from tests.core.test_engine_place_one import SCHEDULERS


def _footprint(table: HostTable, flavor: str, row: int) -> tuple[list[Any], list[int]]:
    d = table.demand(flavor)
    cells = scalar.place(d.rows, table.cell_free[row].tolist(), table.distance.get(row))
    return cells, d.host.tolist()


def reference(sched: FilterScheduler, table: HostTable, req: RequestSpec) -> object:
    """The decision as (host, alternates, cell use, host use) per instance and the generations
    read, or the failure's diagnosis."""
    ctx = Context(table, req, table.demand(req.flavor), NOW)
    static = np.ones(len(table), dtype=bool)
    for flt in sched.filters:
        if flt.static:
            static &= flt.mask(ctx)
    out: list[tuple[str, list[str], Any, list[int]]] = []
    generations: dict[str, int] = {}
    undo: list[tuple[str, int]] = []
    try:
        for i, iid in enumerate(req.ids()):
            mask = static.copy()
            for flt in sched.filters:
                if not flt.static:
                    mask &= flt.mask(ctx)
            rows = np.flatnonzero(mask)
            if rows.size == 0:
                return diagnose(ctx, sched.filters, instance=i + 1)
            if type(sched) is FilterScheduler:
                scores = sched._scores(ctx, rows, []) if sched.weighers else np.zeros(rows.size)
                chosen, alternates = sched._choose_scored(rows, scores, req.seed, i)
            else:  # the chance scheduler draws without scores
                chosen, alternates = sched._choose(ctx, rows, req.seed, i)
            host = table.names[chosen]
            generations.setdefault(host, int(table.generation[chosen]))
            cells, host_use = _footprint(table, req.flavor, chosen)
            out.append((host, [table.names[a] for a in alternates], cells, host_use))
            if i + 1 < req.num_instances:
                undo.append((iid, int(table.generation[chosen])))
                table.claim(iid, host, req.flavor, np.array(cells), np.array(host_use))
    finally:
        for iid, generation in reversed(undo):
            table.unclaim(iid, generation)
    return out, generations


def engine(sched: FilterScheduler, table: HostTable, req: RequestSpec) -> object:
    try:
        decision = sched.select_destinations(table, req, NOW)
    except NoValidHost as exc:
        return exc.diagnosis
    out = [
        (s.host, list(s.alternates), s.cell_use.tolist(), s.host_use.tolist())
        for s in decision.selections
    ]
    return out, decision.generations


@settings(max_examples=examples(0.4), deadline=None)
@given(
    fleet=fleets(min_hosts=1, max_hosts=9, extra_flavors=4, cells=(2, 1, 2, 4)),
    config=st.sampled_from(sorted(SCHEDULERS)),
    steps=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 2**40), st.integers(1, 3), st.booleans()),
        max_size=12,
    ),
)
def test_select_destinations_equals_the_plain_algorithm(fleet, config, steps):
    table = HostTable.from_fleet(fleet)
    sched = scheduler(**SCHEDULERS[config])
    names = [f.name for f in fleet.flavors]
    for k, (f, seed, count, keep) in enumerate(steps):
        ids = tuple(f"i{k}-{j}" for j in range(count))
        req = RequestSpec(
            flavor=names[f % len(names)], num_instances=count, seed=seed, instance_ids=ids
        )
        want = reference(sched, table, req)
        got = engine(sched, table, req)
        assert got == want
        if keep and isinstance(got, tuple):  # decided: the next request sees it
            commit(table, sched.select_destinations(table, req, NOW))
