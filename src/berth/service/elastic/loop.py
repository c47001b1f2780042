"""The elastic control loop: the edge that runs the pure controller (`berth.elastic.controller`).

Each cycle reads the batch queues through the watchers, the VM records and groups from the
store, the room for each group's flavor from Berth's own capacity counting (the replica's
tables), calls `decide`, and carries the actions out (`berth.service.elastic.carry`). Before
deciding it moves booting VMs on: once a VM's agent reports, the join hooks run, and only when
all of them succeeded is the `join` command issued (a failing hook keeps the VM out of the
pool, retried with backoff, until its boot deadline reaps it).

On its first cycle the loop reconciles the records with every cluster's servers (by VM name):
a VM recorded but not yet marked booting whose server exists is marked booting; one with no
server is booted now (with a new agent token); a live VM whose server is gone is retired or
lost; a server Berth booted for a VM whose record is finished is deleted. A restart in the
middle of a cycle therefore loses no record and boots no twin.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from berth.cloud.driver import CloudDriver, Server
from berth.elastic.actions import Decision, Drain, Reap, Retire, Start
from berth.elastic.commands import COMMAND_OPEN, CommandKind
from berth.elastic.controller import decide
from berth.elastic.history import advance_history
from berth.elastic.model import (
    TERMINAL,
    GroupDemand,
    GroupSpec,
    QueueSnapshot,
    VmState,
    WorkerStatus,
)
from berth.elastic.state import ControllerConfig, ControlState, FailureHistory, GroupHistory
from berth.elastic.tidal import TidalConfig
from berth.service.clouds.defrag_exec import DefragExecutor
from berth.service.elastic import carry
from berth.service.elastic.consolidation import Consolidator
from berth.service.elastic.hooks import HookRunner
from berth.service.elastic.memory import load_history, save_history
from berth.service.elastic.metrics import ElasticMetrics
from berth.service.elastic.power import Applied, PowerManager
from berth.service.replica import Replica
from berth.store.elastic_rows import ElasticGroupRow, VmRow, VmStateError

log = logging.getLogger("berth.elastic")
LIVE = tuple(s for s in VmState if s not in TERMINAL)


class Watcher(Protocol):
    """A batch queue watcher (`berth.elastic.watchers`)."""

    def snapshot(self) -> QueueSnapshot: ...


@dataclass
class LoopConfig:
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    interval: float = 60.0  # seconds between cycles (the replayed day's cycle)
    agent_url: str = "http://127.0.0.1:8080"  # where VMs' agents reach the service
    project: str = "elastic"  # the project elastic VMs are placed and booted under
    shutdown_grace: float = 30.0  # a retiring VM is deleted this long after `shutdown`
    drain_settle: float = 10.0  # a drained VM is retired this long after its `leave` was done
    tidal: TidalConfig | None = None  # tidal power management of the driven clusters' hosts


class ElasticLoop:
    def __init__(
        self,
        replica: Replica,
        drivers: Mapping[str, CloudDriver],
        watchers: Sequence[Watcher],
        config: LoopConfig | None = None,
        *,
        hooks: HookRunner | None = None,
        metrics: ElasticMetrics | None = None,
        clock: Callable[[], float] = time.time,
        executor: DefragExecutor | None = None,
    ) -> None:
        """`executor`: the service's defrag execution (`CloudService.executor`); with it and a
        `tidal` config allowing migrations, busy hosts are consolidated before power-off."""
        self.replica = replica
        self.store = replica.store
        self.drivers = dict(drivers)
        self.watchers = list(watchers)
        self.config = config or LoopConfig()
        self.hooks = hooks or HookRunner(self.store, clock=clock)
        self.metrics = metrics
        self.clock = clock
        # the backoff and hysteresis history, kept in the store across restarts
        self.history: dict[str, GroupHistory]
        self.cluster_history: dict[str, FailureHistory]
        self.history, self.cluster_history = load_history(self.store)
        self.last: Decision | None = None
        tidal = self.config.tidal
        consolidator = (
            None
            if tidal is None or executor is None or tidal.max_migrations <= 0
            else Consolidator(replica, executor, self.drivers, tidal, clock, metrics)
        )
        self.power = (
            None
            if tidal is None
            else PowerManager(replica, self.drivers, tidal, clock, consolidator)
        )
        self.powered: list[Applied] = []  # the last cycle's power transitions
        self.reconciled = False
        self._cycle_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_cycle: float | None = None
        self.out = carry.Outside(
            replica,
            self.drivers,
            self.hooks,
            self.config.agent_url,
            self.config.project,
            clock,
            self.config.shutdown_grace,
            self.config.drain_settle,
        )

    # ------------------------------------------------------------------ thread
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="elastic-loop", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.cycle()
            except Exception:  # a failed cycle is logged; the next one starts from the store
                log.exception("elastic cycle failed")
            self._stop.wait(self.config.interval)

    # ------------------------------------------------------------------ one cycle
    def snapshot(self) -> QueueSnapshot:
        """Every watcher's snapshot, merged (groups and workers by name)."""
        groups: dict[str, GroupDemand] = {}
        workers: dict[str, WorkerStatus] = {}
        taken = self.clock()
        for w in self.watchers:
            snap = w.snapshot()
            groups.update(snap.groups)
            workers.update(snap.workers)
            taken = min(taken, snap.taken_at)
        return QueueSnapshot(taken, groups, workers)

    def cycle(self) -> Decision:
        with self._cycle_lock:
            if not self.reconciled:
                self.reconcile()
            queue = self.snapshot()
            groups = {g.name: g for g in self.store.list_elastic_groups()}
            self._join_booted(groups)
            vms = {v.name: v for v in self.store.list_vms(states=LIVE)}
            state = self._state(queue, groups, vms)
            decision = decide(state, self.config.controller)
            self._carry_out(decision, groups, vms)
            history, clusters = advance_history(state, decision)
            if (history, clusters) != (self.history, self.cluster_history):
                save_history(self.store, history, clusters)
            self.history, self.cluster_history = history, clusters
            self._observe(decision, vms, state.now)
            self._tidal([g.spec for g in groups.values()], queue)
            self.last = decision
            return decision

    def _state(
        self, queue: QueueSnapshot, groups: Mapping[str, ElasticGroupRow], vms: Mapping[str, VmRow]
    ) -> ControlState:
        now = self.clock()
        limits = self.store.elastic_limits()
        workers = dict(queue.workers)
        for vm in vms.values():  # the agent's own count stands in for a worker not listed
            if vm.name not in workers and vm.state in (VmState.JOINED, VmState.DRAINING):
                slots = groups[vm.group].spec.slots_per_vm if vm.group in groups else 0
                group = vm.group if vm.state is VmState.JOINED else None
                workers[vm.name] = WorkerStatus(vm.name, group, vm.running_jobs, slots)
        flavors = sorted({g.spec.flavor for g in groups.values()})
        room = {
            cluster: counts
            for cluster, counts in self.replica.capacity(flavors, "cluster").items()
            if cluster in self.drivers
        }
        quiet = self._shutting_down(vms)
        return ControlState(
            now=now,
            groups=[g.spec for g in groups.values()],
            queue=QueueSnapshot(queue.taken_at, queue.groups, workers),
            vms=[
                replace(v.to_vm(), heartbeat=now) if v.name in quiet else v.to_vm()
                for v in vms.values()
            ],
            room=room,
            global_max_vms=limits.max_vms,
            global_max_cores=limits.max_cores,
            history=self.history,
            clusters=self.cluster_history,
            evict=self._evicted(vms),
        )

    def _shutting_down(self, vms: Mapping[str, VmRow]) -> set[str]:
        """Draining VMs asked to shut down: their agents go quiet on purpose (stopping the
        batch daemon can take a while), so their silence is not a lost VM; `retire` deletes
        them once the shutdown is done or its grace has passed."""
        out = set()
        for vm in vms.values():
            if vm.state is VmState.DRAINING and any(
                c.kind is CommandKind.SHUTDOWN for c in self.store.list_commands(vm=vm.name)
            ):
                out.add(vm.name)
        return out

    def _evicted(self, vms: Mapping[str, VmRow]) -> frozenset[str]:
        """Joined or draining VMs whose placement claim is gone: an on-demand request evicted
        them (their room is its now), so they drain at once and go by `evict_deadline`."""
        gone = set()
        with self.replica.lock:
            for vm in vms.values():
                if vm.state not in (VmState.JOINED, VmState.DRAINING) or vm.instance_id is None:
                    continue
                view = self.replica.clusters.get(vm.cluster or "")
                if view is None or vm.instance_id not in view.table.allocations:
                    gone.add(vm.name)
        return frozenset(gone)

    def _join_booted(self, groups: Mapping[str, ElasticGroupRow]) -> None:
        """Booting VMs whose agent reports: run the join hooks, then issue `join`."""
        booting = [v for v in self.store.list_vms(states=[VmState.BOOTING]) if v.heartbeat]
        if not booting:
            return
        open_joins = {
            c.vm
            for c in self.store.list_commands(states=COMMAND_OPEN)
            if c.kind is CommandKind.JOIN
        }
        for vm in booting:
            if vm.name in open_joins or vm.group not in groups:
                continue
            if not self.hooks.run("join", vm):
                log.info("join hooks of %s failed: held out of the pool", vm.name)
                continue
            try:
                self.store.issue_command(vm.name, CommandKind.JOIN, self.clock(), by="elastic-loop")
            except VmStateError as exc:
                log.info("join of %s: %s", vm.name, exc)

    def _carry_out(
        self, decision: Decision, groups: Mapping[str, ElasticGroupRow], vms: Mapping[str, VmRow]
    ) -> None:
        m = self.metrics
        for action in decision.actions:
            try:
                if isinstance(action, Start):
                    made = carry.start(self.out, action, groups[action.group])
                    refused = sum(1 for v in made if v.state is VmState.FAILED)
                    if m is not None:
                        m.failed_boots.labels(action.group).inc(refused)
                        m.actions.labels("start").inc(len(made))
                    continue
                elif isinstance(action, Drain):
                    self.store.issue_command(
                        action.vm, CommandKind.LEAVE, self.clock(), by="elastic-loop"
                    )
                elif isinstance(action, Retire):
                    if carry.retire(self.out, action, vms[action.vm]) is None:
                        continue  # waiting for its agent's shutdown
                elif isinstance(action, Reap):
                    if carry.reap(self.out, action, vms[action.vm]) is None:
                        continue  # it moved on since the controller saw it
                    if m is not None and action.outcome is VmState.FAILED:
                        m.failed_boots.labels(action.group).inc()
            except Exception:
                log.exception("elastic action %s failed", action)
                continue
            if m is not None:
                m.actions.labels(type(action).__name__.lower()).inc()

    def _tidal(self, specs: list[GroupSpec], queue: QueueSnapshot) -> None:
        """Power hosts on ahead of demand and empty ones off, emptying busy ones first by live
        migration when it may (`berth.service.elastic.power`, `.consolidation`)."""
        if self.power is None:
            return
        try:
            self.powered = self.power.step(specs, queue)
        except Exception:  # the pool goes on without power management this cycle
            log.exception("tidal power management failed")
            self.powered = []
            return
        if self.metrics is not None:
            for a in self.powered:
                if a.done:
                    self.metrics.power.labels("on" if a.on else "off").inc()

    def _observe(self, decision: Decision, vms: Mapping[str, VmRow], now: float) -> None:
        m = self.metrics
        last, self._last_cycle = self._last_cycle, now
        if m is None:
            return
        for report in decision.groups:
            m.idle_jobs.labels(report.group).set(report.idle_jobs)
            m.wanted.labels(report.group).set(report.wanted)
        if last is None:
            return
        for vm in vms.values():
            if vm.state is VmState.JOINED and vm.idle_since is not None:
                idle = max(0.0, min(now - last, now - vm.idle_since))
                m.idle_hours.labels(vm.group).inc(idle / 3600.0)

    # ------------------------------------------------------------------ restart
    def reconcile(self) -> dict[str, list[str]]:
        """Match the records with the clusters' servers by name (see the module's doc)."""
        servers: dict[str, tuple[str, Server]] = {}
        for cluster, driver in self.drivers.items():
            for s in driver.servers():
                if "berth_vm" in s.metadata:
                    servers[s.name] = (cluster, s)
        records = {v.name: v for v in self.store.list_vms()}
        groups = {g.name: g for g in self.store.list_elastic_groups()}
        done: dict[str, list[str]] = {"booting": [], "booted": [], "gone": [], "orphans": []}
        for vm in records.values():
            if vm.state in TERMINAL:
                continue
            found = servers.get(vm.name)
            try:
                self._reconcile_one(vm, found, groups, done)
            except Exception:
                log.exception("reconciling %s failed", vm.name)
        for name, (cluster, server) in servers.items():
            rec = records.get(name)
            if rec is None or rec.state in TERMINAL:
                self.drivers[cluster].delete(server.id)
                done["orphans"].append(name)
        for vm in records.values():  # a finished VM's claim left behind by a restart
            if vm.state in TERMINAL and vm.instance_id is not None and self._holds_claim(vm):
                carry.release_claim(self.out, vm)
                done["orphans"].append(vm.name)
        self.reconciled = True
        return done

    def _holds_claim(self, vm: VmRow) -> bool:
        with self.replica.lock:
            view = self.replica.clusters.get(vm.cluster or "")
            return view is not None and vm.instance_id in view.table.allocations

    def _reconcile_one(
        self,
        vm: VmRow,
        found: tuple[str, Server] | None,
        groups: Mapping[str, ElasticGroupRow],
        done: dict[str, list[str]],
    ) -> None:
        now = self.clock()
        if vm.state is VmState.REQUESTED:
            if found is not None:  # booted, then the restart came before it was marked
                cluster, server = found
                self.store.place_vm(vm.name, cluster=cluster, server_id=server.id)
                self.store.move_vm(vm.name, VmState.BOOTING, now, "found booted at restart")
                done["booting"].append(vm.name)
            elif vm.group in groups:
                secret = self.store.renew_vm_token(vm.name)
                carry.place_and_boot(self.out, vm, secret, groups[vm.group], tuple(self.drivers))
                done["booted"].append(vm.name)
            else:
                self.store.move_vm(vm.name, VmState.FAILED, now, "its group was removed")
            return
        if found is None and vm.server_id is not None:
            carry.release_claim(self.out, vm)
            gone = VmState.RETIRED if vm.state is VmState.DRAINING else VmState.LOST
            self.store.move_vm(vm.name, gone, now, "its server is gone")
            done["gone"].append(vm.name)
