"""The watchers and workers against the real daemons (scripts/ensure-*.sh), one story each.

Each test walks one worker through its life on one batch system: demand per group with a job
that is not demand, a worker started for a VM joins and really runs its group's jobs, a drained
worker takes no new job, a killed worker leaves the batch system's view.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from berth.elastic.model import DRAIN_GROUP, BatchSystem, QueueSelector
from berth.elastic.procs import read_pid
from berth.elastic.watchers.htcondor import HTCondorWatcher
from berth.elastic.watchers.slurm import SlurmWatcher
from berth.elastic.workers.htcondor import WORKERS_DIR, HTCondorWorkers
from berth.elastic.workers.slurm import SlurmWorkers
from tests.elastic.batch import HTCondorPool, SlurmCluster, wait_until

pytestmark = pytest.mark.slow


@pytest.mark.xfail(
    reason="open: stopped startds' slot ads stay in the collector, and startds other sessions "
    "start in the same pool may run this test's group_juno jobs (docs/elastic.md)",
    strict=False,
)
def test_htcondor_watcher_and_worker(htcondor_pool: HTCondorPool) -> None:
    pool = htcondor_pool
    groups = {
        "juno": QueueSelector(BatchSystem.HTCONDOR, accounting_group="group_juno"),
        "besiii": QueueSelector(BatchSystem.HTCONDOR, accounting_group="group_besiii"),
    }
    watcher = HTCondorWatcher(pool.collector, groups)
    workers = HTCondorWorkers(pool.root, pool.collector)
    vm = f"el-juno-{os.getpid()}"
    pool.submit("group_juno", count=3, seconds=1)
    pool.submit("group_besiii", count=2, seconds=1)
    snap = watcher.snapshot()
    # Quota 1 core per group: one idle job each could start, the others wait on the quota.
    assert (snap.groups["juno"].idle_jobs, snap.groups["juno"].held_jobs) == (1, 2)
    assert (snap.groups["besiii"].idle_jobs, snap.groups["besiii"].held_jobs) == (1, 1)
    try:
        workers.start(vm, cpus=2)
        seen = wait_until(lambda: vm in watcher.snapshot().workers, 20, "startd in collector")
        assert watcher.snapshot().workers[vm].group == DRAIN_GROUP
        assert watcher.snapshot().workers[vm].slots == 2
        print(f"htcondor worker in collector after {seen:.1f} s")
        workers.join(vm, groups["juno"])
        wait_until(lambda: any(o == vm for o in pool.outputs()), 40, "a juno job ran on the VM")
        assert watcher.snapshot().workers[vm].group == "juno"
        assert snap.groups["besiii"].running_jobs == 0  # besiii has no worker: nothing ran
        workers.leave(vm)
        wait_until(lambda: workers.running_jobs(vm) == 0, 30, "drained worker empties")
        wait_until(lambda: watcher.snapshot().workers[vm].group == DRAIN_GROUP, 10, "G_none")
        done = len(pool.outputs())
        time.sleep(6)  # three negotiation cycles: a drained worker starts nothing
        assert len(pool.outputs()) == done
        assert watcher.snapshot().groups["juno"].idle_jobs >= 1
        assert read_pid(pool.root / WORKERS_DIR.lstrip("/") / vm / "startd.pid") is not None
        workers.stop(vm)
        assert vm not in workers.workers()
        # Not yet checked: the stopped startd's slot ads leaving the collector (docs/elastic.md).
    finally:
        workers.stop(vm)
        pool.remove_all()


def test_slurm_watcher_and_worker(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    groups = {g: QueueSelector(BatchSystem.SLURM, partition=g, account=g) for g in cluster.groups}
    watcher = SlurmWatcher(groups, cluster.env)
    workers = SlurmWorkers(cluster.conf)
    vm = f"el-juno-{os.getpid()}"
    cluster.submit("juno", count=2, seconds=1)
    cluster.submit("juno", hold=True)
    cluster.submit("besiii", count=1, seconds=1)
    snap = watcher.snapshot()
    assert (snap.groups["juno"].idle_jobs, snap.groups["juno"].held_jobs) == (2, 1)
    assert (snap.groups["besiii"].idle_jobs, snap.groups["besiii"].held_jobs) == (1, 0)
    try:
        workers.start(vm, cpus=1)
        seen = wait_until(lambda: vm in watcher.snapshot().workers, 20, "slurmd registered")
        assert watcher.snapshot().workers[vm].group == DRAIN_GROUP
        print(f"slurm worker registered after {seen:.1f} s")
        workers.join(vm, groups["juno"])
        node = workers.node(vm)
        jobs = [int(j) for j in cluster.run("squeue", "-h", "-p", "juno", "-o", "%i").split()]
        wait_until(lambda: sum(cluster.output(j) == node for j in jobs) == 2, 40, "juno jobs ran")
        assert watcher.snapshot().workers[vm].group == "juno"
        workers.leave(vm)
        assert watcher.snapshot().workers[vm].group == DRAIN_GROUP
        later = cluster.submit("juno", count=1, seconds=1)[0]
        time.sleep(5)  # two scheduling passes: a drained node starts nothing
        assert cluster.output(later) is None
        assert workers.running_jobs(vm) == 0
        pid = read_pid(cluster.home / "run" / f"slurmd-{node}.pid")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        gone = wait_until(lambda: vm not in watcher.snapshot().workers, 40, "killed slurmd gone")
        print(f"killed slurm worker left sinfo's workers after {gone:.1f} s")
    finally:
        workers.stop(vm)
        cluster.cancel_all()
