"""The watchers' parsers on the batch systems' real output, recorded by tests/elastic/record.py.

Each recorded file holds one scenario (tests/elastic/recorded/SCENARIO.json: which jobs and
workers were in which state); the tests check that the parsers read that scenario back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from berth.elastic.model import DRAIN_GROUP, BatchSystem, GroupDemand, QueueSelector
from berth.elastic.watchers.htcondor import (
    HTCondorWatcher,
    config_quotas,
    fresh_slots,
    group_demand,
)
from berth.elastic.watchers.slurm import SlurmWatcher, count_jobs, matches, not_demand

RECORDED = Path(__file__).resolve().parent / "recorded"


def recorded(name: str) -> Any:
    return json.loads((RECORDED / name).read_text())


# ---- Slurm ------------------------------------------------------------------------------------
def slurm_groups() -> dict[str, QueueSelector]:
    return {g: QueueSelector(BatchSystem.SLURM, partition=g, account=g) for g in ("juno", "besiii")}


def test_slurm_pending_reasons_split_demand_from_jobs_a_node_would_not_start() -> None:
    jobs = recorded("slurm-squeue.json")["jobs"]
    reasons = {j["state_reason"] for j in jobs if j["job_state"] == "PENDING"}
    # The recording holds every kind the scenario set up (a fresh recording must, too).
    assert reasons == {
        "Resources", "Priority", "ReqNodeNotAvail", "JobHeldUser", "Dependency", "BeginTime",
    }  # fmt: skip
    assert {r for r in reasons if not_demand(r)} == {"JobHeldUser", "Dependency", "BeginTime"}


@pytest.mark.parametrize(
    ("reason", "is_demand"),
    [
        ("Resources", True),
        ("Priority", True),
        ("ReqNodeNotAvail", True),
        ("None", True),
        ("JobHeldAdmin", False),
        ("AssocGrpCpuLimit", False),
        ("AssocMaxJobsLimit", False),
        ("QOSMaxJobsPerUserLimit", False),
        ("DependencyNeverSatisfied", False),
        ("PartitionDown", False),
    ],
)
def test_slurm_reason_classification(reason: str, is_demand: bool) -> None:
    assert not_demand(reason) is not is_demand


def test_slurm_count_jobs_per_group() -> None:
    jobs = recorded("slurm-squeue.json")["jobs"]
    counted = {
        name: count_jobs(name, [j for j in jobs if matches(j, sel)])
        for name, sel in slurm_groups().items()
    }
    # juno: 1 running; Resources and Priority pending; held, dependency and begin time not demand.
    assert counted["juno"] == GroupDemand("juno", idle_jobs=2, running_jobs=1, held_jobs=3)
    # besiii: both pending jobs wait for a node (its only one is drained).
    assert counted["besiii"] == GroupDemand("besiii", idle_jobs=2, running_jobs=0, held_jobs=0)


def test_slurm_selector_needs_partition_and_account_to_match() -> None:
    job = {"partition": "juno", "account": "juno"}
    assert matches(job, QueueSelector(BatchSystem.SLURM, partition="juno"))
    assert matches(job, QueueSelector(BatchSystem.SLURM, account="juno"))
    assert not matches(job, QueueSelector(BatchSystem.SLURM, partition="juno", account="other"))
    assert matches({"partition": "batch,juno"}, QueueSelector(BatchSystem.SLURM, partition="juno"))


def test_slurm_node_states_to_workers() -> None:
    nodes = recorded("slurm-sinfo.json")["nodes"]
    jobs = recorded("slurm-squeue.json")["jobs"]
    workers = SlurmWatcher(slurm_groups())._workers(nodes, jobs)
    # rec-juno serves juno and runs one job; rec-drained is drained (G_none, whatever its
    # partition); rec-dead's slurmd was killed (NOT_RESPONDING): no worker.
    assert set(workers) == {"rec-juno", "rec-drained"}
    assert (workers["rec-juno"].group, workers["rec-juno"].running_jobs) == ("juno", 1)
    assert workers["rec-juno"].slots == 1
    assert (workers["rec-drained"].group, workers["rec-drained"].running_jobs) == (DRAIN_GROUP, 0)
    assert workers["rec-drained"].slots == 2


def test_slurm_node_without_vm_or_in_future_state_is_no_worker() -> None:
    node = dict(recorded("slurm-sinfo.json")["nodes"][0])
    watcher = SlurmWatcher(slurm_groups())
    assert watcher._workers([{**node, "comment": ""}], []) == {}
    assert watcher._workers([{**node, "state": "future"}], []) == {}
    assert watcher._workers([{**node, "state": "down"}], []) == {}
    dynamic = {**node, "comment": "", "name": "vm-7", "state_flags": ["DYNAMIC_NORM"]}
    assert set(watcher._workers([dynamic], [])) == {"vm-7"}
    nowhere = {**node, "partitions": []}
    assert watcher._workers([nowhere], [])[node["comment"]].group == DRAIN_GROUP


# ---- HTCondor ---------------------------------------------------------------------------------
def htcondor_groups() -> dict[str, QueueSelector]:
    return {
        "juno": QueueSelector(BatchSystem.HTCONDOR, accounting_group="group_juno"),
        "besiii": QueueSelector(BatchSystem.HTCONDOR, accounting_group="group_besiii"),
    }


def test_htcondor_quotas_from_negotiator_priorities() -> None:
    quotas = config_quotas(recorded("htcondor-priorities.json"))
    # The `<none>` group (quota 0) and the submitter record (not a group) are left out.
    assert quotas == {"group_juno": 1.0, "group_besiii": 1.0}


def test_htcondor_group_demand_within_quota() -> None:
    jobs = recorded("htcondor-jobs.json")
    quotas = config_quotas(recorded("htcondor-priorities.json"))
    by_group = {
        name: group_demand(
            name,
            [j for j in jobs if j["AcctGroup"] == sel.accounting_group],
            quotas[str(sel.accounting_group)],
        )
        for name, sel in htcondor_groups().items()
    }
    # juno runs its 1-core quota: its 3 idle jobs wait on the quota, with the held one.
    assert by_group["juno"] == GroupDemand("juno", idle_jobs=0, running_jobs=1, held_jobs=4)
    # besiii runs nothing: one idle job fits its quota, the other waits.
    assert by_group["besiii"] == GroupDemand("besiii", idle_jobs=1, running_jobs=0, held_jobs=1)


def test_htcondor_group_demand_counts_cores_and_no_quota_means_no_limit() -> None:
    idle = {"JobStatus": 1, "RequestCpus": 1}
    big = {"JobStatus": 1, "RequestCpus": 4}
    assert group_demand("g", [idle, idle, big], None) == GroupDemand("g", 3, 0, 0)
    # Quota 3 cores: two 1-core jobs fit, the 4-core one (and all after it) wait.
    assert group_demand("g", [idle, idle, big, idle], 3.0) == GroupDemand("g", 2, 0, 2)
    running = {"JobStatus": 2, "RequestCpus": 2}
    assert group_demand("g", [running, idle, idle], 3.0) == GroupDemand("g", 1, 1, 1)


def test_htcondor_slot_ads_to_workers() -> None:
    slots = recorded("htcondor-slots.json")
    workers = HTCondorWatcher("unused:0", htcondor_groups())._workers(slots)
    # rec-juno: 2 partitionable slots (the dynamic one carved from them is no extra slot), one
    # claim running a juno job; rec-none: in the drain group.
    assert set(workers) == {"rec-juno", "rec-none"}
    assert (workers["rec-juno"].group, workers["rec-juno"].running_jobs) == ("juno", 1)
    assert workers["rec-juno"].slots == 2
    assert (workers["rec-none"].group, workers["rec-none"].slots) == (DRAIN_GROUP, 1)
    # A dynamic slot whose invalidation the collector missed outlives its claim: the parent's
    # ChildState, not the orphan, says what runs.
    parent = next(s for s in slots if s["BerthVm"] == "rec-juno" and s.get("ChildState"))
    done = [s for s in slots if s is not parent] + [{**parent, "ChildState": []}]
    assert (
        HTCondorWatcher("unused:0", htcondor_groups())._workers(done)["rec-juno"].running_jobs == 0
    )


def test_htcondor_stale_slot_ads_are_dropped() -> None:
    slots = recorded("htcondor-slots.json")
    heard = max(s["LastHeardFrom"] for s in slots)
    assert fresh_slots(slots, heard + 5, stale_after=20) == slots
    killed = {**slots[-1], "LastHeardFrom": heard - 60}  # a startd that went quiet
    assert fresh_slots([*slots, killed], heard + 5, stale_after=20) == slots
    assert fresh_slots(slots, heard + 100, stale_after=20) == []
