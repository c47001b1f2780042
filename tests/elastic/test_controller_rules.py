"""One case per controller rule: the action it takes, or the note that says why not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from berth.elastic.actions import Code, Decision
from berth.elastic.controller import decide
from berth.elastic.model import VmState
from berth.elastic.state import ControllerConfig, FailureHistory, GroupHistory
from tests.elastic.builders import group, state, vm

CFG = ControllerConfig(
    keep_alive=600,
    hysteresis=900,
    boot_deadline=900,
    heartbeat_stale=300,
    drain_deadline=3600,
    evict_deadline=1200,
    backoff_base=60,
    backoff_max=3600,
    max_starts=200,
    max_starts_per_group=50,
    max_drains=100,
)
A = group("a")


def started(d: Decision, g: str) -> int:
    return sum(s.count for s in d.starts() if s.group == g)


def note_codes(d: Decision, g: str) -> set[Code]:
    return {n.code for n in d.report(g).notes}


@pytest.mark.parametrize(
    ("idle", "vms", "running", "expect"),
    [
        (0, [], {}, 0),  # no demand
        (1, [], {}, 1),  # one job needs one VM
        (8, [], {}, 2),  # 4 slots per VM
        (9, [], {}, 3),
        (8, [vm("v1", "a", VmState.BOOTING, since=5000)], {}, 1),  # a booting VM's slots count
        (8, [vm("v1", "a", since=5000)], {"v1": 4}, 2),  # a full worker has no free slot
        (8, [vm("v1", "a", since=5000)], {"v1": 1}, 2),  # 3 free slots: 5 left -> 2 VMs
        (3, [vm("v1", "a", since=5000)], {"v1": 1}, 0),  # 3 free slots cover 3 jobs
    ],
)
def test_demand_starts_vms_for_idle_jobs_beyond_free_slots(idle, vms, running, expect) -> None:
    d = decide(state(5000, [A], idle={"a": idle}, vms=vms, running=running), CFG)
    assert started(d, "a") == expect
    if expect:
        assert d.starts()[0].reason.code is Code.DEMAND


def test_held_jobs_are_not_demand() -> None:
    from berth.elastic.model import GroupDemand, QueueSnapshot

    s = state(0, [A])
    s = type(s)(**{**s.__dict__, "queue": QueueSnapshot(0, {"a": GroupDemand("a", 0, 0, 50)})})
    assert decide(s, CFG).actions == ()


def test_quota_caps_starts_and_says_so() -> None:
    g = group("a", max_vms=3)
    d = decide(state(0, [g], idle={"a": 100}), CFG)
    assert started(d, "a") == 3
    assert Code.AT_MAX in note_codes(d, "a")
    g = group("a", max_vms=10, max_cores=10)  # 4 cores per VM: 2 VMs
    assert started(decide(state(0, [g], idle={"a": 100}), CFG), "a") == 2


def test_minimum_is_kept_without_demand() -> None:
    g = group("a", min_vms=2)
    d = decide(state(0, [g]), CFG)
    assert started(d, "a") == 2
    assert d.starts()[0].reason.code is Code.MIN_VMS


def test_idle_vm_drained_after_keep_alive_only() -> None:
    vms = [vm("v1", "a", since=0, idle_since=1000)]
    early = decide(state(1500, [A], vms=vms), CFG)
    assert early.drains() == []
    assert Code.KEEP_ALIVE in note_codes(early, "a")
    late = decide(state(1700, [A], vms=vms), CFG)
    assert [x.vm for x in late.drains()] == ["v1"]
    assert late.drains()[0].reason.code is Code.IDLE


def test_drain_never_below_minimum_and_oldest_idle_first() -> None:
    g = group("a", min_vms=1)
    vms = [vm(f"v{i}", "a", since=0, idle_since=float(i)) for i in range(3)]
    d = decide(state(5000, [g], vms=vms), CFG)
    assert [x.vm for x in d.drains()] == ["v0", "v1"]
    assert Code.AT_MIN in note_codes(d, "a")


def test_idle_vm_kept_while_idle_jobs_need_its_slots() -> None:
    vms = [vm("v1", "a", since=0, idle_since=0), vm("v2", "a", since=0, idle_since=0)]
    d = decide(state(5000, [A], vms=vms, idle={"a": 3}), CFG)
    assert [x.vm for x in d.drains()] == ["v1"]  # the other 4 free slots cover the 3 jobs


def test_hysteresis_blocks_drain_after_start_and_start_after_drain() -> None:
    vms = [vm("v1", "a", since=0, idle_since=0)]
    h = {"a": GroupHistory(last_start=4500)}
    d = decide(state(5000, [A], vms=vms, history=h), CFG)
    assert d.drains() == []
    assert Code.HYSTERESIS in note_codes(d, "a")
    h = {"a": GroupHistory(last_drain=4500)}
    d = decide(state(5000, [A], idle={"a": 10}, history=h), CFG)
    assert d.starts() == []
    assert Code.HYSTERESIS in note_codes(d, "a")
    h = {"a": GroupHistory(last_drain=4000)}
    assert started(decide(state(5000, [A], idle={"a": 10}, history=h), CFG), "a") == 3


def test_boot_deadline_reaps_as_failed_and_backs_off() -> None:
    vms = [vm("v1", "a", VmState.BOOTING, since=0, requested_at=0)]
    d = decide(state(1000, [A], vms=vms, idle={"a": 4}), CFG)
    (reap,) = d.reaps()
    assert reap.outcome is VmState.FAILED
    assert reap.reason.code is Code.BOOT_DEADLINE
    assert d.starts() == []
    assert Code.GROUP_BACKOFF in note_codes(d, "a")


@pytest.mark.parametrize(
    ("failures", "last", "now", "blocked"),
    [
        (1, 1000, 1059, True),
        (1, 1000, 1060, False),
        (3, 1000, 1239, True),
        (3, 1000, 1240, False),
        (30, 1000, 4599, True),
        (30, 1000, 4600, False),
    ],
)
def test_backoff_is_exponential_and_capped(failures, last, now, blocked) -> None:
    h = {"a": GroupHistory(boots=FailureHistory(failures, last))}
    d = decide(state(now, [A], idle={"a": 4}, history=h), CFG)
    assert (started(d, "a") == 0) is blocked


def test_cluster_backoff_moves_starts_to_other_clusters() -> None:
    room = {"c1": {"c4": 5}, "c2": {"c4": 5}}
    cl = {"c1": FailureHistory(2, 950)}
    d = decide(state(1000, [A], idle={"a": 40}, room=room, clusters=cl), CFG)
    (s,) = d.starts()
    assert s.clusters == ("c2",)
    assert s.count == 5
    room = {"c1": {"c4": 5}}
    d = decide(state(1000, [A], idle={"a": 40}, room=room, clusters=cl), CFG)
    assert d.starts() == []
    assert Code.CLUSTER_BACKOFF in note_codes(d, "a")


def test_stale_heartbeat_is_lost() -> None:
    vms = [vm("v1", "a", since=0, heartbeat=100), vm("v2", "a", since=0, heartbeat=900)]
    d = decide(state(1000, [A], vms=vms, running={"v1": 4, "v2": 4}), CFG)
    assert [(r.vm, r.outcome) for r in d.reaps()] == [("v1", VmState.LOST)]


def test_draining_vm_retired_when_empty_or_forced_at_deadline() -> None:
    vms = [
        vm("v1", "a", VmState.DRAINING, since=0),
        vm("v2", "a", VmState.DRAINING, since=0),
        vm("v3", "a", VmState.DRAINING, since=3000),
    ]
    d = decide(state(4000, [A], vms=vms, running={"v2": 1, "v3": 1}), CFG)
    assert [(r.vm, r.force) for r in d.retires()] == [("v1", False), ("v2", True)]


def test_eviction_drains_at_once_and_forces_after_its_deadline() -> None:
    vms = [vm("v1", "a", since=0)]
    d = decide(state(100, [A], vms=vms, running={"v1": 4}, evict=frozenset({"v1"})), CFG)
    assert [(x.vm, x.reason.code) for x in d.drains()] == [("v1", Code.EVICTED)]
    vms = [vm("v1", "a", VmState.DRAINING, since=0)]
    d = decide(state(1300, [A], vms=vms, running={"v1": 4}, evict=frozenset({"v1"})), CFG)
    assert [(r.vm, r.force) for r in d.retires()] == [("v1", True)]


def test_eviction_replacement_is_started_for_demand() -> None:
    vms = [vm("v1", "a", since=0)]
    s = state(100, [A], vms=vms, running={"v1": 4}, idle={"a": 2}, evict=frozenset({"v1"}))
    d = decide(s, CFG)
    assert started(d, "a") == 1
    assert len(d.drains()) == 1


def test_draining_vms_count_against_the_maximum() -> None:
    """A group at its maximum whose old VMs drain (still running jobs, or empty and waiting
    for their agent's shutdown) starts no more until they are gone."""
    g = group("a", max_vms=2, max_cores=8)
    vms = [vm("v1", "a", since=0), vm("v2", "a", VmState.DRAINING, since=50)]
    s = state(100, [g], vms=vms, running={"v1": 4, "v2": 3}, idle={"a": 20})
    d = decide(s, CFG)
    assert started(d, "a") == 0
    (note,) = [n for n in d.report("a").notes if n.code is Code.AT_MAX]
    assert "1 draining" in note.message
    s = state(100, [g], vms=vms, running={"v1": 4, "v2": 0}, idle={"a": 20})
    d = decide(s, CFG)  # v2 is retired now, but its server goes only after the shutdown
    assert [r.vm for r in d.retires()] == ["v2"]
    assert started(d, "a") == 0
    s = state(100, [g], vms=vms[:1], running={"v1": 4}, idle={"a": 20})
    assert started(decide(s, CFG), "a") == 1  # gone: room again
    evicted = state(100, [g], vms=[vm("v1", "a"), vm("v2", "a")], evict=frozenset({"v1"}))
    d = decide(replace(evicted, queue=s.queue), CFG)
    assert [x.vm for x in d.drains()] == ["v1"]
    assert started(d, "a") == 0  # the evicted VM still drains on its host


def test_rate_limits() -> None:
    cfg = ControllerConfig(max_starts=5, max_starts_per_group=3, max_drains=2)
    b = group("b")
    d = decide(state(0, [A, b], idle={"a": 100, "b": 100}), cfg)
    assert started(d, "a") == 3
    assert started(d, "b") == 2
    assert Code.RATE_LIMIT in note_codes(d, "a")
    assert Code.RATE_LIMIT in note_codes(d, "b")
    vms = [vm(f"v{i}", "a", since=0, idle_since=0) for i in range(5)]
    d = decide(state(5000, [A], vms=vms), cfg)
    assert len(d.drains()) == 2
    assert Code.RATE_LIMIT in note_codes(d, "a")


def test_global_cap_counts_every_live_vm() -> None:
    vms = [vm("v1", "a", since=0, idle_since=4900), vm("v2", "a", VmState.DRAINING, since=4000)]
    d = decide(state(5000, [A], vms=vms, idle={"a": 40}, global_max_vms=4, running={"v2": 1}), CFG)
    assert started(d, "a") == 2
    assert Code.GLOBAL_CAP in note_codes(d, "a")
    d = decide(state(5000, [A], idle={"a": 40}, global_max_cores=10), CFG)
    assert started(d, "a") == 2


def test_fair_share_by_weight_and_minimums_first() -> None:
    a, b = group("a", share=3.0), group("b", share=1.0)
    d = decide(state(0, [a, b], idle={"a": 400, "b": 400}, room={"c1": {"c4": 8}}), CFG)
    assert (started(d, "a"), started(d, "b")) == (6, 2)
    assert Code.FAIR_SHARE in note_codes(d, "b")
    d = decide(state(0, [a], idle={"a": 400}, room={"c1": {"c8": 8}}), CFG)
    assert d.starts() == []
    assert Code.NO_ROOM in note_codes(d, "a")
    b = group("b", min_vms=3, share=1.0)
    d = decide(state(0, [a, b], idle={"a": 400, "b": 0}, room={"c1": {"c4": 4}}), CFG)
    assert (started(d, "a"), started(d, "b")) == (1, 3)


def test_over_quota_drains_the_least_busy() -> None:
    g = group("a", max_vms=1)
    vms = [vm("v1", "a", since=0), vm("v2", "a", since=0), vm("v3", "a", since=0)]
    d = decide(state(100, [g], vms=vms, running={"v1": 3, "v2": 1, "v3": 2}), CFG)
    assert [(x.vm, x.reason.code) for x in d.drains()] == [
        ("v2", Code.OVER_QUOTA),
        ("v3", Code.OVER_QUOTA),
    ]


def test_unknown_group_vm_is_drained() -> None:
    vms = [vm("v1", "gone", since=0)]
    d = decide(state(100, [A], vms=vms), CFG)
    assert [(x.vm, x.group, x.reason.code) for x in d.drains()] == [
        ("v1", "gone", Code.UNKNOWN_GROUP)
    ]


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ValueError, match="min_vms"):
        state(0, [group("a", min_vms=5, max_vms=2)])
    with pytest.raises(ValueError, match="max_starts"):
        ControllerConfig(max_starts=-1)
    with pytest.raises(ValueError, match="listed twice"):
        state(0, [A, A])
    with pytest.raises(ValueError, match="now"):
        state(float("nan"), [A])


def test_decision_is_json_ready() -> None:
    import json

    vms = [vm("v1", "a", VmState.BOOTING, since=0)]
    d = decide(state(1000, [A], vms=vms, idle={"a": 4}), CFG)
    data = json.loads(json.dumps(d.to_dict()))
    assert data["actions"][0] == {
        "kind": "reap",
        "vm": "v1",
        "group": "a",
        "outcome": "failed",
        "cluster": "c1",
        "reason": {"code": "boot_deadline", "message": "did not join within the boot deadline"},
    }
    assert data["groups"][0]["notes"][0]["code"] == "group_backoff"


def test_advance_history_stamps_moves_counts_failures_and_resets_on_join() -> None:
    from berth.elastic.history import advance_history

    vms = [vm("v1", "a", VmState.BOOTING, since=0, cluster="c2")]
    s = state(1000, [A], vms=vms, idle={"a": 4})
    groups, clusters = advance_history(s, decide(s, CFG))
    assert groups["a"].boots == FailureHistory(1, 1000)
    assert clusters["c2"] == FailureHistory(1, 1000)
    assert groups["a"].last_start is None  # backing off: nothing started
    later = state(
        2000,
        [A],
        vms=[vm("v2", "a", since=1500, cluster="c2")],
        idle={"a": 40},
        history=groups,
        clusters=clusters,
    )
    groups, clusters = advance_history(later, decide(later, CFG))
    assert groups["a"].boots == FailureHistory()  # v2 joined after the failure
    assert clusters["c2"] == FailureHistory()
    assert groups["a"].last_start == 2000
    idle = state(9000, [A], vms=[vm("v2", "a", since=1500, idle_since=2000)], history=groups)
    groups, _ = advance_history(idle, decide(idle, CFG))
    assert groups["a"].last_drain == 9000
