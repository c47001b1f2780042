"""Tidal power management carried out: the pure planner's decisions (`berth.elastic.tidal`)
applied through the clusters' cloud drivers, each recorded in the store's host power table.

Every cycle the loop samples the demand — the cores in use on the driven clusters' hosts
(elastic VMs and everything else Berth placed there) plus, per group, the cores its idle jobs
would take (`cores_per_vm / slots_per_vm` each) — and keeps the samples in the store (the
forecast reads the same window on previous days, so a restart keeps the daily pattern). Then,
over the enabled and the tidal-powered-off hosts of every driven cluster, `plan_power` says which
to power on ahead of the forecast and which empty ones to power off.

* **Off**, in this order: the host is disabled in Berth (no placement picks it any more), the
  replica re-reads the log, and the host must still hold no claim in Berth's table *and* no
  server in the cloud (`CloudDriver.servers()`); only then `set_host_power(host, False)`; the
  store records it (`host_power`, by `tidal`). Any check that fails, or a driver that refuses,
  enables the host again and records nothing. A host with a running VM is never powered off.
* **On**: `set_host_power(host, True)`, the store records it, and the host is enabled again in
  Berth. A host an operator disabled (not by tidal) is left alone both ways.

Hosts it may not power off are not even named: the planner sees, besides Berth's claims, the
servers the cloud runs on each host, and a host running a server Berth does not hold (booted
behind its back) is `pinned` — kept on, never emptied — so it is not disabled and enabled again
every cycle. A host whose power-off was refused anyway (a server appeared between the listing
and the check, the cloud said no) is pinned for `refused_wait` seconds; a cloud that cannot
power hosts (`CloudErrorKind.UNSUPPORTED`) is logged once per host and its hosts left alone.

With a `Consolidator` (`berth.service.elastic.consolidation`) the busy hosts the plan wants
emptied are emptied by live migrations, then powered off here once empty.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from berth.cloud.driver import CloudDriver, CloudError, CloudErrorKind, HostPower, ServerState
from berth.elastic.model import GroupSpec, QueueSnapshot
from berth.elastic.tidal import (
    DAY,
    HostView,
    PowerAction,
    TidalConfig,
    TidalPlan,
    host_views,
    plan_power,
)
from berth.service.elastic.consolidation import Consolidator, held
from berth.service.replica import Replica
from berth.store.elastic_rows import HostPowerRow
from berth.store.repo import Store

log = logging.getLogger("berth.elastic")
BY = "tidal"
SEP = "/"  # a host's key in the plan: cluster/host


@dataclass(frozen=True)
class Applied:
    """One power transition carried out (or refused, with why)."""

    cluster: str
    host: str
    on: bool
    done: bool
    reason: str


class PowerManager:
    def __init__(
        self,
        replica: Replica,
        drivers: Mapping[str, CloudDriver],
        config: TidalConfig,
        clock: Callable[[], float],
        consolidator: Consolidator | None = None,
    ) -> None:
        self.replica = replica
        self.store: Store = replica.store
        self.drivers = drivers
        self.config = config
        self.clock = clock
        self.consolidator = consolidator
        self.last: TidalPlan | None = None
        self.refused: dict[str, float] = {}  # cluster/host -> until when it is left alone

    # ------------------------------------------------------------------ demand
    def demand(self, groups: Sequence[GroupSpec], queue: QueueSnapshot) -> float:
        """Cores in use on the driven clusters' hosts, plus the cores the idle jobs want."""
        used = 0.0
        with self.replica.lock:
            for cluster in self.drivers:
                view = self.replica.clusters.get(cluster)
                if view is not None:
                    used += sum(v.used_cores for v in host_views(view.table, {}, {}))
        wanted = 0.0
        for g in groups:
            d = queue.groups.get(g.name)
            if d is not None and d.idle_jobs > 0:
                wanted += d.idle_jobs * g.cores_per_vm / g.slots_per_vm
        return used + wanted

    # ------------------------------------------------------------------ one step
    def step(self, groups: Sequence[GroupSpec], queue: QueueSnapshot) -> list[Applied]:
        now = self.clock()
        current = self.demand(groups, queue)
        keep = now - (self.config.days + 1) * DAY
        self.store.record_demand(now, current, keep_since=keep)
        samples = self.store.demand_samples(keep)
        powered = {r.host: r for r in self.store.host_power_states()}
        c = self.consolidator
        opened = {} if c is None else c.open_plans()  # before anything moves this cycle
        views = self._hosts(powered, held(powered) if c is not None else set(), now)
        plan = plan_power(views, samples, now, current, self.config)
        self.last = plan
        done = []
        for action in plan.actions:
            cluster, _, host = action.host.partition(SEP)
            try:
                if action.on:
                    done.append(self._on(cluster, host, action))
                else:
                    done.append(self._off(cluster, host, action))
            except Exception as exc:  # one host's failure does not stop the others
                log.exception("power %s of %s failed", "on" if action.on else "off", host)
                done.append(Applied(cluster, host, action.on, False, str(exc)))
        if c is not None:
            fresh = {r.host: r for r in self.store.host_power_states()}
            c.step(plan, opened, fresh)
        return done

    def _hosts(
        self, powered: Mapping[str, HostPowerRow], emptying: set[str], now: float
    ) -> list[HostView]:
        """Hosts the planner may move: enabled ones (on), the ones a consolidation is emptying
        (draining: disabled in the table) and the ones tidal powered off."""
        out: list[HostView] = []
        power = {h: HostPower(r.power) for h, r in powered.items()}
        since = {h: r.since for h, r in powered.items()}
        for cluster in sorted(self.drivers):
            servers = self._cloud_counts(cluster)
            with self.replica.lock:
                view = self.replica.clusters.get(cluster)
                if view is None:
                    continue
                table = view.table
                views = host_views(table, power, since)
                enabled = table.enabled.tolist()
            for i, v in enumerate(views):
                off_by_tidal = v.power is HostPower.OFF
                if not enabled[i] and not off_by_tidal and v.name not in emptying:
                    continue  # an operator's disabled (or drained) host: not the planner's
                key = f"{cluster}{SEP}{v.name}"
                in_cloud = servers.get(v.name, 0) if servers is not None else 0
                pinned = (
                    servers is None  # the cloud did not say what runs where: nothing goes off
                    or in_cloud > v.instances  # runs servers Berth does not hold
                    or self.refused.get(key, 0.0) > now
                )
                out.append(
                    HostView(
                        key,
                        v.cores,
                        v.used_cores,
                        max(v.instances, in_cloud),
                        v.power,
                        v.since,
                        pinned=pinned and v.power is HostPower.ON,
                        emptying=v.name in emptying,
                    )
                )
        return out

    def _cloud_counts(self, cluster: str) -> dict[str, int] | None:
        """Servers the cloud runs per host (any state but deleted); None if it did not answer."""
        try:
            servers = self.drivers[cluster].servers()
        except CloudError as exc:
            log.warning("cluster %s: servers: %s; no host of it goes off this cycle", cluster, exc)
            return None
        out: dict[str, int] = {}
        for s in servers:
            if s.host is not None and s.state is not ServerState.DELETED:
                out[s.host] = out.get(s.host, 0) + 1
        return out

    def _refused(self, cluster: str, host: str, why: str, unsupported: bool = False) -> None:
        """Leave the host alone for `refused_wait` (for good when the cloud cannot power it)."""
        key = f"{cluster}{SEP}{host}"
        if unsupported:
            if key not in self.refused:
                log.warning("%s/%s cannot be powered off here: %s", cluster, host, why)
            self.refused[key] = float("inf")
            return
        self.refused[key] = self.clock() + self.config.refused_wait
        log.info("power-off of %s/%s refused: %s", cluster, host, why)

    # ------------------------------------------------------------------ transitions
    def _off(self, cluster: str, host: str, action: PowerAction) -> Applied:
        driver = self.drivers[cluster]
        self.store.set_host_enabled(host, False)  # first: no placement picks it any more
        self.replica.sync()
        busy = self._busy(cluster, host, driver)
        if busy is not None:
            self.store.set_host_enabled(host, True)
            self.replica.sync()
            self._refused(cluster, host, busy)
            return Applied(cluster, host, False, False, busy)
        try:
            driver.set_host_power(host, False)
        except CloudError as exc:
            self.store.set_host_enabled(host, True)
            self.replica.sync()
            self._refused(cluster, host, str(exc), exc.kind is CloudErrorKind.UNSUPPORTED)
            return Applied(cluster, host, False, False, str(exc))
        self.store.set_host_power(host, "off", self.clock(), reason=action.reason, by=BY)
        self._undrain(host)  # a host a consolidation emptied: disabled now, no longer draining
        log.info("powered off %s/%s: %s", cluster, host, action.reason)
        return Applied(cluster, host, False, True, action.reason)

    def _on(self, cluster: str, host: str, action: PowerAction) -> Applied:
        driver = self.drivers[cluster]
        try:
            driver.set_host_power(host, True)
        except CloudError as exc:
            return Applied(cluster, host, True, False, str(exc))
        self.store.set_host_power(host, "on", self.clock(), reason=action.reason, by=BY)
        self._undrain(host)  # left draining by a restart between power-off and its undrain
        self.store.set_host_enabled(host, True)
        self.replica.sync()
        log.info("powered on %s/%s: %s", cluster, host, action.reason)
        return Applied(cluster, host, True, True, action.reason)

    def _undrain(self, host: str) -> None:
        if self.consolidator is not None and host in self.replica.draining:
            self.consolidator.defrag.drain(host, False)

    def _busy(self, cluster: str, host: str, driver: CloudDriver) -> str | None:
        """Why `host` must stay on (a claim in Berth's table or a server in the cloud)."""
        with self.replica.lock:
            view = self.replica.clusters.get(cluster)
            if view is not None and host in view.table.index:
                row = view.table.index[host]
                if int(view.table.n_instances[row]) > 0:
                    return f"{host} holds {int(view.table.n_instances[row])} instances"
        servers = [
            s.name
            for s in driver.servers()
            if s.host == host and s.state is not ServerState.DELETED
        ]
        if servers:
            return f"{host} runs servers {', '.join(sorted(servers))}"
        return None
