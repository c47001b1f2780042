"""`HostOnlyCosts` (the fragmentation weigher's every-flavor cost for floating flavors) is exact.

Random fleets of floating flavors, random claims, releases, decisions (tentative claims and
their undo included) and copies: the kept ``-cost`` of every flavor on every host must equal
the general path's vectorised formula (`vector.place`, `vector.count`, float32 reference by
reference), and the berth profile must place exactly as with the per-flavor cache alone.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core import host_only_costs
from berth.core.config import profile
from berth.core.engine import FilterScheduler, commit
from berth.core.errors import ClaimError
from berth.core.explain import NoValidHost
from berth.core.flavors import NumaMode
from berth.core.host_only_costs import HostOnlyCosts, host_only
from berth.core.model import Fleet
from berth.core.numa import vector
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from tests.builders import NOW, flavor, fleet
from tests.core.strategies import examples, hosts

BERTH = FilterScheduler.from_config(profile("berth"))
_KEY = "fragmentation host-only"


@st.composite
def floating_fleets(draw: st.DrawFn) -> Fleet:
    n = draw(st.integers(1, 6))
    host_list = [draw(hosts(f"h{i}")) for i in range(n)]
    flavors = [
        flavor(
            f"f{k}",
            vcpus=draw(st.integers(1, 6)),
            mem=draw(st.integers(1, 16)) * 256,
            disk=draw(st.sampled_from([0, 0, 10, 40])),
        )
        for k in range(draw(st.integers(1, 6)))
    ]
    return fleet(host_list, flavors)


def _fresh(table: HostTable, placed: str, refs: list[str]) -> np.ndarray:
    """``-cost`` on every host as the general path computes it (before counts int32)."""
    d = table.demand(placed)
    cf, hf = table.cell_free, table.host_free
    cell_use, host_use = vector.place(d, cf, hf)
    cost = np.zeros(len(table), dtype=np.float32)
    for name in refs:
        r = table.demand(name)
        before = vector.count(r, cf, hf).astype(np.int32)
        cost += r.spec.vcpus * (before - vector.count(r, cf - cell_use, hf - host_use))
    return np.negative(cost, dtype=np.float64)


def _store(table: HostTable, refs: list[str]) -> HostOnlyCosts:
    store = HostOnlyCosts.build(table, [table.demand(n) for n in refs])
    assert store is not None
    return store


@settings(max_examples=examples(0.6), deadline=None)
@given(fleet=floating_fleets(), data=st.data())
def test_kept_costs_equal_a_fresh_computation(fleet: Fleet, data: st.DataObject) -> None:
    """Read after every step or after several (many changed hosts at once)."""
    _follow_changes(fleet, data)


def _follow_changes(fleet: Fleet, data: st.DataObject) -> None:
    table = HostTable.from_fleet(fleet)
    names = sorted(table.flavors)
    assert all(host_only(table.demand(n)) and table.demand(n).mode == NumaMode.NONE for n in names)
    refs = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    store = _store(table, refs)
    for step in range(14):
        action = data.draw(st.sampled_from(["read", "claim", "release", "decide", "copy"]))
        name = data.draw(st.sampled_from(names))
        if action == "claim":
            with contextlib.suppress(ClaimError):
                table.claim(f"c{step}", data.draw(st.sampled_from(table.names)), name)
        elif action == "release" and table.allocations:
            table.release(data.draw(st.sampled_from(sorted(table.allocations))))
        elif action == "decide":
            count = data.draw(st.sampled_from([1, 2]))
            ids = tuple(f"d{step}-{i}" for i in range(count))
            request = RequestSpec(flavor=name, num_instances=count, seed=step, instance_ids=ids)
            try:
                decision = BERTH.select_destinations(table, request, NOW)
            except NoValidHost:
                continue
            if data.draw(st.booleans()):
                commit(table, decision)
        elif action == "copy":
            table = table.copy()
            store = _store(table, refs)
        if action != "read" and data.draw(st.integers(0, 2)):
            continue  # read later, after more changes
        for placed in names if action == "read" else [name]:
            got = store.row(table, table.demand(placed))
            assert got is not None
            assert np.array_equal(got, _fresh(table, placed, refs)), placed


@settings(max_examples=examples(0.4), deadline=None)
@given(fleet=floating_fleets(), data=st.data(), room=st.sampled_from([None, 0, 2]))
def test_berth_places_as_with_the_per_flavor_cache(
    fleet: Fleet, data: st.DataObject, room: int | None
) -> None:
    """Also when the store holds no flavor or only two (`MAX_VALUES`): the rest fall back."""
    with pytest.MonkeyPatch.context() as mp:
        if room is not None:
            mp.setattr(host_only_costs, "MAX_VALUES", room * len(fleet.hosts))
        _place_twice(fleet, data)


def _place_twice(fleet: Fleet, data: st.DataObject) -> None:
    fast = HostTable.from_fleet(fleet)
    slow = fast.copy()
    names = sorted(fast.flavors)
    for step in range(12):
        name = data.draw(st.sampled_from(names))
        if fast.allocations and data.draw(st.integers(0, 2)) == 0:
            victim = data.draw(st.sampled_from(sorted(fast.allocations)))
            fast.release(victim)
            slow.release(victim)
            continue
        for key in [k for k in slow._state if isinstance(k, tuple) and k[0] == _KEY]:
            slow._state[key] = None  # the weigher's per-flavor path (HostTable.derived)
        seed = data.draw(st.integers(0, 2**40))
        request = RequestSpec(flavor=name, seed=seed, instance_ids=(f"i{step}",))
        outcomes: list[object] = []
        for table in (fast, slow):
            try:
                decision = BERTH.select_destinations(table, request, NOW)
            except NoValidHost as exc:
                outcomes.append(str(exc))
                continue
            outcomes.append(decision.hosts + [s.alternates for s in decision.selections])
            commit(table, decision)
        assert outcomes[0] == outcomes[1]


def test_the_weigher_keeps_every_placed_flavor_for_floating_fleets() -> None:
    from tests.builders import host, table_of

    table = table_of(
        [host(f"h{i}", vcpus=16, mem=16384) for i in range(4)],
        [flavor("small", vcpus=1, mem=512), flavor("big", vcpus=8, mem=8192)],
    )
    for k, name in enumerate(["small", "big", "small"]):
        BERTH.place_one(table, RequestSpec(flavor=name), NOW, instance_id=f"i{k}", seed=k)
    (store,) = [v for k, v in table._state.items() if isinstance(k, tuple) and k[0] == _KEY]
    assert isinstance(store, HostOnlyCosts)
    assert sorted(store.flavors) == ["big", "small"]
    for name in ("small", "big"):
        got = store.row(table, table.demand(name))
        assert got is not None
        assert np.array_equal(got, _fresh(table, name, ["big", "small"]))


def test_hosts_with_equal_vcpus_and_unequal_memory_differ() -> None:
    """A host's cost depends on every column a reference needs, not on its vCPUs alone."""
    from tests.builders import host, table_of

    table = table_of(
        [host(f"h{i}", vcpus=16, mem=16384) for i in range(3)],
        [
            flavor("cpu", vcpus=2, mem=512),
            flavor("mem", vcpus=2, mem=8192),
            flavor("ref", vcpus=4, mem=4096),
        ],
    )
    store = _store(table, ["ref"])
    for step, (name, row) in enumerate([("cpu", 0), ("mem", 1), ("cpu", 2), ("mem", 0)]):
        table.claim(f"x{step}", table.names[row], name)
        for placed in ("cpu", "mem", "ref"):
            got = store.row(table, table.demand(placed))
            assert got is not None
            assert np.array_equal(got, _fresh(table, placed, ["ref"])), (step, placed)
