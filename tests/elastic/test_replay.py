"""The replay: deterministic, within quotas, counts boots and failures, tidal never strands a VM."""

from __future__ import annotations

import numpy as np
import pytest

from berth.elastic.model import BatchSystem, GroupSpec, QueueSelector
from berth.elastic.policies import BerthPolicy, StaticPolicy, VCondorPolicy
from berth.elastic.replay import Outage, Setup, World, replay
from berth.elastic.state import ControllerConfig
from berth.elastic.tidal import TidalConfig
from berth.elastic.workload import DAY, Jobs, seed_day_jobs

HOURS = 8 * 3600.0


def groups() -> tuple[GroupSpec, ...]:
    def g(name: str, share: float, hi: int) -> GroupSpec:
        sel = QueueSelector(BatchSystem.HTCONDOR, accounting_group=name)
        return GroupSpec(name, "c4", 4, 4, sel, min_vms=1, max_vms=hi, share=share)

    return (g("besiii", 5, 30), g("juno", 3, 20), g("lhaaso", 2, 10))


def jobs() -> Jobs:  # a fifth of the rate: quick
    return seed_day_jobs(1, seed=3, jobs_per_day=1000)


SETUP = Setup(groups=groups(), hosts=16, host_cores=24, fail_rate=0.1, seed=3)
CFG = ControllerConfig(boot_deadline=300, keep_alive=120, hysteresis=300)


def test_workload_matches_the_seed_figures() -> None:
    j = seed_day_jobs(3, seed=1)
    per_day = len(j) / 3
    assert 4000 < per_day < 6000
    assert 0.85 < j.runtime.mean() / 3600 < 1.25
    shares = np.bincount(j.group) / len(j)
    assert shares[0] > shares[1] > shares[2]
    assert np.all(np.diff(j.submit) >= 0)
    assert len(seed_day_jobs(1, seed=9)) == len(seed_day_jobs(1, seed=9))


def test_berth_replay_is_deterministic_and_within_quota() -> None:
    class Watch(BerthPolicy):
        def step(self, world: World, now: float) -> None:
            super().step(world, now)
            for i, spec in enumerate(world.setup.groups):
                live = sum(1 for v in world.vms.values() if v.group == i)
                assert live <= spec.max_vms

    a = replay(jobs(), Watch(CFG), SETUP, HOURS)
    b = replay(jobs(), BerthPolicy(CFG), SETUP, HOURS)
    assert a.boots == b.boots
    assert np.array_equal(a.waits, b.waits)
    assert a.boots > 0
    assert a.failed_boots > 0  # 10 % of boots fail and are reaped at the deadline
    assert a.unstarted < len(a.waits)


def test_berth_waits_less_than_vcondor_on_the_same_jobs() -> None:
    berth = replay(jobs(), BerthPolicy(CFG), SETUP, HOURS)
    vcondor = replay(jobs(), VCondorPolicy(), SETUP, HOURS)
    assert berth.wait_quantile(0.95) < vcondor.wait_quantile(0.95)


def test_static_split_boots_once_and_idles() -> None:
    r = replay(jobs(), StaticPolicy(), SETUP, HOURS)
    assert r.idle_vm_hours > replay(jobs(), BerthPolicy(CFG), SETUP, HOURS).idle_vm_hours


def test_tidal_powers_hosts_off_and_never_one_with_a_vm() -> None:
    # World.set_power raises on a host with a VM: the replay finishing is the check
    setup = Setup(
        groups=groups(),
        hosts=16,
        host_cores=24,
        fail_rate=0.0,
        seed=3,
        outages=(Outage(0, 0, 3600),),
    )
    pol = BerthPolicy(CFG, tidal=TidalConfig(days=1, min_on=2, min_dwell=600))
    r = replay(seed_day_jobs(2, seed=3, jobs_per_day=1000), pol, setup, DAY + HOURS)
    assert r.host_hours_off > 0
    assert r.failed_boots > 0  # cluster 0 fails every boot in the first hour


def test_world_refuses_to_power_off_a_host_with_a_vm() -> None:
    w = World(jobs(), SETUP)
    assert w.start(0, 0.0)
    host = int(np.flatnonzero(w.vms_on)[0])
    with pytest.raises(ValueError, match="with a VM"):
        w.set_power(host, False, 0.0)
