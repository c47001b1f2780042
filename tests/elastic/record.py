"""Record the batch systems' real output for the parser tests (tests/elastic/test_parsers.py).

`python -m tests.elastic.record` (as root, from the repository) starts a private Slurm cluster
and HTCondor pool (tests/elastic/batch.py), puts jobs and workers in the states the parsers
must tell apart, saves what `squeue --json`, `sinfo --json`, the schedd, the collector and the
negotiator answer in tests/elastic/recorded/, and tears everything down. The scenario each file
holds is written in `SCENARIO` below; the tests assert what it implies.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from berth.elastic.model import BatchSystem, QueueSelector
from berth.elastic.procs import read_pid
from berth.elastic.watchers.htcondor import JOB_ATTRS, SLOT_ATTRS, bindings
from tests.elastic.batch import (
    HTCondorPool,
    SlurmCluster,
    private_name,
    up_htcondor,
    up_slurm,
    wait_until,
)

OUT = Path(__file__).resolve().parent / "recorded"
SCENARIO = {
    "slurm": {
        "nodes": "rec-juno (1 CPU, partition juno, running one job), rec-drained (2 CPUs, "
        "joined besiii then drained), rec-dead (1 CPU, partition juno, slurmd SIGKILLed: "
        "NOT_RESPONDING); the one FUTURE slot left is not listed",
        "jobs": "juno: 1 running (on rec-juno), 2 pending (no free CPU), 1 held (--hold), 1 "
        "waiting on a dependency, 1 with a begin time in an hour; besiii: 2 pending (its only "
        "node is drained)",
    },
    "htcondor": {
        "workers": "rec-juno (2 CPUs: 2 partitionable slots, one with a dynamic slot running "
        "a juno job; serves group_juno), rec-none (1 CPU, in G_none)",
        "jobs": "group_juno: 1 running, 3 idle (quota 1 core: none startable), 1 held; "
        "group_besiii: 2 idle (quota 1: one startable)",
    },
}


def record_slurm(cluster: SlurmCluster) -> None:
    workers = cluster.workers()
    juno = QueueSelector(BatchSystem.SLURM, partition="juno", account="juno")
    besiii = QueueSelector(BatchSystem.SLURM, partition="besiii", account="besiii")
    try:
        for vm, cpus in (("rec-juno", 1), ("rec-drained", 2), ("rec-dead", 1)):
            workers.start(vm, cpus)
        workers.join("rec-drained", besiii)
        workers.leave("rec-drained")
        workers.join("rec-dead", juno)
        dead = workers.node("rec-dead")
        pid = read_pid(cluster.home / "run" / f"slurmd-{dead}.pid")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        workers.join("rec-juno", juno)
        wait_until(
            lambda: "NOT_RESPONDING" in cluster.run("scontrol", "show", "node", dead),
            40,
            "the killed slurmd stops responding",
        )
        running = cluster.submit("juno", seconds=600)[0]
        wait_until(lambda: cluster.output(running) is not None, 30, "the juno job runs")
        cluster.submit("juno", count=2, seconds=600)
        cluster.submit("juno", hold=True)
        cluster.run("sbatch", "-p", "juno", "-A", "juno", f"--dependency=afterok:{running}",
                    "--wrap", "true")  # fmt: skip
        cluster.run("sbatch", "-p", "juno", "-A", "juno", "--begin=now+1hour", "--wrap", "true")
        cluster.submit("besiii", count=2, seconds=600)
        time.sleep(4)  # two scheduling passes: pending reasons set
        places = {str(cluster.home.parent): "$STATE_DIR", os.getcwd(): "$WORKDIR"}
        for cmd in ("squeue", "sinfo"):
            data = scrub(json.loads(cluster.run(cmd, "--json")), places)
            (OUT / f"slurm-{cmd}.json").write_text(json.dumps(data, indent=1) + "\n")
    finally:
        cluster.cancel_all()
        for vm in {*workers.workers(), "rec-dead"}:
            workers.stop(vm)


def scrub(value: Any, places: dict[str, str]) -> Any:
    """`value` with this machine's paths (`places`' keys) replaced by their placeholders."""
    if isinstance(value, str):
        for path, name in places.items():
            value = value.replace(path, name)
        return value
    if isinstance(value, list):
        return [scrub(v, places) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v, places) for k, v in value.items()}
    return value


def _json_ads(ads: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(ad.printJson()) for ad in ads]


def record_htcondor(pool: HTCondorPool) -> None:
    htc = bindings()
    workers = pool.workers()
    juno = QueueSelector(BatchSystem.HTCONDOR, accounting_group="group_juno")
    try:
        workers.start("rec-juno", 2)
        workers.start("rec-none", 1)
        pool.submit("group_juno", count=1, seconds=600)
        workers.join("rec-juno", juno)
        wait_until(lambda: "rec-juno" in pool.outputs(), 40, "a juno job runs")
        held = pool.submit("group_juno", count=1, seconds=600)
        pool.chroot("condor_hold", str(held), as_user=True)
        pool.submit("group_juno", count=3, seconds=600)
        pool.submit("group_besiii", count=2, seconds=600)
        wait_until(lambda: "rec-none" in _vms(pool), 20, "rec-none in the collector")
        wait_until(lambda: workers.running_jobs("rec-juno") == 1, 20, "the claim in the collector")
        coll = htc.Collector(pool.collector)
        schedd = htc.Schedd(coll.locate(htc.DaemonType.Schedd))
        jobs = schedd.query("true", projection=[*JOB_ATTRS, "ClusterId", "ProcId"])
        slots = coll.query(htc.AdTypes.Startd, "BerthVm isnt undefined", projection=SLOT_ATTRS)
        prios = htc.Negotiator(coll.locate(htc.DaemonType.Negotiator)).getPriorities(True)
        for name, ads in (("jobs", jobs), ("slots", slots), ("priorities", prios)):
            text = json.dumps(_json_ads(ads), indent=1) + "\n"
            (OUT / f"htcondor-{name}.json").write_text(text)
    finally:
        pool.remove_all()
        for vm in ("rec-juno", "rec-none"):
            workers.stop(vm)


def _vms(pool: HTCondorPool) -> set[str]:
    htc = bindings()
    ads = htc.Collector(pool.collector).query(htc.AdTypes.Startd, projection=["BerthVm"])
    return {str(ad.get("BerthVm")) for ad in ads}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    cluster = up_slurm(private_name("slurm"))
    try:
        record_slurm(cluster)
    finally:
        cluster.down()
    pool = up_htcondor(private_name("htc"))
    try:
        record_htcondor(pool)
    finally:
        pool.down()
    (OUT / "SCENARIO.json").write_text(json.dumps(SCENARIO, indent=1) + "\n")


if __name__ == "__main__":
    main()
