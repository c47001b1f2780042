"""The defragmentation planner on hand-made fleets with exactly expected plans.

Each case states the fleet, the target and the budget, and the plan the planner must find;
`check_plan` must accept every plan and applying it must reach the stated figures.
"""

from __future__ import annotations

from typing import Any

import pytest

from berth.core.config import SchedulerConfig, profile
from berth.core.defrag import (
    Budget,
    Move,
    Objective,
    Plan,
    PlanError,
    Target,
    apply_moves,
    check_plan,
    measure,
    plan_defrag,
    replan_move,
)
from berth.core.engine import FilterScheduler
from berth.core.errors import SpecError
from berth.core.model import Instance
from berth.core.resources import C_PCPU
from berth.core.table import HostTable
from tests.builders import (
    NOW,
    assert_unchanged,
    flavor,
    group,
    host,
    instance,
    snapshot,
    table_of,
)

SCHED = FilterScheduler.from_config(profile("berth"))


def plan(table: HostTable, target: Target, budget: Budget, **kw: Any) -> Plan:
    out = plan_defrag(table, target, budget, scheduler=SCHED, now=NOW, **kw)
    check_plan(table, out)
    check_plan(table, out, scheduler=SCHED, now=NOW)
    return out


def pinned(inst: Instance) -> Instance:
    return inst.model_copy(update={"migratable": False})


def where(table: HostTable) -> dict[str, str]:
    return {a.instance_id: a.host for a in table.allocations.values()}


def moved(p: Plan) -> list[tuple[str, str, str]]:
    return [(m.instance_id, m.source, m.target) for m in p.moves]


SMALL = flavor("small", vcpus=2, mem=2048)
TINY = flavor("tiny", vcpus=1, mem=1024)
MEDIUM = flavor("medium", vcpus=6, mem=2048)
LARGE = flavor("large", vcpus=8, mem=8192)
CAPACITY = Target(flavors=("large",))


# ---------------------------------------------------------------------------- exact plans

CASES: dict[str, dict[str, Any]] = {
    "two half-full hosts become one full and one empty": {
        "hosts": [host("a", vcpus=8, mem=8192), host("b", vcpus=8, mem=8192)],
        "instances": [instance("s1", "a", "small"), pinned(instance("m1", "b", "medium"))],
        "budget": Budget(max_migrations=5),
        "moves": [("s1", "a", "b")],
        "capacity": (0, 1),
    },
    "nothing to gain: no move": {
        "hosts": [host("a", vcpus=8, mem=8192), host("b", vcpus=8, mem=8192)],
        "instances": [instance("m1", "a", "medium")],
        "budget": Budget(max_migrations=5),
        "moves": [],
        "capacity": (1, 1),
    },
    "not migratable stays, so the host cannot be emptied": {
        "hosts": [host("a", vcpus=8, mem=8192), host("b", vcpus=8, mem=8192)],
        "instances": [pinned(instance("s1", "a", "small")), pinned(instance("m1", "b", "medium"))],
        "budget": Budget(max_migrations=5),
        "moves": [],
        "capacity": (0, 0),
    },
    "a zero budget plans nothing": {
        "hosts": [host("a", vcpus=8, mem=8192), host("b", vcpus=8, mem=8192)],
        "instances": [instance("s1", "a", "small"), pinned(instance("m1", "b", "medium"))],
        "budget": Budget(max_migrations=0),
        "moves": [],
        "capacity": (0, 0),
    },
    "the least loaded host empties first; two migrations free two hosts": {
        "hosts": [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")],
        "instances": [
            instance("s1", "a", "small"),
            instance("t1", "b", "tiny"),
            pinned(instance("m1", "c", "small")),
            pinned(instance("m2", "c", "small")),
        ],
        "budget": Budget(max_migrations=2),
        "moves": [("t1", "b", "c"), ("s1", "a", "c")],
        "capacity": (0, 2),
    },
    "the budget allows one of the two moves": {
        "hosts": [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")],
        "instances": [
            instance("s1", "a", "small"),
            instance("t1", "b", "tiny"),
            pinned(instance("m1", "c", "small")),
            pinned(instance("m2", "c", "small")),
        ],
        "budget": Budget(max_migrations=1),
        "moves": [("t1", "b", "c")],
        "capacity": (0, 1),
    },
    "max_per_host: the target takes one move only, and a source is never a target": {
        "hosts": [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")],
        "instances": [
            instance("s1", "a", "small"),
            instance("t1", "b", "tiny"),
            pinned(instance("m1", "c", "small")),
            pinned(instance("m2", "c", "small")),
        ],
        "budget": Budget(max_migrations=5, max_per_host=1),
        "moves": [("t1", "b", "c")],
        "capacity": (0, 1),
    },
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_exact_plans(name: str) -> None:
    case = CASES[name]
    table = table_of(case["hosts"], [TINY, SMALL, MEDIUM, LARGE], case["instances"])
    before = snapshot(table)
    p = plan(table, CAPACITY, case["budget"])
    assert_unchanged(table, before)
    assert moved(p) == case["moves"]
    assert (p.before.capacity["large"], p.after.capacity["large"]) == case["capacity"]
    apply_moves(table, p.moves)
    assert measure(table, CAPACITY, scheduler=SCHED, now=NOW) == p.after


def test_numa_single_cell_slot_opens_after_one_move() -> None:
    """Two 2-cell hosts with 4 pinned CPUs per cell; 2-CPU guests sit in both cells of h1 and
    in cell 0 of h2 (not migratable). Moving one guest of h1 into h2's cell 0 frees a whole cell
    of h1 for a 4-CPU single-cell guest, and keeps h2's free cell whole."""
    hosts = [host(h, cells=2, pcpus=4, mem=8192) for h in ("h1", "h2")]
    flavors = [
        flavor("p2", vcpus=2, mem=1024, pinned=True, numa=1),
        flavor("p4", vcpus=4, mem=2048, pinned=True, numa=1),
    ]
    instances = [
        instance("x0", "h1", "p2", numa=[(0, 2, 1024)]),
        instance("x1", "h1", "p2", numa=[(1, 2, 1024)]),
        pinned(instance("y0", "h2", "p2", numa=[(0, 2, 1024)])),
    ]
    table = table_of(hosts, flavors, instances)
    target = Target(flavors=("p4",))
    p = plan(table, target, Budget(max_migrations=3))
    assert (p.before.capacity["p4"], p.after.capacity["p4"]) == (1, 2)
    assert len(p.moves) == 1
    (m,) = p.moves
    assert (m.source, m.target) == ("h1", "h2")
    assert m.instance_id in {"x0", "x1"}
    assert m.cell_use[0][C_PCPU] == 2  # into h2's half-used cell, keeping cell 1 whole
    assert m.cell_use[1][C_PCPU] == 0
    apply_moves(table, p.moves)
    assert SCHED.capacity(table, "p4", NOW).tolist() == [1, 1]


def test_anti_affinity_members_never_share_a_host() -> None:
    """g1 would best go to b (fullest), but b holds g2 of the same anti-affinity group."""
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")]
    instances = [
        instance("g1", "a", "small", group_id="g"),
        pinned(instance("g2", "b", "small", group_id="g")),
        pinned(instance("m1", "b", "small")),
        pinned(instance("m2", "c", "small")),
    ]
    table = table_of(hosts, [SMALL, LARGE], instances, groups=[group("g", "anti-affinity")])
    p = plan(table, CAPACITY, Budget(max_migrations=5))
    assert moved(p) == [("g1", "a", "c")]


def test_affinity_members_stay() -> None:
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b")]
    instances = [
        instance("f1", "a", "small", group_id="f"),
        pinned(instance("m1", "b", "medium")),
    ]
    table = table_of(hosts, [SMALL, MEDIUM, LARGE], instances, groups=[group("f", "affinity")])
    assert plan(table, CAPACITY, Budget(max_migrations=5)).moves == ()


def test_concurrent_moves_share_a_wave_up_to_the_limit() -> None:
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c", "d")]
    instances = [
        instance("s1", "a", "small"),
        instance("s2", "b", "small"),
        pinned(instance("m1", "c", "small")),
        pinned(instance("m2", "d", "small")),
    ]
    table = table_of(hosts, [SMALL, LARGE], instances)
    for concurrent, waves in ((1, [0, 1]), (2, [0, 0])):
        p = plan(table, CAPACITY, Budget(max_migrations=5, max_concurrent=concurrent))
        assert len(p.moves) == 2
        assert [m.wave for m in p.moves] == waves


def test_drain_empties_the_host_and_never_targets_it() -> None:
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "d")]
    instances = [
        instance("d1", "d", "small"),
        instance("d2", "d", "small"),
        pinned(instance("a1", "a", "medium")),
        instance("b1", "b", "small"),
    ]
    table = table_of(hosts, [SMALL, MEDIUM, LARGE], instances)
    target = Target(flavors=("large",), drain=("d",))
    p = plan(table, target, Budget(max_migrations=5))
    assert p.before.drained_left == 2
    assert p.after.drained_left == 0
    assert all(m.target != "d" for m in p.moves)
    assert {m.instance_id for m in p.moves if m.source == "d"} == {"d1", "d2"}
    apply_moves(table, p.moves)
    assert table.n_instances[table.index["d"]] == 0


def test_drain_per_host_limit_moves_on_to_the_next_drain_host() -> None:
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "d", "e")]
    instances = [
        instance("d1", "d", "small"),
        instance("d2", "d", "small"),
        instance("e1", "e", "small"),
        pinned(instance("a1", "a", "medium")),
    ]
    table = table_of(hosts, [SMALL, MEDIUM, LARGE], instances)
    target = Target(flavors=("large",), drain=("d", "e"))
    p = plan(table, target, Budget(max_migrations=5, max_per_host=1))
    assert sorted(m.instance_id for m in p.moves) == ["d1", "e1"]
    assert p.after.drained_left == 1


def test_drain_of_a_host_whose_instance_fits_nowhere_leaves_it() -> None:
    hosts = [host("a", vcpus=8, mem=8192), host("d", vcpus=8, mem=8192)]
    instances = [instance("big", "d", "large"), pinned(instance("a1", "a", "small"))]
    table = table_of(hosts, [SMALL, LARGE], instances)
    p = plan(table, Target(objective=Objective.EMPTY_HOSTS, drain=("d",)), Budget(max_migrations=5))
    assert p.moves == ()
    assert p.after.drained_left == 1


def test_empty_hosts_objective() -> None:
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")]
    instances = [
        instance("s1", "a", "small"),
        instance("s2", "b", "small"),
        instance("s3", "b", "small"),
        instance("m1", "c", "medium"),
    ]
    table = table_of(hosts, [SMALL, MEDIUM, LARGE], instances)
    target = Target(objective=Objective.EMPTY_HOSTS)
    p = plan(table, target, Budget(max_migrations=5))
    # a (one instance) is emptied first, into the tightest host that keeps it (c: 6+2 = 8)
    assert moved(p) == [("s1", "a", "c")]
    assert (p.before.empty_hosts, p.after.empty_hosts) == (0, 1)


def test_disabled_hosts_are_never_targets() -> None:
    hosts = [host("a", vcpus=8, mem=8192), host("b", vcpus=8, mem=8192, enabled=False)]
    hosts.append(host("c", vcpus=8, mem=8192))
    instances = [
        instance("s1", "a", "small"),
        pinned(instance("m1", "b", "medium")),
        pinned(instance("m2", "c", "medium")),
    ]
    table = table_of(hosts, [SMALL, MEDIUM, LARGE], instances)
    p = plan(table, CAPACITY, Budget(max_migrations=5))
    assert moved(p) == [("s1", "a", "c")]


def test_moves_keep_their_availability_zone() -> None:
    hosts = [
        host("a", vcpus=8, mem=8192, az="z1"),
        host("b", vcpus=8, mem=8192, az="z2"),
        host("c", vcpus=8, mem=8192, az="z1"),
    ]
    instances = [
        instance("s1", "a", "small"),
        pinned(instance("m1", "b", "medium")),
        pinned(instance("m2", "c", "small")),
    ]
    table = table_of(hosts, [SMALL, MEDIUM, LARGE], instances)
    p = plan(table, CAPACITY, Budget(max_migrations=5))
    assert moved(p) == [("s1", "a", "c")]


def test_traits_are_respected() -> None:
    """The scheduler's filters decide: a flavor needing a trait never moves to a host without."""
    hosts = [
        host("a", vcpus=8, mem=8192, traits=["CUSTOM_X"]),
        host("b", vcpus=8, mem=8192),
        host("c", vcpus=8, mem=8192, traits=["CUSTOM_X"]),
    ]
    flavors = [flavor("sx", vcpus=2, mem=2048, required=["CUSTOM_X"]), SMALL, MEDIUM, LARGE]
    instances = [
        instance("x1", "a", "sx"),
        pinned(instance("m1", "b", "medium")),
        pinned(instance("m2", "c", "small")),
    ]
    table = table_of(hosts, flavors, instances)
    p = plan(table, CAPACITY, Budget(max_migrations=5))
    assert moved(p) == [("x1", "a", "c")]


def test_same_seed_same_plan() -> None:
    hosts = [host(h, vcpus=8, mem=8192) for h in "abcdef"]
    instances = [instance(f"s{i}", h, "small") for i, h in enumerate("abcdefabc")]
    table = table_of(hosts, [SMALL, LARGE], instances)
    for seed in (0, 1, 7):
        one = plan(table, CAPACITY, Budget(max_migrations=4), seed=seed)
        two = plan(table.copy(), CAPACITY, Budget(max_migrations=4), seed=seed)
        assert one == two


# ---------------------------------------------------------------------------- errors


def test_unknown_names_are_named() -> None:
    table = table_of([host("a")], [SMALL])
    with pytest.raises(SpecError, match=r"target.flavors\[0\]: unknown flavor 'nope'"):
        plan_defrag(
            table, Target(flavors=("nope",)), Budget(max_migrations=1), scheduler=SCHED, now=NOW
        )
    with pytest.raises(SpecError, match=r"target.drain\[0\]: unknown host 'x'"):
        plan_defrag(
            table,
            Target(flavors=("small",), drain=("x",)),
            Budget(max_migrations=1),
            scheduler=SCHED,
            now=NOW,
        )


def _two_host_table() -> HostTable:
    hosts = [host("a", vcpus=8, mem=8192), host("b", vcpus=8, mem=8192)]
    instances = [
        instance("s1", "a", "small"),
        instance("s2", "a", "small"),
        instance("m1", "b", "medium"),
    ]
    return table_of(hosts, [SMALL, MEDIUM, LARGE], instances)


def _move(table: HostTable, iid: str, target: str, step: int = 0, wave: int = 0) -> Move:
    alloc = table.allocations[iid]
    cell_use, host_use = table.plan_for(alloc.flavor, table.index[target])
    return Move(
        step=step,
        wave=wave,
        instance_id=iid,
        flavor=alloc.flavor,
        source=alloc.host,
        target=target,
        cell_use=tuple(tuple(int(x) for x in c) for c in cell_use),
        host_use=tuple(int(x) for x in host_use),
    )


def _plan_of(table: HostTable, moves: list[Move], **budget: Any) -> Plan:
    figures = measure(table, CAPACITY, scheduler=SCHED, now=NOW)
    return Plan(
        target=CAPACITY,
        budget=Budget(max_migrations=budget.pop("max_migrations", 10), **budget),
        moves=tuple(moves),
        before=figures,
        after=figures,
    )


def test_check_plan_names_the_step_and_the_resource() -> None:
    table = _two_host_table()
    # m1 (6 vCPUs) cannot join s1 and s2 on a while s1 is still there (claims come first)
    swap = [_move(table, "s1", "b"), _move(table, "m1", "a", step=1)]
    before = snapshot(table)
    with pytest.raises(PlanError, match=r"step 1: host 'a': vCPUs would be 10 of 8") as err:
        check_plan(table, _plan_of(table, swap, max_concurrent=2))
    assert err.value.step == 1
    assert_unchanged(table, before)
    # in two waves it is valid: s1 has left a when m1 arrives
    swap[1] = swap[1].model_copy(update={"wave": 1})
    check_plan(table, _plan_of(table, swap, max_concurrent=2))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"source": "b"}, "is on host 'a', not 'b'"),
        ({"target": "a"}, "is the source"),
        ({"target": "zz"}, "unknown target host 'zz'"),
        ({"instance_id": "ghost"}, "'ghost' is not on the fleet"),
        ({"flavor": "large"}, "has flavor 'small', not 'large'"),
        ({"host_use": (1, 2048, 0, 0)}, "host-level footprint"),
        ({"step": 3}, "says step 3"),
    ],
)
def test_check_plan_rejects_bad_moves(change: dict[str, Any], message: str) -> None:
    table = _two_host_table()
    move = _move(table, "s1", "b").model_copy(update=change)
    with pytest.raises(PlanError, match=message):
        check_plan(table, _plan_of(table, [move]))


def test_check_plan_enforces_the_budget() -> None:
    table = _two_host_table()
    one = [_move(table, "s1", "b")]
    with pytest.raises(PlanError, match="max_migrations=0"):
        check_plan(table, _plan_of(table, one, max_migrations=0))
    two = [_move(table, "s1", "b"), _move(table, "m1", "a", step=1, wave=1)]
    with pytest.raises(PlanError, match="max_per_host=1"):
        check_plan(table, _plan_of(table, two, max_per_host=1))
    same_wave = [
        _move(table, "s1", "b"),
        _move(table, "m1", "a", step=1).model_copy(update={"wave": 0}),
    ]
    with pytest.raises(PlanError, match="max_concurrent=1"):
        check_plan(table, _plan_of(table, same_wave))


def test_check_plan_refuses_not_migratable_and_drain_targets() -> None:
    hosts = [host("a", vcpus=8, mem=8192), host("b", vcpus=8, mem=8192)]
    table = table_of(hosts, [SMALL, LARGE], [pinned(instance("s1", "a", "small"))])
    with pytest.raises(PlanError, match="not migratable"):
        check_plan(table, _plan_of(table, [_move(table, "s1", "b")]))
    table = table_of(hosts, [SMALL, LARGE], [instance("s1", "a", "small")])
    p = _plan_of(table, [_move(table, "s1", "b")])
    p = p.model_copy(update={"target": Target(flavors=("large",), drain=("b",))})
    with pytest.raises(PlanError, match="'b' is being drained"):
        check_plan(table, p)


def test_check_plan_with_a_scheduler_applies_its_filters() -> None:
    hosts = [host("a", vcpus=8, mem=8192, traits=["CUSTOM_X"]), host("b", vcpus=8, mem=8192)]
    flavors = [flavor("sx", vcpus=2, mem=2048, required=["CUSTOM_X"]), LARGE]
    table = table_of(hosts, flavors, [instance("x1", "a", "sx")])
    p = _plan_of(table, [_move(table, "x1", "b")])
    check_plan(table, p)  # resources alone allow it
    with pytest.raises(PlanError, match="does not pass the scheduler's filters"):
        check_plan(table, p, scheduler=SCHED, now=NOW)


def test_check_plan_counts_anti_affinity_in_flight() -> None:
    """g2 leaves b while g1 arrives there in the same wave: two members on b in flight."""
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")]
    instances = [
        instance("g1", "a", "small", group_id="g"),
        instance("g2", "b", "small", group_id="g"),
    ]
    table = table_of(hosts, [SMALL, LARGE], instances, groups=[group("g", "anti-affinity")])
    moves = [_move(table, "g2", "c"), _move(table, "g1", "b", step=1)]
    with pytest.raises(PlanError, match="anti-affinity group 'g'"):
        check_plan(table, _plan_of(table, moves, max_concurrent=2))
    moves[1] = moves[1].model_copy(update={"wave": 1})
    check_plan(table, _plan_of(table, moves, max_concurrent=2))


def test_apply_moves_is_all_or_nothing() -> None:
    table = _two_host_table()
    good = _move(table, "s1", "b")
    bad = _move(table, "m1", "a", step=1).model_copy(update={"wave": 1, "target": "zz"})
    before = snapshot(table)
    with pytest.raises(PlanError, match="step 1"):
        apply_moves(table, [good, bad])
    assert_unchanged(table, before)
    assert list(table.allocations) == list(before["allocations"])
    apply_moves(table, [good])
    assert where(table) == {"s1": "b", "s2": "a", "m1": "b"}


# ---------------------------------------------------------------------------- replan


def test_replan_move_finds_another_target_or_none() -> None:
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")]
    instances = [instance("s1", "a", "small"), pinned(instance("m1", "b", "medium"))]
    table = table_of(hosts, [SMALL, MEDIUM, LARGE], instances)
    move = _move(table, "s1", "b")
    new = replan_move(table, move, scheduler=SCHED, now=NOW, exclude=frozenset({"b"}))
    assert new is not None
    assert (new.target, new.step, new.source) == ("c", 0, "a")
    best = replan_move(table, move, scheduler=SCHED, now=NOW)
    assert best is not None
    assert best.target == "b"  # the tightest fit
    none = replan_move(
        table, move, scheduler=SCHED, now=NOW, exclude=frozenset({"b"}), drain=frozenset({"c"})
    )
    assert none is None
    gone = move.model_copy(update={"instance_id": "ghost"})
    assert replan_move(table, gone, scheduler=SCHED, now=NOW) is None


def test_scheduler_without_group_filters_still_keeps_anti_affinity() -> None:
    sched = FilterScheduler.from_config(SchedulerConfig(filters=["compute", "ram", "vcpu"]))
    hosts = [host(h, vcpus=8, mem=8192) for h in ("a", "b", "c")]
    instances = [
        instance("g1", "a", "small", group_id="g"),
        pinned(instance("g2", "b", "small", group_id="g")),
        pinned(instance("m1", "b", "small")),
        pinned(instance("m2", "c", "small")),
    ]
    table = table_of(hosts, [SMALL, LARGE], instances, groups=[group("g", "anti-affinity")])
    p = plan_defrag(table, CAPACITY, Budget(max_migrations=5), scheduler=sched, now=NOW)
    assert moved(p) == [("g1", "a", "c")]


def test_keep_traits_keep_an_instance_in_its_pool() -> None:
    """s1 would best fill b (tightest fit), but b is in another pool: with the pool traits
    kept, s1 goes to c in its own pool; check_plan and replan_move hold the same rule."""
    hosts = [
        host("a", vcpus=8, mem=8192, traits=["CUSTOM_POOL_A"]),
        host("b", vcpus=8, mem=8192, traits=["CUSTOM_POOL_B"]),
        host("c", vcpus=8, mem=8192, traits=["CUSTOM_POOL_A"]),
    ]
    instances = [
        instance("s1", "a", "small"),
        pinned(instance("m1", "b", "medium")),
        pinned(instance("c1", "c", "small")),
    ]
    table = table_of(hosts, [SMALL, MEDIUM, LARGE], instances)
    free = plan(table, CAPACITY, Budget(max_migrations=3))
    assert moved(free) == [("s1", "a", "b")]
    pools = Target(flavors=("large",), keep_traits=("CUSTOM_POOL_A", "CUSTOM_POOL_B"))
    kept = plan(table, pools, Budget(max_migrations=3))
    assert moved(kept) == [("s1", "a", "c")]
    assert (kept.before.capacity["large"], kept.after.capacity["large"]) == (0, 1)
    crossing = free.model_copy(update={"target": pools})
    check_plan(table, crossing)  # without a scheduler only resources are checked
    with pytest.raises(PlanError, match="step 0"):
        check_plan(table, crossing, scheduler=SCHED, now=NOW)
    new = replan_move(
        table, free.moves[0], scheduler=SCHED, now=NOW, keep_traits=frozenset(pools.keep_traits)
    )
    assert new is not None
    assert new.target == "c"
    anywhere = replan_move(table, free.moves[0], scheduler=SCHED, now=NOW, exclude=frozenset("c"))
    assert anywhere is not None
    assert anywhere.target == "b"
