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

A cloud that cannot power hosts (`CloudErrorKind.UNSUPPORTED`) is logged once per host and
skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from berth.cloud.driver import CloudDriver, CloudError, HostPower, ServerState
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
    ) -> None:
        self.replica = replica
        self.store: Store = replica.store
        self.drivers = drivers
        self.config = config
        self.clock = clock
        self.last: TidalPlan | None = None

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
        views = self._hosts(powered)
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
        return done

    def _hosts(self, powered: Mapping[str, HostPowerRow]) -> list[HostView]:
        """Hosts the planner may move: enabled ones (on), and the ones tidal powered off."""
        out: list[HostView] = []
        power = {h: HostPower(r.power) for h, r in powered.items()}
        since = {h: r.since for h, r in powered.items()}
        with self.replica.lock:
            for cluster in sorted(self.drivers):
                view = self.replica.clusters.get(cluster)
                if view is None:
                    continue
                table = view.table
                for i, v in enumerate(host_views(table, power, since)):
                    off_by_tidal = v.power is HostPower.OFF
                    if not bool(table.enabled[i]) and not off_by_tidal:
                        continue  # an operator's disabled host: not the planner's
                    out.append(
                        HostView(
                            f"{cluster}{SEP}{v.name}",
                            v.cores,
                            v.used_cores,
                            v.instances,
                            v.power,
                            v.since,
                        )
                    )
        return out

    # ------------------------------------------------------------------ transitions
    def _off(self, cluster: str, host: str, action: PowerAction) -> Applied:
        driver = self.drivers[cluster]
        self.store.set_host_enabled(host, False)  # first: no placement picks it any more
        self.replica.sync()
        busy = self._busy(cluster, host, driver)
        if busy is not None:
            self.store.set_host_enabled(host, True)
            self.replica.sync()
            return Applied(cluster, host, False, False, busy)
        try:
            driver.set_host_power(host, False)
        except CloudError as exc:
            self.store.set_host_enabled(host, True)
            self.replica.sync()
            return Applied(cluster, host, False, False, str(exc))
        self.store.set_host_power(host, "off", self.clock(), reason=action.reason, by=BY)
        log.info("powered off %s/%s: %s", cluster, host, action.reason)
        return Applied(cluster, host, False, True, action.reason)

    def _on(self, cluster: str, host: str, action: PowerAction) -> Applied:
        driver = self.drivers[cluster]
        try:
            driver.set_host_power(host, True)
        except CloudError as exc:
            return Applied(cluster, host, True, False, str(exc))
        self.store.set_host_power(host, "on", self.clock(), reason=action.reason, by=BY)
        self.store.set_host_enabled(host, True)
        self.replica.sync()
        log.info("powered on %s/%s: %s", cluster, host, action.reason)
        return Applied(cluster, host, True, True, action.reason)

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
