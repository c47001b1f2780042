"""`FilterScheduler.place_one` places exactly as `select_destinations` + `commit` would.

The lean path skips the decision object, the alternates and the sort of the top slice; every
pick, footprint and failure must still be the general path's, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.config import PROFILES
from berth.core.engine import FilterScheduler, commit
from berth.core.errors import SpecError
from berth.core.explain import NoValidHost
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from tests.builders import NOW, flavor, host, request, scheduler, snapshot, table_of
from tests.core.strategies import examples, fleets

SCHEDULERS: dict[str, dict[str, Any]] = {
    **{name: {"weighers": list(PROFILES[name])} for name in PROFILES},
    "no_weighers": {},
    "chance": {"driver": "chance"},
    "subset3": {"weighers": {"ram": -1.0}, "host_subset_size": 3},
    "one_attempt": {"weighers": {"ram": 1.0}, "max_attempts": 1},
    "ten_attempts": {"weighers": {"vcpu": -1.0, "ram": 0.5}, "max_attempts": 10},
}


def general(
    sched: FilterScheduler, table: HostTable, tmpl: RequestSpec, iid: str, seed: int
) -> str:
    """The reference: copy the request, decide, commit; the host or the failure text."""
    req = tmpl.model_copy(update={"instance_ids": (iid,), "seed": seed})
    try:
        decision = sched.select_destinations(table, req, NOW)
    except NoValidHost as exc:
        return f"fail: {exc}"
    commit(table, decision)
    return decision.hosts[0]


def lean(sched: FilterScheduler, table: HostTable, tmpl: RequestSpec, iid: str, seed: int) -> str:
    try:
        return sched.place_one(table, tmpl, NOW, instance_id=iid, seed=seed).host
    except NoValidHost as exc:
        return f"fail: {exc}"


def same_state(a: HostTable, b: HostTable) -> None:
    """Every column, allocation (exact footprint) and group membership alike."""
    sa, sb = snapshot(a), snapshot(b)
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, sb[key], equal_nan=value.dtype.kind == "f"), key
        else:
            assert value == sb[key], key


@settings(max_examples=examples(1.0), deadline=None)
@given(
    fleet=fleets(min_hosts=1, max_hosts=9, extra_flavors=4),
    config=st.sampled_from(sorted(SCHEDULERS)),
    steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**40), st.booleans()), max_size=30),
)
def test_place_one_equals_select_and_commit(fleet, config, steps):
    a = HostTable.from_fleet(fleet)
    b = a.copy()
    sched = scheduler(**SCHEDULERS[config])
    names = [f.name for f in fleet.flavors]
    placed: list[str] = []
    for k, (f, seed, release) in enumerate(steps):
        if release and placed:
            victim = placed.pop(seed % len(placed))
            a.release(victim)
            b.release(victim)
            continue
        tmpl = RequestSpec(flavor=names[f % len(names)])
        iid = f"i{k}"
        want = general(sched, a, tmpl, iid, seed)
        got = lean(sched, b, tmpl, iid, seed)
        assert got == want
        if not want.startswith("fail"):
            placed.append(iid)
    same_state(a, b)


def ties_table(free_mem: list[int]) -> HostTable:
    """Hosts alike but for their free memory (one 1 GiB instance used per step below)."""
    hosts = [host(f"h{i:02d}", vcpus=64, mem=8192) for i in range(len(free_mem))]
    table = table_of(hosts, [flavor("g1", vcpus=1, mem=1024), flavor("f", vcpus=1, mem=512)])
    for i, free in enumerate(free_mem):
        for k in range((8192 - free) // 1024):
            table.claim(f"pre-{i}-{k}", f"h{i:02d}", "g1")
    return table


@pytest.mark.parametrize(
    ("free_mem", "case"),
    [
        ([8192] * 12, "all hosts tie: the pool is every host, in row order"),
        ([8192, 8192] + [4096] * 10, "two tie, fewer than max_attempts: argpartition's order"),
        ([8192, 8192, 8192] + [4096] * 9, "exactly max_attempts tie"),
        ([8192] * 5 + [4096] * 7, "more than max_attempts tie"),
        ([4096] * 11 + [8192], "one best host"),
        ([8192, 4096, 8192], "no more hosts than attempts: the general pick"),
    ],
)
def test_tie_breaking_cases(free_mem, case):
    for seed in range(40):
        for weighers in ({"ram": 1.0}, {"ram": -1.0}, {}):
            a = ties_table(free_mem)
            b = a.copy()
            sched = scheduler(weighers=weighers)
            tmpl = request("f")
            for step in range(3):
                want = general(sched, a, tmpl, f"x{step}", seed + step)
                got = lean(sched, b, tmpl, f"x{step}", seed + step)
                assert got == want, case
            same_state(a, b)


def test_failure_diagnosis_is_the_same():
    hosts = [host("a", vcpus=2, mem=1024), host("b", vcpus=8, mem=512)]
    table = table_of(hosts, [flavor("big", vcpus=4, mem=2048)])
    sched = scheduler()
    tmpl = request("big")
    with pytest.raises(NoValidHost) as lean_err:
        sched.place_one(table, tmpl, NOW, instance_id="x", seed=1)
    with pytest.raises(NoValidHost) as general_err:
        sched.select_destinations(table, tmpl, NOW)
    assert lean_err.value.diagnosis == general_err.value.diagnosis
    assert str(lean_err.value) == "0/2 hosts fit: 2 less than 2048 MB free RAM"
    assert not table.allocations


def test_place_one_checks_its_inputs():
    table = table_of([host("a")], [flavor("f", vcpus=1, mem=512)])
    sched = scheduler()
    sched.place_one(table, request("f"), NOW, instance_id="x", seed=0)
    with pytest.raises(SpecError, match="instance_ids: 'x' already exists"):
        sched.place_one(table, request("f"), NOW, instance_id="x", seed=0)
    with pytest.raises(SpecError, match="num_instances"):
        sched.place_one(table, request("f", num_instances=2), NOW, instance_id="y", seed=0)
    with pytest.raises(SpecError, match="unknown server group"):
        sched.place_one(table, request("f", server_group="nope"), NOW, instance_id="y", seed=0)
    with pytest.raises(SpecError, match="unknown flavor"):
        sched.place_one(table, request("zzz"), NOW, instance_id="y", seed=0)
