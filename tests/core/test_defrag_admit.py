"""Admission by migration (`berth.core.defrag.admit.plan_admission`).

Table-driven cases with the exact expected moves, then properties over random fragmented
fleets: the table is never changed; a returned admission applies (`apply_moves`), respects the
budget, and makes the request fit on its host under the scheduler's own filters; with every
host searched, one migration is found whenever one exists (brute force).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from berth.core.config import profile
from berth.core.defrag import apply_moves
from berth.core.defrag.admit import plan_admission
from berth.core.defrag.rules import TargetRules, immovable
from berth.core.engine import FilterScheduler
from berth.core.filters.base import Context
from berth.core.flavors import parse_flavor
from berth.core.model import Instance
from berth.core.request import RequestSpec
from berth.core.resources import H_MEM, H_VCPU
from berth.core.table import HostTable
from tests.builders import NOW, assert_unchanged, flavor, group, host, instance, snapshot, table_of
from tests.core.test_defrag_properties import fragmented

SCHED = FilterScheduler.from_config(profile("berth"))

TINY = flavor("tiny", vcpus=1, mem=1024)
SMALL = flavor("small", vcpus=2, mem=2048)
MEDIUM = flavor("medium", vcpus=6, mem=2048)
SIXER = flavor("sixer", vcpus=6, mem=6144)
LARGE = flavor("large", vcpus=8, mem=8192)
FLAVORS = [TINY, SMALL, MEDIUM, SIXER, LARGE]


def box(name: str, **kw: Any) -> Any:
    return host(name, vcpus=8, mem=8192, **kw)


def pinned(inst: Instance) -> Instance:
    return inst.model_copy(update={"migratable": False})


CASES: dict[str, dict[str, Any]] = {
    "one move empties a host for the large flavor": {
        "hosts": [box("a"), box("b")],
        "instances": [instance("s1", "a", "small"), pinned(instance("m1", "b", "medium"))],
        "request": "large",
        "admission": ("a", [("s1", "a", "b")]),
    },
    "the smallest instance that covers the shortfall moves": {
        "hosts": [box("a"), box("b")],
        "instances": [
            instance("s1", "a", "small"),
            instance("t1", "a", "tiny"),
            pinned(instance("m1", "b", "medium")),
        ],
        "request": "sixer",  # a misses 1 vCPU and 1 GB: tiny covers it, small is bigger
        "admission": ("a", [("t1", "a", "b")]),
    },
    "the host missing least is tried first": {
        "hosts": [box("a"), box("b"), box("c")],
        "instances": [
            instance("s1", "a", "small"),
            instance("s2", "a", "small"),  # a misses 2 vCPUs and 2 GB
            instance("s3", "b", "small"),
            instance("t1", "b", "tiny"),  # b misses 1 vCPU and 1 GB
            pinned(instance("m1", "c", "medium")),
        ],
        "request": "sixer",
        "admission": ("b", [("t1", "b", "c")]),
    },
    "the moved instance goes where it fits tightest": {
        "hosts": [box("a"), box("b"), box("c")],
        "instances": [
            instance("s1", "a", "small"),
            pinned(instance("m1", "b", "medium")),  # b: 2 vCPUs left, exactly one small
            pinned(instance("t1", "c", "tiny")),  # c: 7 vCPUs left
            pinned(instance("s9", "c", "small")),  # c: 5 left, still roomier
        ],
        "request": "large",
        "admission": ("a", [("s1", "a", "b")]),
    },
    "nowhere to move the blocking instance": {
        "hosts": [box("a"), box("b")],
        "instances": [instance("s1", "a", "small"), pinned(instance("l1", "b", "large"))],
        "request": "large",
        "admission": None,
    },
    "an instance marked not migratable never moves": {
        "hosts": [box("a"), box("b")],
        "instances": [pinned(instance("s1", "a", "small")), pinned(instance("m1", "b", "medium"))],
        "request": "large",
        "admission": None,
    },
    "an affinity member never moves": {
        "hosts": [box("a"), box("b")],
        "instances": [
            instance("s1", "a", "small", group_id="aff"),
            pinned(instance("m1", "b", "medium")),
        ],
        "groups": [group("aff", "affinity")],
        "request": "large",
        "admission": None,
    },
    "anti-affinity keeps the moved instance off its peer's host": {
        "hosts": [box("a"), box("b"), box("c")],
        "instances": [
            instance("s1", "a", "small", group_id="anti"),
            pinned(instance("s2", "b", "small", group_id="anti")),
            pinned(instance("m1", "c", "medium")),
        ],
        "groups": [group("anti", "anti-affinity")],
        "request": "large",
        "admission": ("a", [("s1", "a", "c")]),
    },
    "one move is not enough; the budget allows one": {
        "hosts": [box("a"), box("b"), box("c")],
        "instances": [
            instance("s1", "a", "small"),
            instance("s2", "a", "small"),
            pinned(instance("m1", "b", "medium")),
            pinned(instance("m2", "c", "medium")),
        ],
        "request": "large",
        "admission": None,
    },
    "two moves with a budget of two, the largest first": {
        "hosts": [box("a"), box("b"), box("c")],
        "instances": [
            instance("s1", "a", "small"),
            instance("t1", "a", "tiny"),
            pinned(instance("m1", "b", "medium")),
            pinned(instance("m2", "c", "medium")),
        ],
        "request": "large",
        "budget": 2,
        "admission": ("a", [("s1", "a", "b"), ("t1", "a", "c")]),
    },
    "a pool's instance stays in its pool": {
        "hosts": [box("a", traits=["CUSTOM_A"]), box("b", traits=["CUSTOM_B"])],
        "instances": [instance("s1", "a", "small"), pinned(instance("m1", "b", "medium"))],
        "request": "large",
        "keep": ("CUSTOM_A", "CUSTOM_B"),
        "admission": None,
    },
    "without kept traits the pool does not matter": {
        "hosts": [box("a", traits=["CUSTOM_A"]), box("b", traits=["CUSTOM_B"])],
        "instances": [instance("s1", "a", "small"), pinned(instance("m1", "b", "medium"))],
        "request": "large",
        "admission": ("a", [("s1", "a", "b")]),
    },
}


@pytest.mark.parametrize("name", list(CASES))
def test_admission_cases(name: str) -> None:
    case = CASES[name]
    table = table_of(case["hosts"], FLAVORS, case["instances"], groups=case.get("groups", []))
    request = RequestSpec(flavor=case["request"])
    assert not (table.resource_counts(case["request"]) >= 1).any()  # fits nowhere yet
    before = snapshot(table)
    got = plan_admission(
        table,
        request,
        scheduler=SCHED,
        now=NOW,
        max_migrations=case.get("budget", 1),
        keep_traits=case.get("keep", ()),
    )
    assert_unchanged(table, before)
    want = case["admission"]
    if want is None:
        assert got is None
        return
    assert got is not None
    assert (got.host, [(m.instance_id, m.source, m.target) for m in got.moves]) == (
        want[0],
        want[1],
    )
    apply_moves(table, got.moves)
    alloc = SCHED.place_one(table, request, NOW, instance_id="new", seed=0)
    assert alloc.host == want[0]


def test_budget_zero_and_multi_instance_requests_admit_nothing() -> None:
    case = CASES["one move empties a host for the large flavor"]
    table = table_of(case["hosts"], FLAVORS, case["instances"])
    assert (
        plan_admission(
            table, RequestSpec(flavor="large"), scheduler=SCHED, now=NOW, max_migrations=0
        )
        is None
    )
    two = RequestSpec(flavor="large", num_instances=2)
    assert plan_admission(table, two, scheduler=SCHED, now=NOW) is None


# ---------------------------------------------------------------------------- properties


def _fits(table: HostTable, request: RequestSpec, row: int) -> bool:
    ctx = Context(table, request, table.demand(request.flavor), NOW)
    return all(bool(f.mask(ctx)[row]) for f in SCHED.filters)


def _one_move_exists(table: HostTable, request: RequestSpec) -> bool:
    """Brute force: some instance moves to some allowed host and the request then fits on the
    instance's old host."""
    rules = TargetRules(SCHED, NOW, np.zeros(len(table), dtype=bool))
    for alloc in list(table.allocations.values()):
        if immovable(table, alloc) is not None:
            continue
        source = table.index[alloc.host]
        for dest in np.flatnonzero(rules.mask(table, alloc)).tolist():
            moved = table.copy()
            cell_use, host_use = moved.plan_for(alloc.flavor, dest)
            moved.release(alloc.instance_id)
            moved.claim(
                alloc.instance_id,
                moved.names[dest],
                alloc.flavor,
                cell_use,
                host_use,
                server_group=alloc.server_group,
                project=alloc.project,
            )
            if _fits(moved, request, source):
                return True
    return False


@st.composite
def blocked(draw: st.DrawFn) -> tuple[HostTable, RequestSpec]:
    """A fragmented fleet and a request that fits nowhere, sized so that on some host one of
    its instances is in the way: the host's free vCPUs and memory plus that instance's (more
    than the host has left, so usually nowhere fits; draws where some host fits are skipped)."""
    table = draw(fragmented())
    allocs = sorted(table.allocations.values(), key=lambda a: a.instance_id)
    if not allocs:
        name = draw(st.sampled_from(sorted(table.flavors)))
        return table, RequestSpec(flavor=name)
    alloc = draw(st.sampled_from(allocs))
    row = table.index[alloc.host]
    vcpus = int(table.host_free[row, H_VCPU] + alloc.host_use[H_VCPU])
    mem = int(table.host_free[row, H_MEM] + alloc.host_use[H_MEM])
    extra = draw(st.sampled_from([(0, 0), (1, 0), (0, 256)]))
    spec = flavor("wanted", vcpus=max(1, vcpus - extra[0]), mem=max(256, mem - extra[1]))
    table.add_flavor(parse_flavor(spec, {}))
    return table, RequestSpec(flavor="wanted")


@settings(max_examples=80, deadline=None)
@given(case=blocked(), budget=st.integers(1, 3))
def test_admissions_apply_and_make_the_request_fit(
    case: tuple[HostTable, RequestSpec], budget: int
) -> None:
    table, request = case
    if (table.resource_counts(request.flavor) >= 1).any():
        event("fits already")
        return  # admission is for requests that fit nowhere
    before = snapshot(table)
    got = plan_admission(
        table, request, scheduler=SCHED, now=NOW, max_migrations=budget, max_hosts=len(table)
    )
    assert_unchanged(table, before)
    event("admitted" if got is not None else "not admitted")
    if budget == 1:
        assert (got is not None) == _one_move_exists(table, request)
    if got is None:
        return
    assert 1 <= len(got.moves) <= budget
    assert len({m.instance_id for m in got.moves}) == len(got.moves)
    assert all(m.source == got.host for m in got.moves)
    apply_moves(table, got.moves)
    assert (table.cell_free >= 0).all()
    assert (table.host_free >= 0).all()
    assert _fits(table, request, table.index[got.host])
    placed = SCHED.place_one(table, request, NOW, instance_id="new", seed=0)
    assert placed.host == got.host
