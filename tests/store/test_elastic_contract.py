"""The elastic pools' store contract (groups, VMs and their state machine, commands, hooks,
host power): every test runs on SQLite and on PostgreSQL (see conftest.py)."""

from __future__ import annotations

import pytest

from berth.elastic.commands import CommandKind, CommandState
from berth.elastic.model import BatchSystem, GroupSpec, QueueSelector, VmState
from berth.service.demo import load_fleet_into
from berth.store.elastic_rows import (
    BackoffRow,
    CommandStateError,
    ElasticLimits,
    HookRun,
    VmStateError,
)
from berth.store.errors import AlreadyExistsError, InUseError, InvalidReferenceError, NotFoundError
from berth.store.repo import Store
from tests.store.fleets import NOW, small_fleet

T0 = 1000.0


def spec(name: str = "juno", **kw: object) -> GroupSpec:
    base: dict[str, object] = {
        "name": name,
        "flavor": "p4",
        "cores_per_vm": 4,
        "slots_per_vm": 4,
        "queue": QueueSelector(BatchSystem.HTCONDOR, accounting_group=f"group_{name}"),
        "min_vms": 0,
        "max_vms": 3,
    }
    base.update(kw)
    return GroupSpec(**base)  # type: ignore[arg-type]


def test_groups_are_created_replaced_listed_and_validated(store: Store) -> None:
    store.put_elastic_group(spec("juno"))
    row = store.put_elastic_group(spec("juno", max_vms=5, image="sl7"), cluster="c1")
    store.put_elastic_group(
        spec("bes", queue=QueueSelector(BatchSystem.SLURM, partition="batch", account="bes"))
    )
    assert [g.name for g in store.list_elastic_groups()] == ["bes", "juno"]
    got = store.get_elastic_group("juno")
    assert got == row
    assert (got.spec.max_vms, got.spec.image, got.cluster) == (5, "sl7", "c1")
    assert got.spec.queue.accounting_group == "group_juno"
    assert store.get_elastic_group("bes").spec.queue.account == "bes"
    with pytest.raises(InvalidReferenceError) as exc:
        store.put_elastic_group(spec("x", min_vms=4, max_vms=2))
    assert exc.value.field == "min_vms"
    with pytest.raises(InvalidReferenceError) as exc:
        store.put_elastic_group(spec("x", cores_per_vm=0))
    assert exc.value.field == "cores_per_vm"
    assert [g.name for g in store.list_elastic_groups()] == ["bes", "juno"]
    with pytest.raises(NotFoundError):
        store.get_elastic_group("nope")
    assert store.elastic_limits() == ElasticLimits()
    store.set_elastic_limits(ElasticLimits(max_vms=10, max_cores=None))
    assert store.elastic_limits() == ElasticLimits(10, None)
    with pytest.raises(InvalidReferenceError):
        store.set_elastic_limits(ElasticLimits(max_vms=-1))
    assert store.elastic_limits() == ElasticLimits(10, None)


def test_a_vm_moves_only_as_the_state_machine_allows(store: Store) -> None:
    store.put_elastic_group(spec())
    vm, secret = store.record_vm("juno-1", "juno", T0)
    assert (vm.state, vm.cores, vm.attempt) == (VmState.REQUESTED, 4, 1)
    token = store.lookup_token(secret)
    assert token is not None
    assert (token.role, token.vm) == ("vm", "juno-1")
    with pytest.raises(AlreadyExistsError):
        store.record_vm("juno-1", "juno", T0)
    with pytest.raises(InvalidReferenceError):
        store.record_vm("x-1", "nope", T0)
    store.place_vm("juno-1", cluster="c1", host="h-c1-0", instance_id="i-1")
    store.move_vm("juno-1", VmState.BOOTING, T0 + 1)
    history = store.vm_history()
    with pytest.raises(VmStateError) as exc:
        store.move_vm("juno-1", VmState.RETIRED, T0 + 2)
    assert "booting" in str(exc.value)
    assert "retired" in str(exc.value)
    assert store.get_vm("juno-1").state is VmState.BOOTING  # nothing changed
    assert store.vm_history() == history
    with pytest.raises(VmStateError):
        store.move_vm("juno-1", VmState.FAILED, T0 + 2, expect=VmState.REQUESTED)
    store.move_vm("juno-1", VmState.JOINED, T0 + 3)
    store.move_vm("juno-1", VmState.DRAINING, T0 + 4)
    store.move_vm("juno-1", VmState.JOINED, T0 + 5)  # taken back before it retired
    store.move_vm("juno-1", VmState.LOST, T0 + 6, "stale heartbeat")
    gone = store.get_vm("juno-1")
    assert (gone.state, gone.since, gone.reason) == (VmState.LOST, T0 + 6, "stale heartbeat")
    assert (gone.cluster, gone.host, gone.instance_id) == ("c1", "h-c1-0", "i-1")
    assert store.lookup_token(secret) is None  # a terminal VM's token is revoked
    with pytest.raises(VmStateError):
        store.move_vm("juno-1", VmState.JOINED, T0 + 7)
    with pytest.raises(NotFoundError):
        store.move_vm("nope", VmState.BOOTING, T0)
    states = [(c.state, c.at) for c in store.vm_history(vm="juno-1")]
    assert states == [
        (VmState.REQUESTED, T0),
        (VmState.BOOTING, T0 + 1),
        (VmState.JOINED, T0 + 3),
        (VmState.DRAINING, T0 + 4),
        (VmState.JOINED, T0 + 5),
        (VmState.LOST, T0 + 6),
    ]
    assert [c.state for c in store.vm_history(since=T0 + 3, until=T0 + 5)] == [
        VmState.JOINED,
        VmState.DRAINING,
    ]


def test_a_requested_vm_can_get_a_new_token(store: Store) -> None:
    store.put_elastic_group(spec())
    _, old = store.record_vm("juno-1", "juno", T0)
    new = store.renew_vm_token("juno-1")
    assert store.lookup_token(old) is None
    assert store.lookup_token(new) is not None
    store.move_vm("juno-1", VmState.BOOTING, T0 + 1)
    with pytest.raises(VmStateError):
        store.renew_vm_token("juno-1")


def test_heartbeats_track_running_jobs_and_idleness(store: Store) -> None:
    store.put_elastic_group(spec())
    store.record_vm("juno-1", "juno", T0)
    store.move_vm("juno-1", VmState.BOOTING, T0)
    assert store.vm_heartbeat("juno-1", T0 + 1, 0).idle_since == T0 + 1
    assert store.vm_heartbeat("juno-1", T0 + 2, 0).idle_since == T0 + 1
    busy = store.vm_heartbeat("juno-1", T0 + 3, 2)
    assert (busy.idle_since, busy.running_jobs, busy.heartbeat) == (None, 2, T0 + 3)
    assert store.vm_heartbeat("juno-1", T0 + 2.5, 0).heartbeat == T0 + 3  # never goes back
    with pytest.raises(InvalidReferenceError):
        store.vm_heartbeat("juno-1", T0 + 4, -1)
    store.move_vm("juno-1", VmState.FAILED, T0 + 5)
    with pytest.raises(VmStateError):
        store.vm_heartbeat("juno-1", T0 + 6, 0)


def test_commands_follow_their_life_and_move_the_vm(store: Store) -> None:
    store.put_elastic_group(spec())
    store.record_vm("juno-1", "juno", T0)
    store.move_vm("juno-1", VmState.BOOTING, T0)
    with pytest.raises(VmStateError):  # a booting VM is not drained: it is reaped
        store.issue_command("juno-1", CommandKind.LEAVE, T0)
    assert store.list_commands(vm="juno-1") == []
    join = store.issue_command("juno-1", CommandKind.JOIN, T0 + 1)
    queue = {"system": "htcondor", "accounting_group": "group_juno"}
    assert (join.state, join.args) == (CommandState.ISSUED, {"group": "juno", "queue": queue})
    assert store.issue_command("juno-1", CommandKind.JOIN, T0 + 1).id == join.id  # no twin
    with pytest.raises(CommandStateError):  # not delivered yet
        store.finish_command("juno-1", join.id, True, T0 + 2)
    (polled,) = store.poll_commands("juno-1", T0 + 2)
    assert (polled.id, polled.state, polled.delivered_at) == (
        join.id,
        CommandState.DELIVERED,
        T0 + 2,
    )
    assert store.poll_commands("juno-1", T0 + 3)[0].delivered_at == T0 + 2  # fetched again
    done = store.finish_command("juno-1", join.id, True, T0 + 4, "startd joined group_juno")
    assert (done.state, done.result, done.finished_at) == (CommandState.DONE, done.result, T0 + 4)
    assert store.get_vm("juno-1").state is VmState.JOINED
    assert store.finish_command("juno-1", join.id, True, T0 + 5).finished_at == T0 + 4
    with pytest.raises(CommandStateError):
        store.finish_command("juno-1", join.id, False, T0 + 5)
    with pytest.raises(NotFoundError):
        store.finish_command("juno-1", 99999, True, T0 + 5)
    leave = store.issue_command("juno-1", CommandKind.LEAVE, T0 + 6, by="loop")
    assert store.get_vm("juno-1").state is VmState.DRAINING  # at once, with the command
    store.poll_commands("juno-1", T0 + 7)
    failed = store.finish_command("juno-1", leave.id, False, T0 + 8, "condor_off failed")
    assert failed.state is CommandState.FAILED
    assert store.poll_commands("juno-1", T0 + 9) == []
    shut = store.issue_command("juno-1", CommandKind.SHUTDOWN, T0 + 10)
    store.move_vm("juno-1", VmState.RETIRED, T0 + 11)
    assert store.list_commands(vm="juno-1")[-1].state is CommandState.FAILED  # moot now
    assert store.list_commands(vm="juno-1")[-1].id == shut.id
    with pytest.raises(VmStateError):
        store.issue_command("juno-1", CommandKind.JOIN, T0 + 12)
    assert [c.kind for c in store.list_commands(group="juno")] == [
        CommandKind.JOIN,
        CommandKind.LEAVE,
        CommandKind.SHUTDOWN,
    ]
    assert store.list_commands(group="bes") == []


def test_deleting_a_group_with_live_vms_is_refused(store: Store) -> None:
    store.put_elastic_group(spec())
    store.record_vm("juno-1", "juno", T0)
    with pytest.raises(InUseError):
        store.delete_elastic_group("juno")
    store.move_vm("juno-1", VmState.FAILED, T0 + 1)
    store.delete_elastic_group("juno")
    assert store.list_elastic_groups() == []
    assert [c.state for c in store.vm_history()] == [VmState.REQUESTED, VmState.FAILED]
    with pytest.raises(NotFoundError):
        store.delete_elastic_group("juno")


def test_hook_runs_and_host_power(store: Store) -> None:
    run = HookRun("juno-1", "join", "dns", 1, "failed", T0, T0 + 1, 3, "x" * 5000, T0 + 11)
    saved = store.record_hook_run(run)
    assert saved.id > 0
    assert len(saved.output) == 4000
    assert saved.next_retry == T0 + 11
    store.record_hook_run(HookRun("juno-1", "join", "dns", 2, "ok", T0 + 11, T0 + 12, 0, "ok"))
    store.record_hook_run(HookRun("juno-2", "leave", "dns", 1, "ok", T0 + 13, T0 + 14, 0))
    assert [(r.attempt, r.outcome) for r in store.hook_runs(vm="juno-1")] == [
        (1, "failed"),
        (2, "ok"),
    ]
    assert [r.vm for r in store.hook_runs(event="leave")] == ["juno-2"]
    with pytest.raises(InvalidReferenceError):
        store.record_hook_run(HookRun("juno-1", "join", "dns", 3, "maybe", T0, T0))
    load_fleet_into(store, small_fleet(2), {"c1": "r1"}, now=NOW)
    store.set_host_power("h-c1-0", "off", T0, reason="tidal", by="tidal")
    store.set_host_power("h-c1-0", "on", T0 + 5, reason="demand")
    store.set_host_power("h-c1-1", "off", T0 + 6)
    assert [(p.host, p.power, p.since) for p in store.host_power_states()] == [
        ("h-c1-0", "on", T0 + 5),
        ("h-c1-1", "off", T0 + 6),
    ]
    with pytest.raises(InvalidReferenceError):
        store.set_host_power("nowhere", "off", T0)
    with pytest.raises(InvalidReferenceError):
        store.set_host_power("h-c1-0", "sleep", T0)


def test_scoped_tokens_name_their_vm_or_group(store: Store) -> None:
    store.put_elastic_group(spec())
    row, secret = store.create_token("juno admin", "group-admin", elastic_group="juno")
    found = store.lookup_token(secret)
    assert found is not None
    assert found.elastic_group == "juno"
    assert found.id == row.id
    with pytest.raises(InvalidReferenceError):
        store.create_token("x", "group-admin", elastic_group="nope")
    with pytest.raises(InvalidReferenceError):
        store.create_token("x", "group-admin")
    with pytest.raises(InvalidReferenceError):
        store.create_token("x", "vm")
    with pytest.raises(InvalidReferenceError):
        store.create_token("x", "reader", vm="juno-1")


def test_backoff_history_and_demand_samples_are_kept(store: Store) -> None:
    rows = [
        BackoffRow("group", "juno", T0, None, 2, T0 + 5),
        BackoffRow("cluster", "c1", failures=1, last_failure=T0 + 5),
    ]
    store.save_elastic_backoff(rows)
    assert store.elastic_backoff() == sorted(rows, key=lambda r: (r.kind, r.name))
    store.save_elastic_backoff(rows[:1])  # replaces: the cluster's history was reset
    assert store.elastic_backoff() == rows[:1]
    with pytest.raises(InvalidReferenceError) as exc:
        store.save_elastic_backoff([BackoffRow("region", "r1")])
    assert exc.value.field == "kind"
    assert store.elastic_backoff() == rows[:1]  # a refused save changes nothing
    for i in range(5):
        store.record_demand(T0 + 60 * i, 4.0 * i)
    assert store.demand_samples(T0 + 120) == [(T0 + 120, 8.0), (T0 + 180, 12.0), (T0 + 240, 16.0)]
    store.record_demand(T0 + 300, 2.0, keep_since=T0 + 200)
    assert store.demand_samples() == [(T0 + 240, 16.0), (T0 + 300, 2.0)]
    with pytest.raises(InvalidReferenceError):
        store.record_demand(T0, -1.0)
