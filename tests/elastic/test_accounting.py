from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.elastic.accounting import Rates, Transition, VmInfo, rows_to_csv, usage
from berth.elastic.model import VmState

H = 3600.0
DAY = 86_400.0
INFO = {
    "v1": VmInfo("v1", "besiii", cores=4, memory_mb=8192, flavor="c4"),
    "v2": VmInfo("v2", "juno", cores=8, memory_mb=16384, flavor="gpu", user="alice"),
}


def test_booting_joined_draining_are_charged_requested_is_not() -> None:
    hist = [
        Transition("v1", VmState.REQUESTED, 0),
        Transition("v1", VmState.BOOTING, 1 * H),
        Transition("v1", VmState.JOINED, 2 * H),
        Transition("v1", VmState.DRAINING, 5 * H),
        Transition("v1", VmState.RETIRED, 6 * H),
    ]
    (row,) = usage(hist, INFO, Rates(), until=100 * H)
    assert row.day == "1970-01-01"
    assert (row.group, row.user, row.vms) == ("besiii", "besiii", 1)
    assert row.vm_hours == pytest.approx(5.0)
    assert row.cpu_hours == pytest.approx(20.0)
    assert row.memory_gb_hours == pytest.approx(40.0)


def test_split_at_midnight_with_offset_and_open_vm_charged_until_now() -> None:
    hist = [Transition("v2", VmState.BOOTING, DAY - 2 * H)]
    rows = usage(hist, INFO, Rates(), until=DAY + 3 * H)
    assert [(r.day, r.vm_hours) for r in rows] == [("1970-01-01", 2.0), ("1970-01-02", 3.0)]
    rows = usage(hist, INFO, Rates(), until=DAY + 3 * H, utc_offset=8 * H)  # UTC+8
    assert [(r.day, r.vm_hours) for r in rows] == [("1970-01-02", 5.0)]


def test_points_use_per_attribute_rates_and_factors() -> None:
    rates = Rates(
        per_vm_hour=1,
        per_core_hour=0.5,
        per_gb_hour=0.25,
        group_factor={"juno": 2.0},
        flavor_factor={"gpu": 3.0},
    )
    hist = [Transition("v2", VmState.BOOTING, 0), Transition("v2", VmState.LOST, 2 * H)]
    (row,) = usage(hist, INFO, rates, until=10 * H)
    assert row.user == "alice"
    assert row.points == pytest.approx(2 * (1 + 8 * 0.5 + 16 * 0.25) * 2.0 * 3.0)


def test_failed_boot_is_charged_for_its_boot_only_and_csv_round_trips() -> None:
    hist = [
        Transition("v1", VmState.BOOTING, 0),
        Transition("v1", VmState.FAILED, 900),
        Transition("v1", VmState.JOINED, 1800),  # after a terminal state: ignored
    ]
    rows = usage(hist, INFO, Rates(), until=10 * H)
    assert rows[0].vm_hours == pytest.approx(0.25)
    parsed = list(csv.DictReader(io.StringIO(rows_to_csv(rows))))
    assert parsed[0]["group"] == "besiii"
    assert float(parsed[0]["cpu_hours"]) == pytest.approx(1.0)


def test_unknown_vm_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"vms\[ghost\]"):
        usage([Transition("ghost", VmState.BOOTING, 0)], INFO, Rates(), until=H)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(VmState)), st.floats(0, 5 * DAY)), max_size=12))
def test_hours_add_up_whatever_the_day_split(moves: list[tuple[VmState, float]]) -> None:
    hist = [Transition("v1", s, t) for s, t in moves]
    rows = usage(hist, INFO, Rates(), until=6 * DAY)
    total = sum(r.vm_hours for r in rows)
    assert all(r.cpu_hours == pytest.approx(4 * r.vm_hours) for r in rows)
    assert 0 <= total <= 6 * 24 + 1e-9
    shifted = usage(hist, INFO, Rates(), until=6 * DAY, utc_offset=5 * H)
    assert sum(r.vm_hours for r in shifted) == pytest.approx(total)
