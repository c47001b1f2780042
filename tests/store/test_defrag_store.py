"""Stored defrag plans and the two transactions of a live migration, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from berth.core.table import HostTable
from berth.service.demo import load_fleet_into
from berth.store.audit import audit
from berth.store.defrag import (
    DefragStore,
    NewStep,
    PlanStateError,
    StepSkippedError,
    StepStateError,
    migration_id,
)
from berth.store.errors import NotFoundError, PlanRejectedError
from berth.store.footprint import to_named
from berth.store.repo import HostCapacity, Store
from tests.store.fleets import NOW, claim_one, small_fleet

FLEET = small_fleet(4)


def table() -> HostTable:
    return HostTable.from_fleet(FLEET.model_copy(update={"instances": []}))


def cap(host: str) -> HostCapacity:
    t = table()
    row = t.index[host]
    return HostCapacity(t.cell_cap[row].copy(), t.host_cap[row].copy(), list(t.device_types))


def footprint(host: str, flavor: str = "p4") -> dict[str, object]:
    t = table()
    cell_use, host_use = t.plan_for(flavor, t.index[host])
    return to_named(cell_use, host_use, t.device_types)


def setup(store: Store, moves: list[tuple[str, str, str]]) -> DefragStore:
    """A fleet with the moved instances on their sources, and a running plan of `moves`
    (instance, source, target), one wave each."""
    load_fleet_into(store, FLEET, {"c1": "r1"}, now=NOW)
    for iid, source, _ in moves:
        claim_one(store, FLEET, iid, source)
    ds = DefragStore(store)
    steps = [
        NewStep(k, k, iid, "p4", source, target, footprint(target))
        for k, (iid, source, target) in enumerate(moves)
    ]
    ds.create_plan(
        "dp-1",
        "c1",
        target={"objective": "empty-hosts"},
        budget={"max_migrations": len(moves)},
        before={},
        after={},
        generations={},
        steps=steps,
        created_by="test",
    )
    ds.transition("dp-1", ("planned",), "running")
    return ds


def gens(store: Store, *hosts: str) -> list[int]:
    return [store.get_host(h).generation for h in hosts]


def test_a_move_holds_both_hosts_until_confirmed_then_only_the_target(store):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    before = gens(store, "h-c1-0", "h-c1-1")
    events = ds.start_step("dp-1", 0, cap("h-c1-1"))
    assert [(e.kind, e.host, e.generation) for e in events] == [
        ("instance_claimed", "h-c1-1", before[1] + 1)
    ]
    shadow = store.get_instance(migration_id("i-1"))
    assert (shadow.host, shadow.migratable, shadow.preemptible) == ("h-c1-1", False, False)
    assert store.get_instance("i-1").host == "h-c1-0"  # still on the source
    assert audit(store) == []
    assert [s.state for s in ds.steps("dp-1")] == ["migrating"]

    step, events = ds.confirm_step("dp-1", 0)
    assert step.state == "done"
    assert [(e.kind, e.host, e.generation, e.payload["instance_id"]) for e in events] == [
        ("instance_released", "h-c1-0", before[0] + 1, "i-1"),
        ("instance_released", "h-c1-1", before[1] + 2, "i-1@migrating"),
        ("instance_claimed", "h-c1-1", before[1] + 3, "i-1"),
    ]
    moved = store.get_instance("i-1")
    assert (moved.host, moved.placement) == ("h-c1-1", footprint("h-c1-1"))
    with pytest.raises(NotFoundError):
        store.get_instance(migration_id("i-1"))
    assert gens(store, "h-c1-0", "h-c1-1") == [before[0] + 1, before[1] + 3]
    assert audit(store) == []
    with pytest.raises(StepStateError):
        ds.confirm_step("dp-1", 0)


def test_abort_releases_the_target_claim_and_the_instance_stays(store):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    ds.start_step("dp-1", 0, cap("h-c1-1"))
    step, events = ds.abort_step("dp-1", 0, "live migration failed")
    assert (step.state, step.reason) == ("aborted", "live migration failed")
    assert [(e.kind, e.payload["instance_id"]) for e in events] == [
        ("instance_released", "i-1@migrating")
    ]
    assert store.get_instance("i-1").host == "h-c1-0"
    assert [i.id for i in store.list_instances()] == ["i-1"]
    assert audit(store) == []
    with pytest.raises(StepStateError):
        ds.abort_step("dp-1", 0, "again")


def test_a_target_filled_meanwhile_is_rejected_and_nothing_is_written(store):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    for k in range(2):  # two p4 fill cell 0 of h-c1-1, the cell the step's footprint uses
        claim_one(store, FLEET, f"fill-{k}", "h-c1-1")
    before = gens(store, "h-c1-0", "h-c1-1")
    last = store.latest_event_id()
    with pytest.raises(PlanRejectedError, match="no longer fits on host 'h-c1-1'"):
        ds.start_step("dp-1", 0, cap("h-c1-1"))
    assert gens(store, "h-c1-0", "h-c1-1") == before
    assert store.latest_event_id() == last
    assert [s.state for s in ds.steps("dp-1")] == ["pending"]
    # the service re-plans it: a new target, then the start goes through
    step = ds.replan_step("dp-1", 0, "h-c1-2", footprint("h-c1-2"), "h-c1-1 no longer fits")
    assert (step.state, step.target, step.planned_target, step.replans) == (
        "replanned",
        "h-c1-2",
        "h-c1-1",
        1,
    )
    ds.start_step("dp-1", 0, cap("h-c1-2"))
    ds.confirm_step("dp-1", 0)
    assert store.get_instance("i-1").host == "h-c1-2"
    assert audit(store) == []


def test_a_draining_target_is_rejected_and_draining_bumps_the_generation(store):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    (gen,) = gens(store, "h-c1-1")
    ev = ds.set_draining("h-c1-1", True)
    assert (ev.kind, ev.host, ev.generation, ev.payload) == (
        "host_drain",
        "h-c1-1",
        gen + 1,
        {"draining": True, "enabled": True},
    )
    assert ds.draining() == {"h-c1-1"}
    with pytest.raises(PlanRejectedError, match="draining"):
        ds.start_step("dp-1", 0, cap("h-c1-1"))
    ds.set_draining("h-c1-1", False)
    assert ds.draining() == set()
    with pytest.raises(NotFoundError):
        ds.set_draining("h-nowhere", True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("delete", "no longer exists"),
        ("not-migratable", "not migratable"),
    ],
)
def test_a_step_whose_instance_is_gone_is_skipped(store, change, message):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    if change == "delete":
        store.release("i-1")
    else:
        from sqlalchemy import update

        from berth.store import schema as t

        with store.engine.begin() as conn:
            conn.execute(
                update(t.instances).where(t.instances.c.id == "i-1").values(migratable=False)
            )
    with pytest.raises(StepSkippedError, match=message):
        ds.start_step("dp-1", 0, cap("h-c1-1"))
    step = ds.skip_step("dp-1", 0, message)
    assert step.state == "skipped"


def test_an_instance_deleted_mid_migration_aborts_the_step_on_confirm(store):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    ds.start_step("dp-1", 0, cap("h-c1-1"))
    store.release("i-1")
    step, events = ds.confirm_step("dp-1", 0)
    assert (step.state, step.reason) == ("aborted", "instance deleted during its migration")
    assert [e.payload["instance_id"] for e in events] == ["i-1@migrating"]
    assert store.list_instances() == []
    assert audit(store) == []


def test_cancel_aborts_steps_in_flight_and_skips_the_rest(store):
    ds = setup(
        store,
        [("i-1", "h-c1-0", "h-c1-2"), ("i-2", "h-c1-1", "h-c1-2"), ("i-3", "h-c1-3", "h-c1-2")],
    )
    ds.start_step("dp-1", 0, cap("h-c1-2"))
    ds.confirm_step("dp-1", 0)
    ds.start_step("dp-1", 1, cap("h-c1-2"))
    plan, events = ds.cancel_plan("dp-1", "operator changed their mind")
    assert plan.state == "cancelled"
    assert [(e.kind, e.payload["instance_id"]) for e in events] == [
        ("instance_released", "i-2@migrating")
    ]
    assert [(s.state, s.reason) for s in ds.steps("dp-1")] == [
        ("done", None),
        ("aborted", "operator changed their mind"),
        ("skipped", "operator changed their mind"),
    ]
    hosts = {i.id: i.host for i in store.list_instances()}
    assert hosts == {"i-1": "h-c1-2", "i-2": "h-c1-1", "i-3": "h-c1-3"}
    assert audit(store) == []
    with pytest.raises(PlanStateError):
        ds.cancel_plan("dp-1", "twice")
    with pytest.raises(PlanStateError):
        ds.start_step("dp-1", 2, cap("h-c1-2"))


def test_plan_states_and_the_one_active_plan_per_cluster(store):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    ds.create_plan(
        "dp-2",
        "c1",
        target={},
        budget={},
        before={},
        after={},
        generations={},
        steps=[],
        created_by="test",
    )
    with pytest.raises(PlanStateError, match="already runs defrag plan 'dp-1'"):
        ds.transition("dp-2", ("planned",), "running")
    assert ds.transition("dp-1", ("running",), "paused").state == "paused"
    with pytest.raises(PlanStateError, match="is paused"):
        ds.start_step("dp-1", 0, cap("h-c1-1"))
    with pytest.raises(PlanStateError):
        ds.transition("dp-1", ("planned",), "running")
    assert [p.id for p in ds.list_plans(states=("paused",))] == ["dp-1"]
    assert [p.id for p in ds.list_plans(cluster="c1")] == ["dp-1", "dp-2"]
    with pytest.raises(NotFoundError):
        ds.get_plan("dp-9")
    with pytest.raises(NotFoundError):
        ds.create_plan(
            "dp-3",
            "c9",
            target={},
            budget={},
            before={},
            after={},
            generations={},
            steps=[],
            created_by="test",
        )


def test_one_replica_at_a_time_drives_a_plan(store):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    assert ds.acquire("dp-1", "r1", NOW, 10)
    assert ds.acquire("dp-1", "r1", NOW + 5, 10)  # renewal
    assert not ds.acquire("dp-1", "r2", NOW + 14, 10)
    assert ds.acquire("dp-1", "r2", NOW + 16, 10)  # r1's lease expired (r1 died)
    assert ds.get_plan("dp-1").owner == "r2"
    ds.transition("dp-1", ("running",), "paused")
    assert not ds.acquire("dp-1", "r2", NOW + 17, 10)  # only running plans are driven


def test_audit_reports_a_migration_allocation_without_a_step(store):
    ds = setup(store, [("i-1", "h-c1-0", "h-c1-1")])
    claim_one(store, FLEET, "i-1@migrating", "h-c1-2")  # not made by a step
    assert audit(store) == [
        "migration allocation i-1@migrating belongs to no defrag step in flight"
    ]
    store.release("i-1@migrating")
    ds.start_step("dp-1", 0, cap("h-c1-1"))
    store.release("i-1@migrating")  # released behind the step's back
    assert audit(store) == [
        "step 0 of defrag plan dp-1 is migrating without its allocation i-1@migrating"
    ]
