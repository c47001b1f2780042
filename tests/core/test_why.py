"""Why this host (`berth.core.why`): the breakdown adds up to the engine's score bit for bit,
the decision is the one made without asking, and ties are detected as the engine draws them."""

from __future__ import annotations

import contextlib
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import PROFILES
from berth.core.engine import FilterScheduler
from berth.core.errors import BerthError
from berth.core.explain import NoValidHost
from berth.core.filters.base import Context, Workload
from berth.core.registry import filter_class
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.core.weighers.base import F64, I64, HostWeigher, normalise
from berth.core.why import InstanceWhy, explain_placement, fold
from tests.builders import NOW, flavor, fleet, host, scheduler
from tests.core.strategies import examples, tables

NOVA = [(w.name, w.weight) for w in PROFILES["nova"]]
OTHERS = ["ram", "vcpu", "fragmentation", "leftover", "first_fit", "num_instances", "disk"]
WEIGHTS = [1.0, -1.0, 2.0, -0.5, 0.3, 1e-3]


def bits(x: float) -> bytes:
    return np.float64(x).tobytes()


def weighers() -> st.SearchStrategy[list[tuple[str, float]]]:
    """The nova profile as it is, or 1-4 of Berth's weighers (the fragmentation weigher among
    them) with random multipliers."""
    mixed = st.lists(
        st.tuples(st.sampled_from(OTHERS), st.sampled_from(WEIGHTS)),
        min_size=1,
        max_size=4,
        unique_by=lambda x: x[0],
    )
    return st.one_of(st.just(NOVA), mixed, st.just([]))


def _fill(table: HostTable, data: st.DataObject) -> None:
    for k in range(data.draw(st.integers(0, 6))):
        name = data.draw(st.sampled_from(sorted(table.flavors)))
        where = data.draw(st.sampled_from(table.names))
        with contextlib.suppress(BerthError):  # does not fit: leave the host as it is
            table.claim(f"c{k}", where, name)


def _first_rows(sched: FilterScheduler, table: HostTable, request: RequestSpec) -> I64:
    ctx = Context(table, request, table.demand(request.flavor), NOW)
    mask = np.ones(len(table), dtype=bool)
    for flt in sched.filters:
        mask &= flt.mask(ctx)
    return np.flatnonzero(mask)


def _check_adds_up(why: InstanceWhy) -> None:
    for cand in why.ranked:
        assert bits(fold(cand.parts, why.scales)) == bits(cand.score), cand
        for part, scale in zip(cand.parts, why.scales, strict=True):
            assert part.weigher == scale.weigher
            assert 0.0 <= part.normalised <= 1.0
            assert part.contribution == part.multiplier * part.normalised


@settings(max_examples=examples(0.6), deadline=None)
@given(
    table=tables(min_hosts=1, max_hosts=8),
    chosen=weighers(),
    subset=st.sampled_from([1, 1, 1, 2]),
    attempts=st.integers(1, 4),
    count=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_breakdown_adds_up_to_the_engines_score_bit_for_bit(
    table: HostTable,
    chosen: list[tuple[str, float]],
    subset: int,
    attempts: int,
    count: int,
    seed: int,
    data: st.DataObject,
) -> None:
    _fill(table, data)
    sched = scheduler(weighers=dict(chosen), host_subset_size=subset, max_attempts=attempts)
    name = data.draw(st.sampled_from(sorted(table.flavors)))
    request = RequestSpec(flavor=name, num_instances=count, seed=seed)
    before = table.host_free.copy(), table.generation.copy()
    try:
        plain = sched.select_destinations(table, request, NOW)
    except NoValidHost:
        with pytest.raises(NoValidHost):
            explain_placement(sched, table, request, NOW)
        return
    decision, whys = explain_placement(sched, table, request, NOW, top=3)
    assert np.array_equal(table.host_free, before[0])
    assert np.array_equal(table.generation, before[1])
    # asking changes nothing: the same hosts, alternates and footprints
    assert [(s.host, s.alternates) for s in decision.selections] == [
        (s.host, s.alternates) for s in plain.selections
    ]
    assert len(whys) == count
    for sel, why in zip(decision.selections, whys, strict=True):
        assert why.winner.host == sel.host
        shown = [c.host for c in why.ranked[1:]]
        n = min(len(shown), len(sel.alternates))
        assert shown[:n] == list(sel.alternates[:n])  # the engine's alternates, best first
        _check_adds_up(why)

    # the first instance against an independent computation of the engine's scores
    first = whys[0]
    rows = _first_rows(sched, table, request)
    assert first.candidates == rows.size
    ctx = Context(table, request, table.demand(name), NOW)
    scores = sched._scores(ctx, rows) if sched.weighers else np.zeros(rows.size)
    at = {table.names[r]: i for i, r in enumerate(rows)}
    for cand in first.ranked:
        assert bits(cand.score) == bits(scores[at[cand.host]])
        textbook = [w * _scaled(wr, ctx, rows)[at[cand.host]] for wr, w in sched.weighers]
        assert [p.contribution for p in cand.parts] == textbook  # == ignores a zero's sign
    tied = int(np.count_nonzero(scores >= scores.max() - 1e-9))
    if rows.size == 1:
        assert first.draw == "only"
    elif subset > 1:
        assert first.draw == "subset"
    else:
        assert first.tied == tied
        assert first.draw == ("tie" if tied > 1 else "best")
    if first.draw == "best":
        assert first.decided_by is not None
        assert first.margin is not None
        assert first.margin > 1e-9
        assert first.deltas[first.decided_by] == max(first.deltas.values())
        assert first.deltas[first.decided_by] > 0
        rest = first.margin - first.deltas[first.decided_by]
        assert first.needed == (rest <= 1e-9)


def _scaled(weigher: HostWeigher, ctx: Context, rows: I64) -> F64:
    """The textbook scaling: min-max, or Nova's from `minval` (`HostWeigher.minval`)."""
    values = weigher.raw(ctx, rows)
    if weigher.minval is None:
        return normalise(values)
    values = np.maximum(values, weigher.minval)
    top = values.max()
    if top <= weigher.minval:
        return np.zeros_like(values)
    return (values - weigher.minval) / (top - weigher.minval)


class _Count(HostWeigher):
    """An int64-valued weigher: the engine keeps its own arithmetic for other dtypes."""

    name: ClassVar[str] = "test_count"

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def raw(self, ctx: Context, rows: I64) -> F64:
        return ctx.table.n_instances[rows].astype(np.int64)


@pytest.mark.parametrize(
    "weights",
    [
        [(_Count, -1.0)],
        [(_Count, 1.0), ("ram", -1.0)],
        [("ram", 2.0), (_Count, -0.5)],
    ],
)
def test_other_dtypes_fold_as_the_engine_adds_them(weights: list[tuple[object, float]]) -> None:
    from berth.core.registry import weigher_class

    f = flavor("small", vcpus=1, mem=1024)
    table = HostTable.from_fleet(
        fleet([host(f"h{i}", vcpus=8 + i, mem=8192 * (i + 1)) for i in range(4)], [f])
    )
    table.claim("a", "h0", "small")
    table.claim("b", "h0", "small")
    table.claim("c", "h2", "small")
    built = [((w() if isinstance(w, type) else weigher_class(str(w))()), m) for w, m in weights]
    sched = FilterScheduler([filter_class("ram")()], built)
    decision, (why,) = explain_placement(sched, table, RequestSpec(flavor="small"), NOW)
    _check_adds_up(why)
    assert why.winner.host == decision.hosts[0]
    assert any(s.dtype == "int64" for s in why.scales)


def test_a_tie_is_drawn_with_the_seed_and_named() -> None:
    f = flavor("small", vcpus=1, mem=1024)
    table = HostTable.from_fleet(fleet([host(f"h{i}", vcpus=8, mem=8192) for i in range(5)], [f]))
    sched = scheduler(weighers={"ram": -1.0})
    winners = set()
    for seed in range(12):
        _, (why,) = explain_placement(sched, table, RequestSpec(flavor="small", seed=seed), NOW)
        assert why.draw == "tie"
        assert why.tied == 5
        assert why.decided_by is None
        assert "5-way tie" in why.summary()
        winners.add(why.winner.host)
    assert len(winners) > 1  # the seed, not the weighers, chose


def test_the_deciding_weigher_is_the_largest_share_of_the_margin() -> None:
    f = flavor("small", vcpus=1, mem=1024)
    hosts = [
        host("a", vcpus=8, mem=4096),  # least free RAM: pack prefers it
        host("b", vcpus=4, mem=8192),
        host("c", vcpus=16, mem=16384),
    ]
    table = HostTable.from_fleet(fleet(hosts, [f]))
    sched = scheduler(weighers={"ram": -1.0, "vcpu": -0.1}, max_attempts=1)
    _, (why,) = explain_placement(sched, table, RequestSpec(flavor="small"), NOW)
    assert why.winner.host == "a"
    assert why.ranked[1].host == "b"  # the runner-up is found from the scores without alternates
    assert why.draw == "best"
    assert why.decided_by == "ram"
    assert why.needed
    assert why.deltas["vcpu"] < 0  # vcpu preferred b, but ram outweighed it
    assert why.margin == pytest.approx(sum(why.deltas.values()))


def test_the_chance_scheduler_draws_and_says_so() -> None:
    f = flavor("small", vcpus=1, mem=1024)
    table = HostTable.from_fleet(fleet([host(f"h{i}", vcpus=8, mem=8192) for i in range(4)], [f]))
    sched = scheduler(driver="chance")
    decision, (why,) = explain_placement(sched, table, RequestSpec(flavor="small", seed=3), NOW)
    assert why.draw == "chance"
    assert why.winner.host == decision.hosts[0]
    assert why.scales == ()
    assert "drawn uniformly" in why.summary()
