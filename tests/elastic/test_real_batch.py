"""The watchers and workers against the real daemons (scripts/ensure-*.sh), one story each.

Each test walks workers through their life on one batch system: demand per group with a job
that is not demand, a worker started for a VM joins and really runs its group's jobs, a drained
worker takes no new job, a killed worker leaves the batch system's view. The cluster and pool
are private to the test session (tests/elastic/conftest.py).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from berth.cloud.driver import BootRequest, ServerState
from berth.cloud.simulated import SimulatedCloud
from berth.core.model import Flavor, Fleet, Host, NumaCell
from berth.elastic.model import DRAIN_GROUP, BatchSystem, QueueSelector
from berth.elastic.procs import read_pid
from berth.elastic.watchers.htcondor import HTCondorWatcher, bindings
from berth.elastic.watchers.slurm import SlurmWatcher
from berth.elastic.workers.base import BatchWorker
from berth.elastic.workers.htcondor import HTCondorWorkers
from berth.elastic.workers.launcher import WorkerLauncher
from tests.elastic.batch import HTCondorPool, SlurmCluster, wait_until

pytestmark = pytest.mark.slow


def htcondor_groups() -> dict[str, QueueSelector]:
    return {
        "juno": QueueSelector(BatchSystem.HTCONDOR, accounting_group="group_juno"),
        "besiii": QueueSelector(BatchSystem.HTCONDOR, accounting_group="group_besiii"),
    }


def collector_ads(pool: HTCondorPool, vm: str) -> list[str]:
    """The names of the VM's startd ads in the collector, stale or not."""
    htc = bindings()
    found = htc.Collector(pool.collector).query(
        htc.AdTypes.Startd, f'BerthVm == "{vm}"', projection=["Name", "MyType", "SlotType"]
    )
    return sorted(f"{ad.get('MyType')}:{ad.get('SlotType')}:{ad['Name']}" for ad in found)


def test_htcondor_watcher_and_worker(htcondor_pool: HTCondorPool) -> None:
    pool = htcondor_pool
    groups = htcondor_groups()
    watcher = HTCondorWatcher(pool.collector, groups)
    workers = pool.workers()
    vm = "el-juno-1"
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
        wait_until(
            lambda: vm in pool.outputs(), 40, "a juno job ran on the VM",
            detail=lambda: collector_ads(pool, vm),
        )  # fmt: skip
        assert watcher.snapshot().workers[vm].group == "juno"
        assert watcher.snapshot().groups["besiii"].running_jobs == 0  # no besiii worker
        workers.leave(vm)
        wait_until(
            lambda: workers.running_jobs(vm) == 0,
            30,
            "drained worker empties",
            detail=lambda: (collector_ads(pool, vm), pool.chroot("condor_q", "-all", "-af",
                            "ClusterId", "ProcId", "JobStatus", "RemoteHost")),
        )  # fmt: skip
        wait_until(lambda: watcher.snapshot().workers[vm].group == DRAIN_GROUP, 10, "G_none")
        done = len(pool.outputs())
        time.sleep(6)  # three negotiation cycles: a drained worker starts nothing
        assert len(pool.outputs()) == done
        assert watcher.snapshot().groups["juno"].idle_jobs == 1
        # A startd killed without a word keeps its ads in the collector: the watcher counts
        # them as gone once stale, and `stop` withdraws them.
        pid = read_pid(workers._dir(vm) / "startd.pid")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        quick = HTCondorWatcher(pool.collector, groups, stale_after=5.0)
        gone = wait_until(lambda: vm not in quick.snapshot().workers, 20, "stale ads ignored")
        print(f"killed htcondor worker counted gone after {gone:.1f} s")
        assert collector_ads(pool, vm)  # still there: its slot ads, maybe its daemon ad
        workers.stop(vm)
        assert collector_ads(pool, vm) == []
        assert vm not in workers.workers()
    finally:
        workers.stop(vm)
        pool.remove_all()


def test_slurm_watcher_and_worker(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    groups = {g: QueueSelector(BatchSystem.SLURM, partition=g, account=g) for g in cluster.groups}
    watcher = SlurmWatcher(groups, cluster.env)
    workers = cluster.workers()
    vm = "el-juno-1"
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


def simulated_cloud(name: str, launcher: WorkerLauncher) -> SimulatedCloud:
    cell = NumaCell(shared_cpus=8, memory_mb=16384)
    fleet = Fleet(
        hosts=[Host(name="h1", numa_cells=[cell])],
        flavors=[
            Flavor(name="c1", vcpus=1, memory_mb=1024),
            Flavor(name="c2", vcpus=2, memory_mb=2048),
            Flavor(name="odd", vcpus=3, memory_mb=1024),
        ],
    )
    return SimulatedCloud(name, fleet, on_boot=launcher.on_boot, on_delete=launcher.on_delete)


def launcher_story(
    cloud_name: str, workers: BatchWorker, visible: object, flavor: str
) -> tuple[float, float]:
    """Boot a server: its worker joins the batch system; delete it: the worker is gone.

    `visible(vm)` says whether the batch system sees the VM's worker. Returns (seconds until the
    worker was seen, seconds the delete took until it was gone)."""
    assert callable(visible)
    launcher = WorkerLauncher(workers, {"c1": 1, "c2": 2})
    cloud = simulated_cloud(cloud_name, launcher)
    server = cloud.boot(BootRequest(f"{cloud_name}-vm1", flavor, "h1"))
    try:
        assert server.state is ServerState.ACTIVE
        assert launcher.errors == []
        seen = wait_until(lambda: visible(server.name), 20, f"{server.name} in the batch system")
        assert server.name in workers.workers()
        # A flavor the launcher has no CPU count for: the VM never gets a worker, and says why.
        odd = cloud.boot(BootRequest(f"{cloud_name}-odd", "odd", "h1"))
        assert [name for name, _ in launcher.errors] == [odd.name]
        assert odd.name not in workers.workers()
        start = time.monotonic()
        cloud.delete(server.id)
        assert not visible(server.name)
        took = time.monotonic() - start
        assert server.name not in workers.workers()
        assert [name for name, _ in launcher.errors] == [odd.name]
        return seen, took
    finally:
        workers.stop(server.name)


def test_launcher_with_simulated_cloud(
    htcondor_pool: HTCondorPool, slurm_cluster: SlurmCluster
) -> None:
    htc_watcher = HTCondorWatcher(htcondor_pool.collector, htcondor_groups())
    # Built as `berth agent --worker-opt root=... --worker-opt collector=...` builds it: the
    # shared pool's configuration and workers dir, reporting to this session's collector.
    htc_seen, htc_gone = launcher_story(
        f"htc{os.getpid()}",
        HTCondorWorkers(htcondor_pool.root, htcondor_pool.collector),
        lambda vm: vm in htc_watcher.snapshot().workers,
        "c2",
    )
    groups = {
        g: QueueSelector(BatchSystem.SLURM, partition=g, account=g) for g in slurm_cluster.groups
    }
    slurm_watcher = SlurmWatcher(groups, slurm_cluster.env)
    slurm_seen, slurm_gone = launcher_story(
        "slurm",
        slurm_cluster.workers(),
        lambda vm: vm in slurm_watcher.snapshot().workers,
        "c1",
    )
    print(
        f"launcher: htcondor worker seen {htc_seen:.1f} s after boot, gone {htc_gone:.2f} s "
        f"after delete; slurm {slurm_seen:.1f} s / {slurm_gone:.2f} s"
    )
