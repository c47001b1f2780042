"""The policies the replay compares: Berth's controller (and tidal planner), VCondor, static.

* `BerthPolicy` builds a `ControlState` from the world every `cycle` seconds, calls `decide`,
  carries the actions out and folds them into the history (`advance_history`); with a
  `TidalConfig` it also runs the tidal planner every `tidal_period` seconds on the demand seen
  so far (cores wanted = cores the VMs hold + one core for each idle job).
* `VCondorPolicy` is VCondor's rule as IHEP describes it: every 600 s, per group, launch
  min(VMs for the idle jobs, quota headroom) and destroy every VM that runs no job; a VM that has
  not joined by the next cycle after 600 s counts as a failed boot and is deleted.
* `StaticPolicy` boots a fixed split of the pool at time 0 (by `share`) and never changes it,
  replacing a VM whose boot failed at the next 600 s cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from berth.cloud.driver import HostPower
from berth.elastic.actions import Drain, Reap, Retire, Start
from berth.elastic.controller import decide
from berth.elastic.history import advance_history
from berth.elastic.model import GroupDemand, QueueSnapshot, Vm, VmState, WorkerStatus
from berth.elastic.replay import World
from berth.elastic.state import ControllerConfig, ControlState, FailureHistory, GroupHistory
from berth.elastic.tidal import HostView, TidalConfig, TidalPlan, plan_power


def _cluster_index(name: str) -> int:
    return int(name[1:])


@dataclass
class BerthPolicy:
    config: ControllerConfig = field(default_factory=ControllerConfig)
    cycle: float = 60.0
    tidal: TidalConfig | None = None
    tidal_period: float = 60.0
    global_max_vms: int | None = None
    name: str = "berth"
    history: dict[str, GroupHistory] = field(default_factory=dict)
    clusters: dict[str, FailureHistory] = field(default_factory=dict)
    samples: list[tuple[float, float]] = field(default_factory=list)

    def state(self, world: World, now: float) -> ControlState:
        groups = world.setup.groups
        slots = {g.name: g.slots_per_vm for g in groups}
        vms, workers = [], {}
        for v in world.vms.values():
            gname = groups[v.group].name
            live = v.state in (VmState.JOINED, VmState.DRAINING)
            vms.append(
                Vm(
                    v.name,
                    gname,
                    v.state,
                    v.since,
                    v.requested_at,
                    f"c{v.cluster}",
                    heartbeat=now if live else None,
                    idle_since=v.idle_since,
                )
            )
            if live:
                workers[v.name] = WorkerStatus(v.name, gname, v.running, slots[gname])
        demand = {
            g.name: GroupDemand(g.name, world.idle_jobs(i), world.running_jobs(i))
            for i, g in enumerate(groups)
        }
        return ControlState(
            now=now,
            groups=groups,
            queue=QueueSnapshot(now, demand, workers),
            vms=vms,
            room=world.room(now),
            global_max_vms=self.global_max_vms,
            history=self.history,
            clusters=self.clusters,
        )

    def step(self, world: World, now: float) -> None:
        state = self.state(world, now)
        decision = decide(state, self.config)
        self.history, self.clusters = advance_history(state, decision)
        for a in decision.actions:
            if isinstance(a, Start):
                allowed = [_cluster_index(c) for c in a.clusters]
                for _ in range(a.count):
                    if not world.start(world.index[a.group], now, allowed):
                        break
            elif isinstance(a, Drain):
                world.drain(a.vm, now)
            elif isinstance(a, Retire):
                world.delete(a.vm, now)
            elif isinstance(a, Reap):
                world.delete(a.vm, now, failed=a.outcome is VmState.FAILED)
        self._tidal(world, now)

    def _emptying(self) -> set[int]:
        """Hosts a consolidation is emptying: none, the replay itself does not migrate."""
        return set()

    def _tidal(self, world: World, now: float) -> TidalPlan | None:
        held = float(world.setup.hosts * world.setup.host_cores - world.free.sum())
        idle = sum(world.idle_jobs(i) for i in range(len(world.queues)))  # one core a job
        wanted = held + idle
        self.samples.append((now, wanted))
        if self.tidal is None or int(now) % int(self.tidal_period) != 0:
            return None
        cores, emptying = world.setup.host_cores, self._emptying()
        views = [
            HostView(
                f"h{h}",
                cores,
                float(cores - world.free[h]),
                int(world.vms_on[h]),
                HostPower.ON if world.power_on[h] else HostPower.OFF,
                float(world.power_since[h]),
                emptying=h in emptying,
            )
            for h in range(world.setup.hosts)
        ]
        plan = plan_power(views, self.samples, now, wanted, self.tidal)
        for p in plan.actions:
            world.set_power(int(p.host[1:]), p.on, now)
        return plan


@dataclass
class VCondorPolicy:
    cycle: float = 600.0
    name: str = "vcondor"

    def step(self, world: World, now: float) -> None:
        for v in list(world.vms.values()):
            if v.state is VmState.BOOTING and now - v.requested_at >= 600.0:
                world.delete(v.name, now, failed=True)
            elif v.state is VmState.JOINED and v.running == 0:
                world.delete(v.name, now)
        for g, spec in enumerate(world.setup.groups):
            live = sum(1 for v in world.vms.values() if v.group == g)
            want = math.ceil(world.idle_jobs(g) / spec.slots_per_vm)
            for _ in range(max(0, min(want, spec.max_vms - live))):
                if not world.start(g, now):
                    break


@dataclass
class StaticPolicy:
    cycle: float = 600.0
    name: str = "static"

    def split(self, world: World) -> list[int]:
        groups = world.setup.groups
        total = world.setup.hosts * (world.setup.host_cores // world.setup.vm_cores)
        weight = sum(g.share for g in groups)
        return [int(total * g.share / weight) for g in groups]

    def step(self, world: World, now: float) -> None:
        for v in list(world.vms.values()):
            if v.state is VmState.BOOTING and now - v.requested_at >= 600.0:
                world.delete(v.name, now, failed=True)
        for g, n in enumerate(self.split(world)):
            live = sum(1 for v in world.vms.values() if v.group == g)
            for _ in range(n - live):
                if not world.start(g, now):
                    break
