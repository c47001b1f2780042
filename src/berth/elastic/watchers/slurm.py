"""The Slurm queue watcher, through `squeue --json` and `sinfo --json`.

A job belongs to the group whose selector it matches (partition and/or account). A pending job
is demand unless its pending reason says a slot would not start it: held, waiting on a
dependency or a begin time, or kept back by an account (association) or QOS limit — the
group's own batch quota (`not_demand`). Workers are the nodes that carry a VM: a node whose
`comment` names its VM (a worker slot) or a dynamic node (named after its VM); a drained node
serves the drain group; a node that stopped answering (NOT_RESPONDING, DOWN) is no worker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from berth.elastic.model import (
    DRAIN_GROUP,
    GroupDemand,
    QueueSelector,
    QueueSnapshot,
    WorkerStatus,
)
from berth.elastic.procs import run

# Pending reasons (squeue's `state_reason`, Slurm's job_reason strings) that a new node would
# not cure. Every association and QOS limit starts with "Assoc" or "QOS" (AssocGrpCpuLimit,
# AssocMaxJobsLimit, QOSGrpNodeLimit, ...).
NOT_DEMAND_REASONS = frozenset(
    {
        "JobHeldUser",
        "JobHeldAdmin",
        "Dependency",
        "DependencyNeverSatisfied",
        "BeginTime",
        "AccountNotAllowed",
        "InvalidAccount",
        "InvalidQOS",
        "QOSNotAllowed",
        "PartitionDown",
        "PartitionInactive",
        "PartitionTimeLimit",
        "JobLaunchFailure",
        "BadConstraints",
    }
)
LIMIT_PREFIXES = ("Assoc", "QOS", "MaxJobsPer", "MaxSubmitJobsPer")
GONE_FLAGS = frozenset({"NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN"})
DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED"})


def not_demand(reason: str) -> bool:
    return reason in NOT_DEMAND_REASONS or reason.startswith(LIMIT_PREFIXES)


def matches(job: Mapping[str, Any], sel: QueueSelector) -> bool:
    if sel.partition and sel.partition not in str(job.get("partition", "")).split(","):
        return False
    return not (sel.account and sel.account != job.get("account"))


def count_jobs(group: str, jobs: list[Mapping[str, Any]]) -> GroupDemand:
    idle = running = held = 0
    for job in jobs:
        state = job.get("job_state")
        if state in ("RUNNING", "COMPLETING", "CONFIGURING"):
            running += 1
        elif state == "PENDING":
            if not_demand(str(job.get("state_reason", ""))):
                held += 1
            else:
                idle += 1
    return GroupDemand(group, idle, running, held)


class SlurmWatcher:
    """`QueueWatcher` over one cluster; `env` carries SLURM_CONF when it is not the default."""

    def __init__(
        self, groups: Mapping[str, QueueSelector], env: Mapping[str, str] | None = None
    ) -> None:
        for name, sel in groups.items():
            if not (sel.partition or sel.account):
                raise ValueError(f"groups.{name}: a Slurm group needs a partition or an account")
        self.groups = dict(groups)
        self.env = dict(env or {})

    def _json(self, cmd: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(run([cmd, "--json"], env=self.env))
        return data

    def snapshot(self) -> QueueSnapshot:
        jobs = self._json("squeue").get("jobs", [])
        nodes = self._json("sinfo").get("nodes", [])
        demand = {
            name: count_jobs(name, [j for j in jobs if matches(j, sel)])
            for name, sel in self.groups.items()
        }
        return QueueSnapshot(time.time(), demand, self._workers(nodes, jobs))

    def _workers(
        self, nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]
    ) -> dict[str, WorkerStatus]:
        by_partition = {sel.partition: name for name, sel in self.groups.items() if sel.partition}
        running: dict[str, int] = {}
        for job in jobs:
            if job.get("job_state") in ("RUNNING", "COMPLETING", "CONFIGURING"):
                for name in str(job.get("nodes", "")).split(","):
                    running[name] = running.get(name, 0) + 1
        found: dict[str, WorkerStatus] = {}
        for node in nodes:
            flags = set(node.get("state_flags", []))
            vm = node.get("comment") or (node["name"] if "DYNAMIC_NORM" in flags else "")
            if not vm or flags & GONE_FLAGS or node.get("state") in ("down", "future"):
                continue
            parts = [by_partition.get(p, p) for p in node.get("partitions", [])]
            group = DRAIN_GROUP if flags & DRAIN_FLAGS or not parts else parts[0]
            found[vm] = WorkerStatus(vm, group, running.get(node["name"], 0), int(node["cpus"]))
        return found
