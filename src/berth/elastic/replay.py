"""A replay in virtual time: jobs, a batch system, VMs on hosts, and a policy that grows the pool.

Pure (no clock, seeded): `replay(jobs, policy, setup)` steps a world every `setup.tick` seconds.
Each tick: jobs arrive; jobs end and free their slots; VMs whose boot is done join (a boot fails
with probability `fail_rate`, or always in a cluster during an injected outage: such a VM never
joins); idle jobs are matched FIFO to free slots of their group's joined VMs; the policy acts when
its cycle is due; time is charged. Policies (`berth.elastic.policies`): Berth's controller (with
or without the tidal planner), VCondor's fixed rule, a static split.

The batch system is simplified on purpose: one slot per job, a group's jobs run only on its own
VMs, matching happens every tick. VMs are placed best-fit (the fullest host that fits) on hosts
that are powered on, in the clusters a start allows.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from berth.elastic.model import GroupSpec, VmState
from berth.elastic.workload import Jobs


@dataclass(frozen=True)
class Outage:
    cluster: int
    start: float
    end: float


@dataclass(frozen=True)
class Setup:
    groups: tuple[GroupSpec, ...]
    hosts: int = 64
    host_cores: int = 24
    clusters: int = 3
    tick: float = 30.0
    boot_seconds: float = 80.0  # boot 10 s + sync and update 60 s + join 10 s
    agent_period: float = 60.0  # the VM agent's script runs once a minute: + U(0, 60) s
    host_boot: float = 300.0  # a powered-off host takes this long to come back
    fail_rate: float = 0.05
    outages: tuple[Outage, ...] = ()
    measure_from: float = 0.0  # measures count from here (earlier days warm the history)
    seed: int = 0

    @property
    def vm_cores(self) -> int:
        return self.groups[0].cores_per_vm


@dataclass
class SimVm:
    name: str
    group: int
    state: VmState
    since: float
    requested_at: float
    ready_at: float
    fails: bool
    host: int
    cluster: int
    running: int = 0
    idle_since: float | None = None


@dataclass
class Measures:
    waits: list[float] = field(default_factory=list)
    unstarted: int = 0
    vm_seconds: float = 0.0
    idle_vm_seconds: float = 0.0
    boot_vm_seconds: float = 0.0  # of which booting (never yet joined)
    boots: int = 0
    failed_boots: int = 0
    placement_misses: int = 0
    host_off_seconds: float = 0.0
    killed_jobs: int = 0
    timeline: list[tuple[float, int, int, int, int]] = field(default_factory=list)


class Policy(Protocol):
    name: str
    cycle: float

    def step(self, world: World, now: float) -> None: ...


class World:
    """The replay's mutable state, and the actions a policy may take on it."""

    def __init__(self, jobs: Jobs, setup: Setup) -> None:
        self.jobs = jobs
        self.setup = setup
        self.rng = np.random.default_rng(setup.seed)
        self.index = {g.name: i for i, g in enumerate(setup.groups)}
        self.free = np.full(setup.hosts, setup.host_cores, dtype=np.int64)
        self.cluster_of = np.arange(setup.hosts) % setup.clusters
        self.power_on = np.ones(setup.hosts, dtype=bool)  # on or coming on
        self.usable_at = np.zeros(setup.hosts)  # when a host coming on can take VMs
        self.power_since = np.zeros(setup.hosts)
        self.vms_on = np.zeros(setup.hosts, dtype=np.int64)
        self.vms: dict[str, SimVm] = {}
        self.queues: list[deque[int]] = [deque() for _ in setup.groups]
        self.ends: list[tuple[float, int, str]] = []  # (end, job, vm)
        self.on_vm: dict[str, set[int]] = {}
        self.serial = 0
        self.m = Measures()

    # ---------------------------------------------------------------- what policies read
    def idle_jobs(self, g: int) -> int:
        return len(self.queues[g])

    def running_jobs(self, g: int) -> int:
        return sum(v.running for v in self.vms.values() if v.group == g)

    def usable(self, now: float) -> np.ndarray:
        return self.power_on & (self.usable_at <= now)

    def room(self, now: float) -> dict[str, dict[str, int]]:
        """Per cluster and flavor, how many VMs fit now (Berth's capacity count, in cores)."""
        fits = np.where(self.usable(now), self.free // self.setup.vm_cores, 0)
        flavors = sorted({g.flavor for g in self.setup.groups})
        per = np.bincount(self.cluster_of, weights=fits, minlength=self.setup.clusters)
        return {f"c{c}": {f: int(per[c]) for f in flavors} for c in range(self.setup.clusters)}

    # ---------------------------------------------------------------- what policies do
    def start(self, g: int, now: float, clusters: Sequence[int] | None = None) -> bool:
        """Boot one VM of group g best-fit on a usable host; False when none fits."""
        cores = self.setup.groups[g].cores_per_vm
        ok = self.usable(now) & (self.free >= cores)
        if clusters is not None:
            ok &= np.isin(self.cluster_of, np.asarray(clusters, dtype=np.int64))
        if not ok.any():
            self.m.placement_misses += 1
            return False
        cand = np.flatnonzero(ok)
        host = int(cand[np.argmin(self.free[cand])])
        self.free[host] -= cores
        self.vms_on[host] += 1
        self.serial += 1
        name = f"vm{self.serial:06d}"
        cl = int(self.cluster_of[host])
        down = any(o.cluster == cl and o.start <= now < o.end for o in self.setup.outages)
        fails = down or bool(self.rng.random() < self.setup.fail_rate)
        ready = now + self.setup.boot_seconds + float(self.rng.uniform(0, self.setup.agent_period))
        self.vms[name] = SimVm(name, g, VmState.BOOTING, now, now, ready, fails, host, cl)
        self.on_vm[name] = set()
        if now >= self.setup.measure_from:
            self.m.boots += 1
        return True

    def drain(self, name: str, now: float) -> None:
        v = self.vms[name]
        if v.state is VmState.JOINED:
            v.state, v.since = VmState.DRAINING, now

    def delete(self, name: str, now: float, *, failed: bool = False) -> None:
        v = self.vms.pop(name)
        self.free[v.host] += self.setup.groups[v.group].cores_per_vm
        self.vms_on[v.host] -= 1
        for job in sorted(self.on_vm.pop(name)):  # killed jobs go back to the queue's head
            self.queues[v.group].appendleft(job)
            self.m.killed_jobs += 1
        if failed and now >= self.setup.measure_from:
            self.m.failed_boots += 1

    def set_power(self, host: int, on: bool, now: float) -> None:
        if not on and self.vms_on[host] > 0:
            raise ValueError(f"host {host}: powering off a host with a VM on it")
        self.power_on[host] = on
        self.power_since[host] = now
        self.usable_at[host] = now + self.setup.host_boot if on else np.inf

    # ---------------------------------------------------------------- the tick
    def advance(self, now: float, cursor: int) -> int:
        jobs = self.jobs
        while cursor < len(jobs) and jobs.submit[cursor] <= now:
            self.queues[int(jobs.group[cursor])].append(cursor)
            cursor += 1
        while self.ends and self.ends[0][0] <= now:
            end, job, name = heapq.heappop(self.ends)
            v = self.vms.get(name)
            if v is None or job not in self.on_vm[name]:
                continue  # killed with its VM
            self.on_vm[name].discard(job)
            v.running -= 1
            if v.running == 0:
                v.idle_since = end
        for v in self.vms.values():
            if v.state is VmState.BOOTING and not v.fails and v.ready_at <= now:
                v.state, v.since, v.idle_since = VmState.JOINED, now, now
        self._match(now)
        return cursor

    def _match(self, now: float) -> None:
        slots = [g.slots_per_vm for g in self.setup.groups]
        for v in sorted(self.vms.values(), key=lambda x: x.name):
            q = self.queues[v.group]
            if v.state is not VmState.JOINED or not q:
                continue
            while q and v.running < slots[v.group]:
                job = q.popleft()
                submit = float(self.jobs.submit[job])
                if submit >= self.setup.measure_from:
                    self.m.waits.append(now - submit)
                v.running += 1
                v.idle_since = None
                self.on_vm[v.name].add(job)
                heapq.heappush(self.ends, (now + float(self.jobs.runtime[job]), job, v.name))

    def charge(self, now: float, dt: float) -> None:
        if now < self.setup.measure_from:
            return
        m = self.m
        n = len(self.vms)
        idle = sum(1 for v in self.vms.values() if v.running == 0)
        booting = sum(1 for v in self.vms.values() if v.state is VmState.BOOTING)
        m.boot_vm_seconds += booting * dt
        m.vm_seconds += n * dt
        m.idle_vm_seconds += idle * dt
        m.host_off_seconds += float((~self.power_on).sum()) * dt
        if int(now) % 300 == 0:
            running = sum(v.running for v in self.vms.values())
            queued = sum(len(q) for q in self.queues)
            m.timeline.append((now, n, running, queued, int((~self.power_on).sum())))


@dataclass(frozen=True)
class Result:
    policy: str
    waits: np.ndarray
    unstarted: int
    vm_hours: float
    idle_vm_hours: float
    boot_vm_hours: float
    boots: int
    failed_boots: int
    placement_misses: int
    host_hours_off: float
    killed_jobs: int
    timeline: tuple[tuple[float, int, int, int, int], ...]

    def wait_quantile(self, q: float) -> float:
        return float(np.quantile(self.waits, q)) if len(self.waits) else 0.0


def replay(jobs: Jobs, policy: Policy, setup: Setup, horizon: float) -> Result:
    """Run `policy` over `jobs` from 0 to `horizon` (virtual seconds); measures from
    `setup.measure_from`. A job still queued at the end counts with its wait so far."""
    world = World(jobs, setup)
    cursor = 0
    steps = round(horizon / setup.tick)
    cycle_ticks = max(1, round(policy.cycle / setup.tick))
    for k in range(steps + 1):
        now = k * setup.tick
        cursor = world.advance(now, cursor)
        if k % cycle_ticks == 0:
            policy.step(world, now)
            world._match(now)
        world.charge(now, setup.tick)
    m = world.m
    for q in world.queues:
        for job in q:
            submit = float(jobs.submit[job])
            if submit >= setup.measure_from:
                m.waits.append(horizon - submit)
                m.unstarted += 1
    return Result(
        policy=policy.name,
        waits=np.asarray(m.waits, dtype=np.float64),
        unstarted=m.unstarted,
        vm_hours=m.vm_seconds / 3600.0,
        idle_vm_hours=m.idle_vm_seconds / 3600.0,
        boot_vm_hours=m.boot_vm_seconds / 3600.0,
        boots=m.boots,
        failed_boots=m.failed_boots,
        placement_misses=m.placement_misses,
        host_hours_off=m.host_off_seconds / 3600.0,
        killed_jobs=m.killed_jobs,
        timeline=tuple(m.timeline),
    )
