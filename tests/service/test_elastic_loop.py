"""The elastic control loop in-process: the real store, Berth's placement and a simulated cloud;
the batch queue is scripted (the real HTCondor and Slurm runs are in tests/elastic/) and the
test plays each VM's agent through the real agent routes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from berth.cloud.driver import BootRequest, HostPower, Server, ServerState
from berth.elastic.actions import Code, Reap, Reason
from berth.elastic.model import GroupDemand, QueueSnapshot, VmState
from berth.elastic.state import ControllerConfig
from berth.elastic.tidal import DAY, TidalConfig, host_views
from berth.service.elastic import carry
from berth.service.elastic.hooks import Hook, HookRunner
from berth.service.elastic.loop import ElasticLoop, LoopConfig
from tests.service.elastic_env import ElasticEnv, htcondor_group, make_elastic_env
from tests.store.fleets import NOW

CONTROL = ControllerConfig(
    keep_alive=10, hysteresis=5, boot_deadline=30, heartbeat_stale=20, backoff_base=10
)


class ScriptedQueue:
    """A queue watcher whose demand the test sets (a stand-in for a batch system's queue)."""

    def __init__(self, clock: Any) -> None:
        self.idle: dict[str, int] = {}
        self.clock = clock

    def snapshot(self) -> QueueSnapshot:
        groups = {g: GroupDemand(g, idle_jobs=n) for g, n in self.idle.items()}
        return QueueSnapshot(self.clock(), groups, {})


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_loop(
    env: ElasticEnv, clock: Clock, queue: ScriptedQueue, hooks: list[Hook]
) -> ElasticLoop:
    runner = HookRunner(env.store, hooks, backoff_base=4, backoff_max=60, clock=clock)
    return ElasticLoop(
        env.replica,
        {"c1": env.cloud},
        [queue],
        LoopConfig(
            controller=CONTROL, agent_url="http://testserver", shutdown_grace=30, drain_settle=2
        ),
        hooks=runner,
        metrics=env.app.state.elastic_metrics,
        clock=clock,
    )


@pytest.fixture
def env(tmp_path: Path, clock: Clock) -> Iterator[ElasticEnv]:
    e = make_elastic_env(tmp_path / "berth.db", clock=clock)
    e.store.put_elastic_group(htcondor_group("juno", max_vms=3))
    yield e
    e.store.close()


def _servers(env: ElasticEnv) -> dict[str, Server]:
    return {s.name: s for s in env.cloud.servers() if "berth_vm" in s.metadata}


def _beat(env: ElasticEnv, server: Server, running: int = 0) -> list[dict[str, Any]]:
    """One heartbeat as the VM's agent; the commands it got."""
    token = server.metadata["berth_token"]
    r = env.post(f"/v1/elastic/vms/{server.name}/heartbeat", {"running_jobs": running}, token)
    assert r.status_code == 200, r.text
    return list(r.json()["commands"])


def _answer(env: ElasticEnv, server: Server, commands: list[dict[str, Any]]) -> list[str]:
    token = server.metadata["berth_token"]
    for c in commands:
        path = f"/v1/elastic/vms/{server.name}/commands/{c['id']}/result"
        assert env.post(path, {"ok": True, "result": "done"}, token).status_code == 200
    return [c["kind"] for c in commands]


def test_a_pool_grows_joins_drains_and_retires(
    env: ElasticEnv, clock: Clock, tmp_path: Path
) -> None:
    marker = tmp_path / "dns-ok"
    flaky = Hook(
        "dns",
        (
            sys.executable,
            "-c",
            f"import os,sys; sys.exit(0 if os.path.exists({str(marker)!r}) else 3)",
        ),
    )
    queue = ScriptedQueue(clock)
    loop = make_loop(env, clock, queue, [flaky])
    queue.idle["juno"] = 20  # 5 VMs' worth, but the group's maximum is 3
    decision = loop.cycle()
    assert decision.report("juno").started == 3
    vms = env.store.list_vms(group="juno")
    assert [v.state for v in vms] == [VmState.BOOTING] * 3
    servers = _servers(env)
    assert sorted(servers) == sorted(v.name for v in vms)
    for v in vms:  # placed by Berth as elastic (preemptible), booted on that very host
        inst = env.store.get_instance(v.instance_id or "")
        assert (inst.business_type, inst.preemptible, inst.host) == ("elastic", True, v.host)
        assert servers[v.name].host == v.host
        assert servers[v.name].state is ServerState.ACTIVE
    assert loop.cycle().report("juno").started == 0  # at its maximum: no more

    clock.now += 1
    for s in servers.values():
        assert _beat(env, s) == []
    loop.cycle()  # the join hook fails: held out of the pool, no join command
    runs = env.store.hook_runs(event="join")
    assert [(r.outcome, r.exit_code, r.attempt) for r in runs] == [("failed", 3, 1)] * 3
    assert all(r.next_retry == r.finished_at + 4 for r in runs)
    assert all(_beat(env, s) == [] for s in servers.values())
    marker.touch()
    loop.cycle()  # before the retry time: not run again
    assert len(env.store.hook_runs(event="join")) == 3
    clock.now += 5
    loop.cycle()
    assert [r.outcome for r in env.store.hook_runs(event="join")][3:] == ["ok"] * 3
    for s in servers.values():
        assert _answer(env, s, _beat(env, s)) == ["join"]
    assert {v.state for v in env.store.list_vms(group="juno")} == {VmState.JOINED}

    queue.idle["juno"] = 0  # the queue empties: idle past keep-alive, they drain
    clock.now += 11
    for s in servers.values():
        _beat(env, s)
    decision = loop.cycle()
    assert {a.reason.code.value for a in decision.drains()} == {"idle"}
    assert {v.state for v in env.store.list_vms(group="juno")} == {VmState.DRAINING}
    for s in servers.values():
        assert _answer(env, s, _beat(env, s)) == ["leave"]
    clock.now += 1
    loop.cycle()  # drained with no job, but the leave was done only a second ago: settling
    assert all(_beat(env, s) == [] for s in servers.values())
    clock.now += 1
    loop.cycle()  # settled: shutdown asked first
    for s in servers.values():
        assert _answer(env, s, _beat(env, s)) == ["shutdown"]
    loop.cycle()  # shut down: deleted, claims released, retired
    assert _servers(env) == {}
    assert {v.state for v in env.store.list_vms(group="juno")} == {VmState.RETIRED}
    assert [i for i in env.store.list_instances() if i.business_type == "elastic"] == []
    for v in env.store.list_vms(group="juno"):
        states = [c.state.value for c in env.store.vm_history(vm=v.name)]
        assert states == ["requested", "booting", "joined", "draining", "retired"]
    metrics = env.client.get("/metrics").text
    assert 'berth_elastic_actions_total{action="start"} 3.0' in metrics
    idle = [ln for ln in metrics.splitlines() if ln.startswith("berth_elastic_idle_vm_hours_total")]
    assert float(idle[0].split()[-1]) > 0  # joined VMs idled past their keep-alive
    assert "berth_elastic_boot_seconds_count 3.0" in metrics


def test_a_vm_that_never_joins_is_reaped_and_the_group_backs_off(
    env: ElasticEnv, clock: Clock
) -> None:
    queue = ScriptedQueue(clock)
    loop = make_loop(env, clock, queue, [])
    queue.idle["juno"] = 4
    env.cloud.fail_boots = 1
    loop.cycle()
    (vm,) = env.store.list_vms()
    assert vm.state is VmState.BOOTING
    clock.now += 31  # past the boot deadline, never joined
    decision = loop.cycle()
    assert [a.reason.code.value for a in decision.reaps()] == ["boot_deadline"]
    assert env.store.get_vm(vm.name).state is VmState.FAILED
    assert _servers(env) == {}
    assert decision.report("juno").started == 0
    assert "group_backoff" in {n.code.value for n in decision.report("juno").notes}
    clock.now += 11  # the backoff (10 s) passed: a new VM, a new name
    decision = loop.cycle()
    assert decision.report("juno").started == 1
    names = [v.name for v in env.store.list_vms()]
    assert len(set(names)) == 2
    assert 'berth_elastic_failed_boots_total{group="juno"} 1.0' in env.client.get("/metrics").text


def test_a_restart_keeps_the_backoff(env: ElasticEnv, clock: Clock) -> None:
    """The group's and the cluster's failed boots live in the store: a Berth restarted during
    the backoff does not retry at once, and the hysteresis clock survives too."""
    queue = ScriptedQueue(clock)
    loop = make_loop(env, clock, queue, [])
    queue.idle["juno"] = 4
    env.cloud.fail_boots = 1
    loop.cycle()
    clock.now += 31  # past the boot deadline
    failed_at = clock.now
    assert [a.reason.code for a in loop.cycle().reaps()] == [Code.BOOT_DEADLINE]
    stored = {(r.kind, r.name): r for r in env.store.elastic_backoff()}
    assert (stored["group", "juno"].failures, stored["group", "juno"].last_failure) == (
        1,
        failed_at,
    )
    assert stored["group", "juno"].last_start == NOW
    assert stored["cluster", "c1"].failures == 1
    clock.now += 5
    restarted = make_loop(env, clock, queue, [])  # a new Berth on the same store
    assert restarted.history == loop.history
    assert restarted.cluster_history == loop.cluster_history
    decision = restarted.cycle()
    assert decision.report("juno").started == 0
    assert Code.GROUP_BACKOFF in {n.code for n in decision.report("juno").notes}
    clock.now += 6  # the backoff (10 s) passed
    assert restarted.cycle().report("juno").started == 1


def test_a_reap_decided_on_a_stale_view_does_nothing(env: ElasticEnv, clock: Clock) -> None:
    """The controller saw a VM booting past its deadline; its join came back meanwhile."""
    queue = ScriptedQueue(clock)
    loop = make_loop(env, clock, queue, [])
    queue.idle["juno"] = 4
    loop.cycle()
    (server,) = _servers(env).values()
    seen = env.store.get_vm(server.name)
    _beat(env, server)
    loop.cycle()
    _answer(env, server, _beat(env, server))
    reason = Reason(Code.BOOT_DEADLINE, "did not join within the boot deadline")
    stale = Reap(server.name, "juno", VmState.FAILED, "c1", reason)
    assert carry.reap(loop.out, stale, seen) is None
    assert env.store.get_vm(server.name).state is VmState.JOINED
    assert server.name in _servers(env)  # its server and claim are untouched
    assert env.store.get_instance(seen.instance_id or "").host == seen.host


def test_a_stale_agent_is_lost(env: ElasticEnv, clock: Clock) -> None:
    queue = ScriptedQueue(clock)
    loop = make_loop(env, clock, queue, [])
    queue.idle["juno"] = 4
    loop.cycle()
    (server,) = _servers(env).values()
    _beat(env, server)
    loop.cycle()
    _answer(env, server, _beat(env, server, running=4))
    assert env.store.get_vm(server.name).state is VmState.JOINED
    clock.now += 21  # the agent went silent
    decision = loop.cycle()
    assert [(a.vm, a.reason.code.value) for a in decision.reaps()] == [
        (server.name, "heartbeat_stale")
    ]
    assert env.store.get_vm(server.name).state is VmState.LOST
    assert server.name not in _servers(env)  # deleted; a new VM takes its place for the jobs
    assert len(_servers(env)) == 1
    assert (
        env.post(
            f"/v1/elastic/vms/{server.name}/heartbeat", {}, server.metadata["berth_token"]
        ).status_code
        == 401
    )


def test_a_restart_mid_cycle_loses_no_record_and_boots_no_twin(
    tmp_path: Path, clock: Clock
) -> None:
    crash = {"on": True}

    def on_boot(_server: Server) -> None:  # the process dies right after the cloud accepted
        if crash["on"]:
            raise KeyboardInterrupt("killed mid-cycle")

    env = make_elastic_env(tmp_path / "berth.db", clock=clock, on_boot=on_boot)
    env.store.put_elastic_group(htcondor_group("juno", max_vms=3))
    queue = ScriptedQueue(clock)
    first = make_loop(env, clock, queue, [])
    first.reconciled = True
    queue.idle["juno"] = 4
    with pytest.raises(KeyboardInterrupt):
        first.cycle()
    (vm,) = env.store.list_vms()
    assert vm.state is VmState.REQUESTED  # recorded before the call; the mark was lost
    assert list(_servers(env)) == [vm.name]
    # and a VM recorded just before another crash, before any cloud call
    orphan_record, _ = env.store.record_vm("juno-pending", "juno", clock.now)
    crash["on"] = False
    second = make_loop(env, clock, queue, [])
    decision = second.cycle()  # reconciles first
    assert decision.report("juno").started == 0  # two VMs already cover 4 idle jobs
    vms = {v.name: v for v in env.store.list_vms()}
    assert set(vms) == {vm.name, "juno-pending"}
    assert {v.state for v in vms.values()} == {VmState.BOOTING}
    servers = _servers(env)
    assert set(servers) == set(vms)  # one server per record, none twice
    assert vms[vm.name].server_id == servers[vm.name].id
    token = servers["juno-pending"].metadata["berth_token"]  # a fresh token for the new boot
    assert env.post("/v1/elastic/vms/juno-pending/heartbeat", {}, token).status_code == 200
    assert orphan_record.token_id != vms["juno-pending"].token_id
    # a restart between ending a record and deleting its server and claim: both go
    pending = vms["juno-pending"]
    env.store.move_vm(pending.name, VmState.LOST, clock.now, "test: ended before its server")
    assert env.store.get_instance(pending.instance_id or "").business_type == "elastic"
    third = make_loop(env, clock, queue, [])
    done = third.reconcile()
    assert done["orphans"] == [pending.name, pending.name]  # the server, then the claim
    assert pending.name not in _servers(env)
    assert all(i.id != pending.instance_id for i in env.store.list_instances())
    env.store.close()


def test_an_on_demand_request_evicts_an_elastic_vm_gracefully(
    env: ElasticEnv, clock: Clock
) -> None:
    queue = ScriptedQueue(clock)
    loop = make_loop(env, clock, queue, [])
    env.store.put_elastic_group(htcondor_group("juno", max_vms=8))
    queue.idle["juno"] = 32  # fills both hosts: 8 VMs
    loop.cycle()
    servers = _servers(env)
    assert len(servers) == 8
    for s in servers.values():
        _beat(env, s)
    loop.cycle()
    for s in servers.values():
        _answer(env, s, _beat(env, s, running=4))
    r = env.post("/v1/placements", {"flavor": "p4", "count": 1, "project": "p1"}, "operator")
    assert r.status_code == 201, r.text
    (evicted,) = r.json()["evicted"]
    victim = next(v for v in env.store.list_vms() if v.instance_id == evicted)
    decision = loop.cycle()
    assert [(a.vm, a.reason.code.value) for a in decision.drains()] == [(victim.name, "evicted")]
    assert env.store.get_vm(victim.name).state is VmState.DRAINING
    assert decision.report("juno").started == 0  # its room is the on-demand VM's now


def test_tidal_power_is_applied_through_the_driver_and_recorded(
    tmp_path: Path, clock: Clock
) -> None:
    """Empty hosts go off (disabled in Berth first), never one with a VM or any server on it;
    a forecast from yesterday's samples powers them back on before the demand arrives."""
    env = make_elastic_env(tmp_path / "berth.db", clock=clock, hosts=4)
    env.store.put_elastic_group(htcondor_group("juno", max_vms=3))
    queue = ScriptedQueue(clock)
    queue.idle["juno"] = 1
    make_loop(env, clock, queue, []).cycle()  # one VM booted, without power management
    (vm,) = env.store.list_vms()
    other = next(f"h-c1-{i}" for i in range(4) if f"h-c1-{i}" != vm.host)
    outsider = env.cloud.boot(BootRequest("outside", "p4", other))  # no claim in Berth
    tidal = TidalConfig(days=1, lookahead=3600, margin=0.0, min_on=1, min_dwell=0, max_off=4)
    loop = ElasticLoop(  # Berth again, now with tidal power management
        env.replica,
        {"c1": env.cloud},
        [queue],
        LoopConfig(controller=CONTROL, agent_url="http://testserver", tidal=tidal),
        metrics=env.app.state.elastic_metrics,
        clock=clock,
    )
    clock.now += 1
    loop.cycle()  # the demand is the VM's cores and its idle job: the empty hosts can go
    hosts = [f"h-c1-{i}" for i in range(4)]
    off = sorted(a.host for a in loop.powered if a.done and not a.on)
    assert off == sorted(set(hosts) - {vm.host, other})  # not with a VM, nor an outside server
    assert [a for a in loop.powered if not a.done] == []  # the outside server pins its host:
    assert all(a.host != other for a in loop.powered)  # never tried, never disabled
    for h in hosts:
        expect = HostPower.OFF if h in off else HostPower.ON
        assert env.cloud.power(h) is expect, h
        assert env.store.get_host(h).host.enabled is (h not in off), h
    rows = {r.host: r for r in env.store.host_power_states()}
    assert {h for h, r in rows.items() if r.power == "off"} == set(off)
    assert {r.changed_by for r in rows.values()} == {"tidal"}
    metrics = env.client.get("/metrics").text
    assert 'berth_elastic_power_transitions_total{power="off"} 2.0' in metrics
    assert "berth_hosts_powered_off 2.0" in metrics
    env.cloud.delete(outsider.id)

    # yesterday, 20 minutes later than now, the demand was 4 hosts' worth: power on ahead of it
    per_host = host_views(env.replica.clusters["c1"].table, {}, {})[0].cores
    env.store.record_demand(clock.now - DAY + 1200, 4 * per_host)
    clock.now += 60
    loop.cycle()
    on = sorted(a.host for a in loop.powered if a.done and a.on)
    assert on == off
    for h in hosts:
        assert env.cloud.power(h) is HostPower.ON
        assert env.store.get_host(h).host.enabled
    assert {r.power for r in env.store.host_power_states()} == {"on"}
    env.store.close()
