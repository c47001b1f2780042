from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.cloud.driver import HostPower
from berth.core.defrag import apply_moves
from berth.elastic.tidal import (
    DAY,
    HostView,
    TidalConfig,
    consolidate,
    forecast,
    host_views,
    plan_power,
)
from tests.builders import flavor, host, instance, scheduler, table_of

CFG = TidalConfig(days=3, lookahead=3600, quantile=1.0, margin=0.25, min_on=1, min_dwell=600)
ON, OFF = HostPower.ON, HostPower.OFF


def hv(
    name: str, used: float = 0, n: int = 0, power: HostPower = ON, *, pinned: bool = False
) -> HostView:
    return HostView(name, 16, used, n, power, since=0, pinned=pinned)


def test_forecast_is_the_same_window_on_previous_days_plus_margin() -> None:
    now = 10 * DAY + 9 * 3600  # 09:00
    samples = [(now - DAY + 1800, 40.0), (now - 2 * DAY + 600, 64.0), (now - DAY - 600, 500.0)]
    assert forecast(samples, now, 10.0, CFG) == pytest.approx(64 * 1.25)
    median = TidalConfig(days=3, quantile=0.5, margin=0.0)
    assert forecast(samples, now, 10.0, median) == pytest.approx(52.0)
    assert forecast([], now, 10.0, CFG) == pytest.approx(12.5)  # never below demand now


def test_powers_off_only_empty_hosts_beyond_the_forecast() -> None:
    hosts = [hv("a", 8, 1), hv("b"), hv("c"), hv("d", 4, 2)]
    plan = plan_power(hosts, [], 5000, current=12, config=CFG)  # needs 15 cores
    assert sorted(a.host for a in plan.actions if not a.on) == ["b", "c"]
    assert all("empty" in a.reason for a in plan.actions)
    assert plan.to_empty == 1  # one of the two busy hosts could go once emptied


def test_powers_on_ahead_of_the_daily_peak() -> None:
    now = 5 * DAY + 8 * 3600
    samples = [(now - d * DAY + 1200, 40.0) for d in (1, 2, 3)]  # 08:20 peak on past days
    hosts = [hv("a", 2, 1), hv("b", power=OFF), hv("c", power=OFF), hv("d", power=OFF)]
    plan = plan_power(hosts, samples, now, current=2, config=CFG)  # 50 cores: 3 more hosts
    assert [a.host for a in plan.actions if a.on] == ["b", "c", "d"]
    assert "forecast 50" in plan.actions[0].reason


def test_dwell_time_and_minimum_on() -> None:
    hosts = [HostView("a", 16, 0, 0, ON, since=4900), hv("b")]
    plan = plan_power(hosts, [], 5000, current=0, config=CFG)
    assert [a.host for a in plan.actions] == ["b"]  # a was powered on 100 s ago
    plan = plan_power([hv("b")], [], 5000, current=0, config=CFG)
    assert plan.actions == ()  # min_on = 1


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 5000)), min_size=1, max_size=12
    ),
    st.floats(0, 200),
    st.lists(st.tuples(st.floats(0, 7 * DAY), st.floats(0, 200)), max_size=20),
)
def test_never_powers_off_a_host_with_an_instance(hosts, current, samples) -> None:
    views = [
        HostView(f"h{i}", 16, 4.0 * n, n, ON if on else OFF, since)
        for i, (n, on, since) in enumerate(hosts)
    ]
    plan = plan_power(views, samples, 8 * DAY, current, CFG)
    by_name = {h.name: h for h in views}
    for a in plan.actions:
        h = by_name[a.host]
        assert h.power is (OFF if a.on else ON)
        if not a.on:
            assert h.instances == 0
            assert h.used_cores == 0
    on_after = sum(h.cores for h in views if h.power is ON)
    on_after += sum((16 if a.on else -16) for a in plan.actions)
    if any(not a.on for a in plan.actions):
        assert on_after >= plan.forecast  # powering off never cuts below the forecast


def test_consolidate_empties_hosts_with_the_defrag_planner() -> None:
    f2 = flavor("f2", vcpus=2, mem=512)
    hosts = [host(f"h{i}", vcpus=8, mem=8192) for i in range(3)]
    hosts.append(host("h3", vcpus=8, mem=8192, enabled=False))  # powered off: disabled first
    insts = [instance("i1", "h0", "f2"), instance("i2", "h1", "f2"), instance("i3", "h2", "f2")]
    table = table_of(hosts, [f2], insts)
    power = {**dict.fromkeys(table.names, ON), "h3": OFF}
    plan = plan_power(host_views(table, power, {}), [], 5000, current=6, config=CFG)
    assert plan.actions == ()  # nothing empty to power off
    assert plan.to_empty == 2  # 7.5 cores wanted: one 8-core host is enough
    assert plan.empty == ("h0", "h1")
    moves = consolidate(table, plan.empty, scheduler(), now=5000, max_migrations=3)
    assert moves is not None
    assert all(m.target not in ("h3", "h0", "h1") for m in moves.moves)
    assert sorted(m.source for m in moves.moves) == ["h0", "h1"]
    assert moves.target.drain == ("h0", "h1")
    apply_moves(table, moves.moves)
    after = plan_power(host_views(table, power, {}), [], 5000, current=6, config=CFG)
    assert len([a for a in after.actions if not a.on]) == 2
    assert after.empty == ()
    assert consolidate(table, after.empty, scheduler(), now=5000, max_migrations=3) is None
    # a budget of one migration empties one host, never half of two
    table = table_of(hosts, [f2], insts)
    one = consolidate(table, ("h0", "h1"), scheduler(), now=5000, max_migrations=1)
    assert one is not None
    assert [(m.source, m.instance_id) for m in one.moves] == [("h0", "i1")]


def test_hosts_being_emptied_go_off_first_and_come_back_when_the_forecast_needs_them() -> None:
    hosts = [
        HostView("a", 16, 0, 0, ON, 0, emptying=True),  # emptied by a consolidation
        HostView("b", 16, 4, 1, ON, 0, emptying=True),  # still being emptied
        hv("c", 4, 1),
        hv("d"),
    ]
    plan = plan_power(hosts, [], 5000, current=4, config=CFG)  # 5 cores: c covers it
    assert [(a.host, a.on) for a in plan.actions] == [("a", False), ("d", False)]
    assert not plan.release
    assert plan.empty == ()
    plan = plan_power(hosts, [], 5000, current=28, config=CFG)  # 35 cores > c and d
    assert plan.release  # b goes back into service; a, empty, may still go like any host
    assert [(a.host, a.on) for a in plan.actions] == [("a", False)]
    assert plan.empty == ()


def test_a_pinned_host_is_never_powered_off_nor_emptied() -> None:
    hosts = [hv("a", pinned=True), hv("b", 4, 1, pinned=True), hv("c", 4, 1), hv("d", 4, 1)]
    plan = plan_power(hosts, [], 5000, current=8, config=CFG)
    assert all(a.host not in ("a", "b") for a in plan.actions)
    assert "a" not in plan.empty
    assert "b" not in plan.empty
    assert plan.empty == ("c", "d")  # a and b stay on: min_on is kept


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.booleans(), st.booleans(), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.floats(0, 200),
    st.integers(0, 6),
)
def test_what_it_empties_fits_the_budget_and_leaves_the_forecast_covered(
    hosts, current, max_migrations
) -> None:
    config = TidalConfig(min_on=1, min_dwell=0, margin=0.0, max_migrations=max_migrations)
    views = [
        HostView(f"h{i}", 16, 4.0 * n, n, ON if on else OFF, 0, pinned=pin, emptying=em and on)
        for i, (n, on, pin, em) in enumerate(hosts)
    ]
    plan = plan_power(views, [], 8 * DAY, current, config)
    by_name = {h.name: h for h in views}
    chosen = [by_name[h] for h in plan.empty]
    assert len(set(plan.empty)) == len(plan.empty) == plan.to_empty
    assert all(h.power is ON and h.instances and not h.pinned and not h.emptying for h in chosen)
    assert sum(h.instances for h in chosen) <= max_migrations
    assert all(not by_name[a.host].pinned for a in plan.actions if not a.on)
    if plan.empty:
        assert not plan.release
        going = {h.name for h in chosen} | {a.host for a in plan.actions if not a.on}
        going |= {h.name for h in views if h.emptying}
        staying = [h for h in views if h.power is ON and h.name not in going]
        assert len(staying) >= config.min_on
        assert sum(h.cores for h in staying) >= plan.forecast
        free = sum(h.cores - h.used_cores for h in staying)
        assert sum(h.used_cores for h in chosen) <= free


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=2, max_size=5),
    st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True),
    st.integers(0, 6),
)
def test_consolidate_empties_whole_hosts_and_moves_nothing_else(loads, pick, budget) -> None:
    f2 = flavor("f2", vcpus=2, mem=512)
    hosts = [host(f"h{i}", vcpus=8, mem=8192) for i in range(len(loads))]
    hosts.append(host("off", vcpus=8, mem=8192, enabled=False))
    insts = [instance(f"i{i}-{k}", f"h{i}", "f2") for i, n in enumerate(loads) for k in range(n)]
    table = table_of(hosts, [f2], insts)
    wanted = [f"h{i}" for i in pick if i < len(loads)]
    plan = consolidate(table, wanted, scheduler(), now=5000, max_migrations=budget)
    if plan is None:
        return
    drained = set(plan.target.drain)
    assert drained
    assert drained <= set(wanted)
    assert all(m.source in drained and m.target not in drained | {"off"} for m in plan.moves)
    assert len(plan.moves) <= budget
    apply_moves(table, plan.moves)  # all or nothing: raises on any over-commit
    for h in drained:
        assert int(table.n_instances[table.index[h]]) == 0
    assert (table.host_free >= 0).all()
    assert (table.cell_free >= 0).all()
