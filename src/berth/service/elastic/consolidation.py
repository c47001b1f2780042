"""Consolidation for tidal power management: the busy hosts the tidal plan wants off are emptied
by live migrations, carried out by Berth's defrag machinery (docs/elastic.md, "Tidal power
management"), and then powered off by the ordinary power-off path once empty.

Per cluster, at most one consolidation at a time, and all of its state is in the store:

* **plan**: `tidal.consolidate` plans on a copy of the cluster's table (objective empty-hosts,
  the chosen hosts as `drain`, at most `max_migrations` moves, `max_concurrent` a wave) and the
  plan is stored as a defrag plan made by `tidal` (`DefragService.store_plan`);
* **hold**: each host it empties is marked in the host power table (power on, changed by
  `tidal-emptying`) and flagged draining in Berth (no placement lands there, no migration
  targets it); an elastic VM on it gets a server record (adopted), which defrag execution needs
  to ask the cloud to move it and to remember it asked;
* **run**: the plan is executed (`DefragService.execute`) and advanced by the defrag driver;
  each step claims its target, `DefragExecutor` (run by the cluster's change feed) asks the
  cloud for the live migration, and the step is confirmed when the server is seen active on its
  target — the feed sees the servers Berth booted or adopted; the elastic VMs' servers, which the
  feed leaves to the elastic loop, are shown to the executor here each cycle.

A restart finds the open plan (planned, running or paused) and the marks, and goes on with them:
nothing is planned twice, and defrag execution never asks the cloud twice for one step. The
marks are let go — the draining flag cleared, the power row back to `tidal` — when the forecast
needs the hosts again (`TidalPlan.release`), when their plan ended and the host was not powered
off, or when the plan cannot run (another plan runs in the cluster). A plan whose hosts are all
let go is paused and, once no migration is in flight, cancelled: nothing is lost, every instance
is on its source or its target.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from berth.cloud.driver import CloudDriver, CloudError, ServerState
from berth.elastic.tidal import TidalConfig, TidalPlan, consolidate
from berth.service.clouds.claiming import Claim, check_fits, claim_on
from berth.service.clouds.defrag_exec import DefragExecutor
from berth.service.clouds.errors import ClaimRefusedError
from berth.service.clouds.reconcile import ELASTIC_SERVER
from berth.service.defrag import DefragService
from berth.service.elastic.metrics import ElasticMetrics
from berth.service.replica import Replica
from berth.store.defrag import FINAL_STEPS, PlanRow, PlanStateError, StepRow
from berth.store.elastic_rows import HostPowerRow, VmRow, VmStateError
from berth.store.errors import NotFoundError

log = logging.getLogger("berth.elastic")
CREATED_BY = "tidal"  # the defrag plans consolidation makes
EMPTYING = "tidal-emptying"  # host_power.changed_by of a host a consolidation is emptying
RELEASED = "tidal"  # ... and once it is let go (the same as a tidal power transition)
OPEN = ("planned", "running", "paused")
SEP = "/"


@dataclass(frozen=True)
class StepNews:
    """A consolidation step seen moving on (migrating, done, or failed with why)."""

    plan_id: str
    step: int
    instance_id: str
    source: str
    target: str
    state: str
    reason: str | None


def held(powered: Mapping[str, HostPowerRow]) -> set[str]:
    """The hosts being emptied, from the host power table."""
    return {h for h, r in powered.items() if r.power == "on" and r.changed_by == EMPTYING}


class Consolidator:
    def __init__(
        self,
        replica: Replica,
        executor: DefragExecutor,
        drivers: Mapping[str, CloudDriver],
        config: TidalConfig,
        clock: Callable[[], float],
        metrics: ElasticMetrics | None = None,
    ) -> None:
        self.replica = replica
        self.store = replica.store
        self.executor = executor
        self.defrag: DefragService = executor.defrag
        self.drivers = drivers
        self.config = config
        self.clock = clock
        self.metrics = metrics
        self.next_try: dict[str, float] = {}  # cluster -> when to look for a plan again
        self.news: list[StepNews] = []  # the last cycle's step news
        self._seen: dict[tuple[str, int], tuple[str, int]] | None = None  # (state, replans)
        self._watching: set[str] = set()  # plans whose steps it follows
        self.recheck: set[str] = set()  # elastic VMs whose step was aborted: where do they run?

    # ------------------------------------------------------------------ reading
    def open_plans(self) -> dict[str, PlanRow]:
        """Consolidation plans still open, by cluster."""
        return {
            p.cluster: p
            for p in self.defrag.store.list_plans(states=OPEN)
            if p.created_by == CREATED_BY and p.cluster in self.drivers
        }

    # ------------------------------------------------------------------ one cycle
    def step(
        self,
        plan: TidalPlan,
        opened: Mapping[str, PlanRow],
        powered: Mapping[str, HostPowerRow],
    ) -> list[StepNews]:
        """After the power transitions: let go of the hosts no longer to empty, keep the open
        plans going, start a plan where none is open. `opened` are the plans open when the
        cycle began (a plan that ended since is let go next cycle, once its hosts had their
        chance to power off); `powered` the host power rows as they are now (a host powered
        off this cycle is no longer held)."""
        holding = held(powered)
        in_open = {h for p in opened.values() for h in p.target.get("drain", ())}
        for h in sorted(holding):
            if plan.release:
                self._let_go(h, powered[h], "the forecast needs it again")
            elif h not in in_open:
                self._let_go(h, powered[h], "its consolidation ended; it stays on")
            else:
                continue
            holding.discard(h)
        for cluster, p in sorted(self.open_plans().items()):
            try:
                self._keep_going(p, holding)
            except Exception:  # one cluster's trouble does not stop the others
                log.exception("consolidation %s in %s", p.id, cluster)
        self._observe_elastic()
        if not plan.release:
            self._start_new(plan)
        if any(p.state == "running" for p in self.open_plans().values()):
            self.defrag.tick()  # the defrag driver does it too; now, so a step starts this cycle
        self.news = self._news()
        return self.news

    # ------------------------------------------------------------------ holding
    def _let_go(self, host: str, row: HostPowerRow, why: str) -> None:
        """The host takes placements again (draining cleared, power row back to `tidal`)."""
        if host in self.replica.draining:
            self.defrag.drain(host, False)
        self.store.set_host_power(host, "on", row.since, reason=why, by=RELEASED)
        log.info("consolidation lets go of %s: %s", host, why)

    def _hold(self, host: str, plan_id: str, since: float) -> None:
        """Mark the host as being emptied (first, so a restart knows), then drain it."""
        self.store.set_host_power(
            host, "on", since, reason=f"emptying: plan {plan_id}", by=EMPTYING
        )
        if host not in self.replica.draining:
            self.defrag.drain(host, True)

    # ------------------------------------------------------------------ plans
    def _keep_going(self, p: PlanRow, holding: set[str]) -> None:
        mine = [h for h in p.target.get("drain", ()) if h in holding]
        if not mine:  # every host let go (or powered off): stop moving, cancel once idle
            if all(s.state in FINAL_STEPS for s in self.defrag.store.steps(p.id)):
                return  # all moved: the defrag driver marks it done
            with contextlib.suppress(PlanStateError):
                if p.state == "running":
                    p = self.defrag.pause(p.id)
                if not any(s.state == "migrating" for s in self.defrag.store.steps(p.id)):
                    self.defrag.cancel(p.id, "its hosts are needed again")
                    log.info("consolidation %s in %s cancelled", p.id, p.cluster)
            return
        for h in mine:  # a restart between the mark and the drain
            if h not in self.replica.draining:
                self.defrag.drain(h, True)
        self._adopt_elastic(p.cluster, self.defrag.store.steps(p.id))
        if p.state == "planned":
            try:
                self.defrag.execute(p.id, auto_confirm=False)
                log.info("consolidation %s in %s runs: empties %s", p.id, p.cluster, mine)
            except PlanStateError as exc:  # another plan runs in the cluster
                self.defrag.cancel(p.id, str(exc))
                for h in mine:
                    self._let_go(h, self._row(h), f"plan {p.id} could not run: {exc}")

    def _start_new(self, plan: TidalPlan) -> None:
        by_cluster: dict[str, list[str]] = {}
        for key in plan.empty:
            cluster, _, host = key.partition(SEP)
            by_cluster.setdefault(cluster, []).append(host)
        now = self.clock()
        # a running or paused plan (anyone's) holds the cluster; so does an open one of ours
        busy = {p.cluster for p in self.defrag.store.list_plans(states=("running", "paused"))}
        busy |= set(self.open_plans())
        for cluster, hosts in sorted(by_cluster.items()):
            if cluster in busy or cluster not in self.drivers:
                continue
            if now < self.next_try.get(cluster, 0.0):
                continue
            try:
                made = self._plan(cluster, hosts)
            except Exception:
                log.exception("consolidation planning in %s failed", cluster)
                made = None
            if made is None:
                self.next_try[cluster] = now + self.config.min_dwell
                continue
            drain = list(made.target["drain"])
            for h in drain:
                self._hold(h, made.id, self._row(h).since)
            self._adopt_elastic(cluster, self.defrag.store.steps(made.id))
            moves = len(self.defrag.store.steps(made.id))
            log.info(
                "consolidation %s in %s: %d live migrations empty %s",
                made.id,
                cluster,
                moves,
                drain,
            )
            with contextlib.suppress(PlanStateError):
                self._keep_going(made, set(drain))

    def _plan(self, cluster: str, hosts: Sequence[str]) -> PlanRow | None:
        r = self.replica
        r.sync()
        with r.lock:
            view = r.clusters.get(cluster)
            if view is None:
                return None
            table = view.table.copy()
            keep = tuple(sorted(set(view.pools.values())))
            now = r.clock()
        planned = consolidate(
            table,
            hosts,
            self.defrag.scheduler,
            now=now,
            max_migrations=self.config.max_migrations,
            max_concurrent=self.config.max_concurrent,
            keep_traits=keep,
        )
        if planned is None:
            log.info("consolidation in %s: no plan empties any of %s", cluster, list(hosts))
            return None
        return self.defrag.store_plan(cluster, planned, table.device_types, CREATED_BY)

    def _row(self, host: str) -> HostPowerRow:
        rows = {r.host: r for r in self.store.host_power_states()}
        return rows.get(host, HostPowerRow(host, "on", 0.0))

    # ------------------------------------------------------------------ elastic VMs
    def _adopt_elastic(self, cluster: str, steps: Sequence[StepRow]) -> None:
        """Give the elastic VMs a plan moves a server record (defrag execution asks the cloud
        through it and marks it migrating, so it never asks twice)."""
        open_ids = {s.instance_id for s in steps if s.state not in FINAL_STEPS}
        if not open_ids:
            return
        flavors = {s.instance_id: s.flavor for s in steps}
        for vm in self.store.list_vms():
            iid = vm.instance_id
            if iid not in open_ids or vm.server_id is None or vm.host is None:
                continue
            if self.store.find_server(iid) is None:
                self.store.adopt_server(iid, cluster, vm.server_id, vm.host, flavors[iid], "active")

    def _observe_elastic(self) -> None:
        """Show the executor the elastic VMs' servers whose step is in flight (the change feed
        leaves those servers to the elastic loop): it confirms or aborts the step. A VM whose
        step was aborted while the cloud went on moving it (a cancel, a timeout) has its claim
        moved to where its server runs, as the feed does for the servers it follows."""
        flying = {s.instance_id: s for s in self.defrag.store.migrating_steps()}
        if not flying and not self.recheck:
            return
        watched = set(flying) | self.recheck
        vms = {v.name: v for v in self.store.list_vms() if v.instance_id in watched}
        for cluster, driver in self.drivers.items():
            try:
                servers = driver.servers()
            except CloudError as exc:
                log.warning("cluster %s: servers: %s", cluster, exc)
                continue
            for server in servers:
                vm = vms.get(server.metadata.get(ELASTIC_SERVER, ""))
                if vm is None or vm.instance_id is None:
                    continue
                iid = vm.instance_id
                if iid in flying:
                    self.executor.observe(server, iid, self.store.find_server(iid))
                elif server.state is ServerState.ACTIVE and server.host is not None:
                    self.recheck.discard(iid)
                    self._follow(vm.name, iid, server.host)

    def _follow(self, vm: str, iid: str, host: str) -> None:
        try:
            inst = self.store.get_instance(iid)
        except NotFoundError:
            return
        if inst.host == host:
            return
        claim = Claim.of(inst)
        try:
            check_fits(self.replica, claim, host, check_set=False)
            self.replica.release(iid)
            claim_on(self.replica, claim, host, check_set=False)
        except (ClaimRefusedError, NotFoundError) as exc:
            log.warning("elastic VM %s runs on %s: its claim cannot follow: %s", vm, host, exc)
            return
        self.store.set_server(iid, state="active", host=host)
        with contextlib.suppress(VmStateError):
            self.store.place_vm(vm, host=host)
        log.info("elastic VM %s moved to %s after its step ended: its claim follows", vm, host)

    # ------------------------------------------------------------------ news
    def _news(self) -> list[StepNews]:
        """Steps of the consolidation plans that moved on since the last look: logged, counted,
        and an elastic VM that moved gets its new host on its record. The plans open when this
        process first looks are taken as they are (the process before told their past)."""
        first = self._seen is None
        seen = self._seen if self._seen is not None else {}
        self._watching |= {p.id for p in self.open_plans().values()}
        out: list[StepNews] = []
        for plan_id in sorted(self._watching):
            p = self.defrag.store.get_plan(plan_id)
            steps = self.defrag.store.steps(plan_id)
            for s in steps:
                before = seen.get((plan_id, s.step))
                now = (s.state, s.replans)
                if before == now:
                    continue
                seen[(plan_id, s.step)] = now
                if first:
                    continue
                told = []
                if before is not None and before[0] == "migrating" and s.replans > before[1]:
                    told.append("replanned")  # its migration failed; it got a new target
                if s.state in ("migrating", *FINAL_STEPS):
                    told.append(s.state)
                for state in told:
                    news = StepNews(
                        plan_id, s.step, s.instance_id, s.source, s.target, state, s.reason
                    )
                    out.append(news)
                    self._tell(news)
            if p.state not in OPEN:
                self._watching.discard(plan_id)
                for s in steps:
                    seen.pop((plan_id, s.step), None)
        self._seen = seen
        return out

    def _tell(self, n: StepNews) -> None:
        if n.state == "migrating":
            log.info(
                "consolidation %s step %d: %s %s -> %s",
                n.plan_id,
                n.step,
                n.instance_id,
                n.source,
                n.target,
            )
            return
        outcome = {"done": "done", "aborted": "failed", "replanned": "failed"}.get(
            n.state, "skipped"
        )
        if self.metrics is not None:
            self.metrics.consolidation.labels(outcome).inc()
        if outcome == "done":
            log.info(
                "consolidation %s step %d done: %s on %s",
                n.plan_id,
                n.step,
                n.instance_id,
                n.target,
            )
            self._moved_vm(n)
        else:
            if n.state != "skipped" and self._vm_of(n.instance_id) is not None:
                self.recheck.add(n.instance_id)  # where does the cloud run it now?
            log.warning(
                "consolidation %s step %d %s: %s (%s)",
                n.plan_id,
                n.step,
                n.state,
                n.instance_id,
                n.reason,
            )

    def _moved_vm(self, n: StepNews) -> None:
        vm = self._vm_of(n.instance_id)
        if vm is not None:
            with contextlib.suppress(VmStateError):
                self.store.place_vm(vm.name, host=n.target)

    def _vm_of(self, instance_id: str) -> VmRow | None:
        """The elastic VM whose claim is `instance_id`, if any."""
        return next((v for v in self.store.list_vms() if v.instance_id == instance_id), None)
