"""The HTCondor queue watcher, through the `htcondor2` bindings (schedd, negotiator, collector).

Jobs belong to the group whose accounting group they carry (`AcctGroup`, and the selector's
extra `requirements` if any). An idle job is demand only within its group's batch quota: the
negotiator's `ConfigQuota` (cores) minus the cores the group runs now; the idle jobs beyond it,
and held jobs (JobStatus 5), are `held_jobs`. A group without a configured quota has no limit.
Workers are the startds Berth started (`BerthVm` in their slot ads, `BerthGroup` the accounting
group they serve). A worker stopped by Berth withdraws its ads (berth.elastic.workers.htcondor);
one whose startd died without a word keeps them in the collector until its housekeeping drops
them (minutes), so slot ads the collector has not heard from for `stale_after` seconds (several
of the workers' 2 s update intervals) count as gone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from berth.elastic.model import (
    DRAIN_GROUP,
    GroupDemand,
    QueueSelector,
    QueueSnapshot,
    WorkerStatus,
)

IDLE, RUNNING, HELD = 1, 2, 5
JOB_ATTRS = ["JobStatus", "RequestCpus", "AcctGroup"]
SLOT_ATTRS = ["BerthVm", "BerthGroup", "State", "Cpus", "SlotType", "ChildState", "LastHeardFrom"]
STALE_AFTER = 20.0  # seconds without an update after which a worker's slot ad counts as gone


def bindings() -> Any:
    """`htcondor2`, imported on first use (and told not to look for a local condor_config)."""
    unset = "CONDOR_CONFIG" not in os.environ
    if unset:  # only while importing: child processes keep finding their own configuration
        os.environ["CONDOR_CONFIG"] = "/dev/null"
    try:
        import htcondor2
    finally:
        if unset:
            os.environ.pop("CONDOR_CONFIG", None)
    return htcondor2


def group_demand(
    group: str, jobs: list[Mapping[str, Any]], quota_cores: float | None
) -> GroupDemand:
    """Count one group's jobs; idle ones beyond `quota_cores` minus running cores are held."""
    running = [j for j in jobs if j.get("JobStatus") == RUNNING]
    idle = [j for j in jobs if j.get("JobStatus") == IDLE]
    held = sum(1 for j in jobs if j.get("JobStatus") == HELD)
    if quota_cores is None:
        return GroupDemand(group, len(idle), len(running), held)
    room = quota_cores - sum(_cpus(j) for j in running)
    startable = 0
    for job in idle:
        if _cpus(job) > room + 1e-9:
            break
        room -= _cpus(job)
        startable += 1
    return GroupDemand(group, startable, len(running), held + len(idle) - startable)


def config_quotas(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Accounting group -> configured quota (cores), from the negotiator's priority records;
    groups without a quota (0, and the `<none>` group) are left out."""
    found: dict[str, float] = {}
    for rec in records:
        if rec.get("IsAccountingGroup") and (rec.get("ConfigQuota") or 0) > 0:
            found[str(rec["Name"])] = float(rec["ConfigQuota"])
    return found


def claims(slot: Mapping[str, Any]) -> int:
    """Jobs a static or partitionable slot runs: a partitionable slot's `ChildState` lists its
    dynamic slots' states, refreshed with every update of its own ad (a dynamic slot's ad may
    outlive it in the collector when its invalidation is lost)."""
    if slot.get("SlotType") == "Partitionable":
        children = slot.get("ChildState") or []
        return sum(1 for state in children if state == "Claimed")
    return 1 if slot.get("State") == "Claimed" else 0


def fresh_slots(
    slots: list[dict[str, Any]], now: float, stale_after: float
) -> list[dict[str, Any]]:
    """The slot ads the collector heard from within `stale_after` seconds of `now`."""
    return [s for s in slots if now - float(s.get("LastHeardFrom", now)) <= stale_after]


def _cpus(ad: Mapping[str, Any]) -> float:
    value = ad.get("RequestCpus", 1)
    return float(value) if isinstance(value, int | float) else 1.0


class HTCondorWatcher:
    """`QueueWatcher` over one pool, reached through its collector (`host:port`)."""

    def __init__(
        self,
        collector: str,
        groups: Mapping[str, QueueSelector],
        *,
        stale_after: float = STALE_AFTER,
    ) -> None:
        for name, sel in groups.items():
            if not sel.accounting_group:
                raise ValueError(f"groups.{name}.accounting_group: required for HTCondor")
        self.collector = collector
        self.groups = dict(groups)
        self.stale_after = stale_after
        self._htcondor = bindings()

    def snapshot(self) -> QueueSnapshot:
        htc = self._htcondor
        coll = htc.Collector(self.collector)
        schedds = coll.query(htc.AdTypes.Schedd)
        quotas = self._quotas(coll)
        demand = {}
        for name, sel in self.groups.items():
            constraint = f'AcctGroup == "{sel.accounting_group}"'
            if sel.requirements:
                constraint = f"{constraint} && ({sel.requirements})"
            jobs: list[Mapping[str, Any]] = []
            for ad in schedds:
                jobs += [dict(j) for j in htc.Schedd(ad).query(constraint, projection=JOB_ATTRS)]
            quota = quotas.get(str(sel.accounting_group))
            demand[name] = group_demand(name, jobs, quota)
        slots = coll.query(htc.AdTypes.Startd, "BerthVm isnt undefined", projection=SLOT_ATTRS)
        now = time.time()
        fresh = fresh_slots([dict(s) for s in slots], now, self.stale_after)
        return QueueSnapshot(now, demand, self._workers(fresh))

    def _quotas(self, coll: Any) -> dict[str, float]:
        htc = self._htcondor
        ad = coll.locate(htc.DaemonType.Negotiator)
        return config_quotas(htc.Negotiator(ad).getPriorities(True))

    def _workers(self, slots: list[dict[str, Any]]) -> dict[str, WorkerStatus]:
        by_batch = {sel.accounting_group: name for name, sel in self.groups.items()}
        found: dict[str, WorkerStatus] = {}
        for slot in slots:
            vm = str(slot["BerthVm"])
            served = str(slot.get("BerthGroup", DRAIN_GROUP))
            group = DRAIN_GROUP if served == DRAIN_GROUP else by_batch.get(served, served)
            if slot.get("SlotType") == "Dynamic":
                continue  # counted through its partitionable slot's ChildState
            old = found.get(vm, WorkerStatus(vm, group, 0, 0))
            found[vm] = WorkerStatus(vm, group, old.running_jobs + claims(slot), old.slots + 1)
        return found
