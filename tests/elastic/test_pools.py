"""Elastic pools end to end on the real batch systems (slow): Berth's loop starts VMs in a
simulated cloud, each a real worker (startd or slurmd) driven by a real `berth agent`; the jobs
run on them; the pool drains and retires when the queue empties; failures and a restart.

Short timings (tests/elastic/pools.py CONTROL): boot deadline 12 s, keep-alive 2 s,
heartbeat staleness 4 s, agents beating every 0.5 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from berth.elastic.actions import Code
from berth.elastic.model import TERMINAL, BatchSystem, GroupSpec, QueueSelector, VmState
from berth.elastic.watchers.htcondor import HTCondorWatcher
from berth.elastic.watchers.slurm import SlurmWatcher
from berth.elastic.workers.launcher import WorkerLauncher
from tests.elastic.batch import HTCondorPool, SlurmCluster
from tests.elastic.pools import Pool, pool

pytestmark = pytest.mark.slow


@dataclass
class System:
    """One batch system as the scenarios use it."""

    name: str
    selector: Callable[[str], QueueSelector]
    submit: Callable[[str, int, float], Any]
    ran: Callable[[], int]  # jobs that ran (on Berth's VMs: the pool has no other worker)
    clear: Callable[[], None]
    make: Callable[[Path], Any]  # the `pool(...)` context for this system


def _htcondor(p: HTCondorPool) -> System:
    groups = {g.removeprefix("group_"): g for g in p.quotas}

    def selector(group: str) -> QueueSelector:
        return QueueSelector(BatchSystem.HTCONDOR, accounting_group=groups[group])

    def make(tmp: Path) -> Any:
        workers = p.workers()
        watcher = HTCondorWatcher(p.collector, {g: selector(g) for g in groups})
        opts = [f"root={p.root}", f"collector={p.collector}", f"config={p.config}"]
        opts.append(f"workers_dir={p.workers_dir}")
        worker = "berth.elastic.workers.htcondor:HTCondorWorkers"
        return pool(tmp, worker, opts, WorkerLauncher(workers, {"p4": 1}), [watcher])

    def submit(group: str, count: int, seconds: float) -> int:
        return p.submit(groups[group], count=count, seconds=seconds)

    baseline = len(p.outputs())  # the pool's home keeps earlier sessions' outputs

    return System(
        "htcondor",
        selector,
        submit,
        lambda: len(p.outputs()) - baseline,
        p.remove_all,
        make,
    )


def _slurm(c: SlurmCluster) -> System:
    jobs: list[int] = []

    def selector(group: str) -> QueueSelector:
        return QueueSelector(BatchSystem.SLURM, partition=group, account=group)

    def make(tmp: Path) -> Any:
        workers = c.workers()
        watcher = SlurmWatcher({g: selector(g) for g in c.groups}, c.env)
        worker = "berth.elastic.workers.slurm:SlurmWorkers"
        return pool(tmp, worker, [f"conf={c.conf}"], WorkerLauncher(workers, {"p4": 1}), [watcher])

    return System(
        "slurm",
        selector,
        lambda g, n, s: jobs.extend(c.submit(g, n, s)),
        lambda: sum(c.output(j) is not None for j in jobs),
        c.cancel_all,
        make,
    )


@pytest.fixture(params=["htcondor", "slurm"])
def system(request: pytest.FixtureRequest) -> Iterator[System]:
    if request.param == "htcondor":
        s = _htcondor(request.getfixturevalue("htcondor_pool"))
    else:
        s = _slurm(request.getfixturevalue("slurm_cluster"))
    yield s
    s.clear()


def _group(system: System, name: str, max_vms: int) -> GroupSpec:
    return GroupSpec(name, "p4", 4, 1, system.selector(name), max_vms=max_vms)


def _live(p: Pool, group: str | None = None) -> list[Any]:
    return [v for v in p.env.store.list_vms(group) if v.state not in TERMINAL]


def _active(p: Pool, group: str) -> int:
    """VMs a group's quota counts: requested, booting, joined (a draining VM is on its way out)."""
    return sum(v.state is not VmState.DRAINING for v in _live(p, group))


def _servers(p: Pool) -> list[str]:
    return sorted(s.name for s in p.env.cloud.servers() if "berth_vm" in s.metadata)


def test_jobs_grow_the_pool_run_on_it_and_it_drains_away(system: System, tmp_path: Path) -> None:
    with system.make(tmp_path) as p:
        store = p.env.store
        store.put_elastic_group(_group(system, "juno", 2))
        store.put_elastic_group(_group(system, "besiii", 0))  # at its maximum: nothing
        system.submit("juno", 3, 2.0)
        system.submit("besiii", 2, 2.0)
        most = {"juno": 0, "besiii": 0}

        def juno_joined() -> bool:
            for g in most:
                most[g] = max(most[g], _active(p, g))
            return any(v.state is VmState.JOINED for v in _live(p, "juno"))

        def all_ran() -> bool:
            juno_joined()
            return bool(system.ran() == 5)

        took = p.drive(juno_joined, 40, "a juno VM joined")
        print(f"{system.name}: first VM joined {took:.1f} s after the jobs were submitted")
        assert p.loop is not None
        assert p.loop.last is not None
        besiii = p.loop.last.report("besiii")
        assert Code.AT_MAX in {n.code for n in besiii.notes}
        assert most["besiii"] == 0
        store.put_elastic_group(_group(system, "besiii", 1))
        p.drive(all_ran, 90, "all five jobs ran")
        assert most["juno"] <= 2
        assert most["besiii"] <= 1
        took = p.drive(lambda: not _live(p), 60, "the pool drained and retired")
        print(f"{system.name}: the empty pool retired in {took:.1f} s")
        assert _servers(p) == []
        assert p.launcher.workers.workers() == []
        unstarted = {name for name, _ in p.launcher.errors}  # e.g. no free worker slot
        print(f"{system.name}: workers that could not start: {p.launcher.errors}")
        lived = {"juno": 0, "besiii": 0}
        for vm in store.list_vms():
            states = [c.state.value for c in store.vm_history(vm=vm.name)]
            if states[-1] == "failed":
                # never joined: reaped as a failed boot at its deadline; a worker that could not
                # start, or (on a loaded machine) an agent that joined after the short 12 s
                assert states == ["requested", "booting", "failed"], vm.name
                assert vm.reason == "did not join within the boot deadline", vm.name
                continue
            assert vm.name not in unstarted, vm.name
            assert states == ["requested", "booting", "joined", "draining", "retired"], vm.name
            kinds = [c.kind.value for c in store.list_commands(vm=vm.name)]
            assert kinds == ["join", "leave", "shutdown"]
            lived[vm.group] += 1
        assert min(lived.values()) >= 1, lived  # each group's jobs ran on a VM of its own
        assert all(proc.poll() is not None for proc in p.agents.values())  # every agent ended


def test_failed_boot_lost_agent_and_restart(system: System, tmp_path: Path) -> None:
    with system.make(tmp_path) as p:
        store = p.env.store
        store.put_elastic_group(_group(system, "juno", 1))
        p.env.cloud.fail_boots = 1  # the first boot never comes up
        system.submit("juno", 1, 120.0)
        p.drive(
            lambda: any(v.state is VmState.JOINED for v in store.list_vms()),
            45,
            "a VM failed at its deadline, then another joined",
        )
        failed, joined = store.list_vms()
        assert (failed.state, failed.reason) == (
            VmState.FAILED,
            "did not join within the boot deadline",
        )
        assert joined.requested_at >= failed.since + 2.0  # after the group's backoff
        p.drive(lambda: store.get_vm(joined.name).running_jobs == 1, 30, "the job runs")

        p.kill_agent(joined.name)  # the VM's agent dies; its worker would go on
        p.drive(lambda: store.get_vm(joined.name).state is VmState.LOST, 20, "stale heartbeat")
        assert joined.name not in _servers(p)
        system.clear()
        p.drive(lambda: not _live(p), 60, "nothing left")

        p.crash_next_boot = True  # Berth dies right after the cloud accepted the next boot
        system.submit("juno", 1, 1.0)
        with pytest.raises(KeyboardInterrupt):
            p.drive(lambda: False, 30, "the crash")
        (pending,) = _live(p)
        assert pending.state is VmState.REQUESTED
        p.new_loop()  # the restarted Berth
        p.drive(lambda: system.ran() >= 1, 40, "the job ran on the VM booted before the crash")
        assert [v.name for v in _live(p)] == [pending.name]
        assert _servers(p) == [pending.name]  # no twin
        p.drive(lambda: not _live(p), 60, "retired")
