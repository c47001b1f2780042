"""What would make it fit (`berth.policy.why_not`): every way out it reports, applied by hand to
the table, makes the request fit; the table it was asked about is unchanged."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from berth.core.defrag.execute import apply_moves
from berth.core.errors import BerthError
from berth.core.explain import NoValidHost
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.fleet.io import load_fleet
from berth.policy.why_not import (
    ORDER,
    WayOut,
    WhyNotOptions,
    family_by_name,
    why_not,
    why_not_fleet,
)
from tests.builders import NOW, flavor, fleet, host, scheduler
from tests.core.strategies import examples, tables

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "why-not-fleet.yaml"


def _apply(table: HostTable, way: WayOut, request: RequestSpec) -> RequestSpec:
    """Carry out `way` on `table` as an operator would; the request to place then."""
    for name in way.hosts:
        table.set_enabled(name, True)
    if way.moves:
        apply_moves(table, way.moves)
    for iid in way.evictions:
        table.release(iid)
    if way.flavor is not None:
        return request.model_copy(update={"flavor": way.flavor})
    return request


@settings(max_examples=examples(0.5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(min_hosts=1, max_hosts=6, extra_flavors=4), data=st.data())
def test_every_way_out_applied_makes_the_request_fit(table: HostTable, data: st.DataObject) -> None:
    names = sorted(table.flavors)
    hosts = data.draw(st.lists(st.sampled_from(table.names), min_size=1, max_size=4))
    for k in range(data.draw(st.integers(0, 24))):  # fill a few hosts; some preemptible
        project = data.draw(st.sampled_from(["batch", "web"]))
        with contextlib.suppress(BerthError):
            table.claim(
                f"c{k}",
                hosts[k % len(hosts)],
                data.draw(st.sampled_from(names)),
                project=project,
            )
    for name in data.draw(st.lists(st.sampled_from(table.names), max_size=2, unique=True)):
        table.set_enabled(name, False)
    sched = scheduler(weighers={"ram": -1.0})
    flavor = data.draw(st.sampled_from(names))
    request = RequestSpec(flavor=flavor, instance_ids=("new",))
    before = (table.host_free.copy(), table.generation.copy(), table.enabled.copy())
    answer = why_not(
        sched,
        table,
        request,
        NOW,
        preemptible=lambda a: a.project == "batch",
        family=names,
        options=WhyNotOptions(max_moves=2),
    )
    assert np.array_equal(table.host_free, before[0])
    assert np.array_equal(table.generation, before[1])
    assert np.array_equal(table.enabled, before[2])
    if answer.fits_now:
        sched.select_destinations(table, request, NOW)  # it does
        return
    with pytest.raises(NoValidHost):
        sched.select_destinations(table, request, NOW)
    kinds = [ORDER.index(w.kind) for w in answer.options]
    assert kinds == sorted(kinds)
    for way in answer.options:
        event(way.kind)
        assert way.fits
        trial = table.copy()
        then = _apply(trial, way, request)
        decision = sched.select_destinations(trial, then, NOW)  # raises if it does not fit
        assert decision.hosts[0] == way.check_host
        if way.kind == "evict":
            assert all(table.allocations[i].project == "batch" for i in way.evictions)
        if way.kind == "smaller_flavor":
            spec, want = table.flavors[then.flavor], table.flavors[flavor]
            assert spec.vcpus <= want.vcpus
            assert spec.memory_mb <= want.memory_mb


@st.composite
def crowded(draw: st.DrawFn) -> HostTable:
    """2-5 alike hosts (floating or pinned guests), each with a small instance or more: the
    big flavor, which needs a whole host, fits nowhere though the room is often there."""
    pinned = draw(st.booleans())
    pcpus, vcpus = (8, 0) if pinned else (0, 8)  # one m.xl fills a host
    names = [f"h{i}" for i in range(draw(st.integers(2, 5)))]
    if draw(st.booleans()):
        names.append("off")  # an empty disabled host
    hosts = [host(n, mem=32768, pcpus=pcpus, vcpus=vcpus, enabled=n != "off") for n in names]
    flavors = [
        flavor(f"m.{n}", vcpus=v, mem=2048 * v, pinned=pinned, numa=1 if pinned else None)
        for n, v in (("s", 1), ("m", 2), ("l", 4), ("xl", 8))
    ]
    table = HostTable.from_fleet(fleet(hosts, flavors))
    # one instance on every host (no host is empty), then more on hosts drawn at random
    on = [n for n in table.names if n != "off"]
    spots = on + draw(st.lists(st.sampled_from(on), max_size=6 * len(on)))
    for k, where in enumerate(spots):
        size = draw(st.sampled_from(["m.s", "m.m", "m.l"]))
        project = draw(st.sampled_from(["batch", "web"]))
        with contextlib.suppress(BerthError):
            table.claim(f"c{k}", where, size, project=project)
    return table


@settings(max_examples=examples(0.4), deadline=None)
@given(table=crowded(), max_moves=st.integers(1, 3))
def test_on_crowded_hosts_every_way_out_applied_makes_room(
    table: HostTable, max_moves: int
) -> None:
    sched = scheduler(weighers={"ram": -1.0})
    request = RequestSpec(flavor="m.xl", instance_ids=("new",))
    answer = why_not(
        sched,
        table,
        request,
        NOW,
        preemptible=lambda a: a.project == "batch",
        family=["m.s", "m.m", "m.l"],
        options=WhyNotOptions(max_moves=max_moves),
    )
    for way in answer.options:
        event(way.kind)
        trial = table.copy()
        decision = sched.select_destinations(trial, _apply(trial, way, request), NOW)
        assert decision.hosts[0] == way.check_host
        if way.kind == "migrate":
            assert 1 <= len(way.moves) <= max_moves
        if way.kind == "enable_host":
            assert way.hosts == ("off",)
    assert answer.fits_now is False  # every enabled host holds an instance
    assert ("off" in table.index) == ("enable_host" in [w.kind for w in answer.options])


def test_the_example_fleet_has_all_four_ways_out_cheapest_first() -> None:
    model = load_fleet(EXAMPLE)
    table = HostTable.from_fleet(model)
    sched = scheduler(weighers={"ram": -1.0})
    assert model.now is not None
    answer = why_not_fleet(
        sched, table, "m1.xlarge", model.now, WhyNotOptions(preemptible_projects=("batch",))
    )
    assert not answer.fits_now
    assert [w.kind for w in answer.options] == list(ORDER)
    enable, migrate, evict, smaller = answer.options
    assert enable.hosts == ("h3",)
    assert [m.instance_id for m in migrate.moves] == ["db-1"]
    assert migrate.price == 16.0  # GiB of the m1.large moved
    assert set(evict.evictions) == {"batch-1", "batch-2"}
    assert evict.price == 8.0
    assert smaller.flavor == "m1.large"
    assert smaller.price == 8.0


def test_without_preemptible_projects_no_eviction_is_offered() -> None:
    model = load_fleet(EXAMPLE)
    table = HostTable.from_fleet(model)
    assert model.now is not None
    answer = why_not_fleet(scheduler(), table, "m1.xlarge", model.now)
    assert "evict" not in [w.kind for w in answer.options]
    assert any("preemptible" in n for n in answer.notes)


def test_a_request_that_fits_says_so() -> None:
    model = load_fleet(EXAMPLE)
    table = HostTable.from_fleet(model)
    assert model.now is not None
    answer = why_not_fleet(scheduler(), table, "m1.small", model.now)
    assert answer.fits_now
    assert answer.host in {"h1", "h2", "h4"}
    assert answer.options == ()


@pytest.mark.parametrize(
    ("flavor", "family"),
    [
        ("c3.4xlarge.numa1", ["c3.large.numa1", "c3.xlarge.numa1"]),
        ("c3.4xlarge", ["c3.large", "c3.xlarge"]),
        ("m1.xlarge", ["m1.large"]),
        ("solo", []),
    ],
)
def test_family_by_name(flavor: str, family: list[str]) -> None:
    names = [
        "c3.large",
        "c3.large.numa1",
        "c3.xlarge",
        "c3.xlarge.numa1",
        "c3.4xlarge",
        "c3.4xlarge.numa1",
        "g3.large.numa1",
        "m1.large",
        "m1.xlarge",
        "solo",
    ]
    assert sorted(family_by_name(names, flavor)) == sorted(family)


def test_a_host_marked_for_drain_is_offered_as_undrain() -> None:
    model = load_fleet(EXAMPLE)
    table = HostTable.from_fleet(model)
    assert model.now is not None
    options = WhyNotOptions(draining=frozenset({"h3"}))
    answer = why_not_fleet(scheduler(), table, "m1.xlarge", model.now, options)
    assert answer.options[0].summary == "undrain host h3"


def test_family_from_the_catalogue_keeps_family_and_variant() -> None:
    from berth.policy.catalogue import Catalogue
    from berth.policy.demo import build_demo_policy
    from berth.policy.why_not import family_from_catalogue

    cat = Catalogue(build_demo_policy())
    flavor = max(cat.origin, key=lambda f: (cat.flavors[f].vcpus, f))
    base, variant = cat.origin[flavor]
    family = family_from_catalogue(cat, flavor)
    assert family
    assert flavor not in family
    for name in family:
        b, v = cat.origin[name]
        assert v == variant
        assert cat.bases[b].family == cat.bases[base].family
    assert family_from_catalogue(cat, "not-a-flavor") == []
