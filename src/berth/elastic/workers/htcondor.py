"""An HTCondor startd standing for one VM: started, joined, drained and stopped by Berth.

Each VM's startd runs standalone (no condor_master) with its own local directory
(`/var/lib/berth-workers/<vm>` under `root`, the file system the pool's daemons see; "/" on a
real VM) and a configuration file of its own that names the VM (`BerthVm`) and the accounting
group it serves (`BerthGroup`); `START` admits only that group's jobs, so the drain group
`G_none` admits none. Joining or leaving rewrites that file and sends the startd SIGHUP (a
reconfig). `CLAIM_WORKLIFE = 0` ends each claim with its job, so a drained worker takes no next
job from a claim it already holds. `SEC_USE_FAMILY_SESSION = False`: there is no master to share
a security session with.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from berth.elastic.model import DRAIN_GROUP, BatchSystem, QueueSelector
from berth.elastic.procs import BatchCommandError, read_pid, run, stop_pid
from berth.elastic.watchers.htcondor import bindings

WORKERS_DIR = "/var/lib/berth-workers"
SUBDIRS = ("log", "execute", "lock", "spool", "run", "run/condor")


def worker_config(vm: str, group: str, cpus: int) -> str:
    """The startd's own settings, read after the pool's (LOCAL_CONFIG_FILE)."""
    return f"""# Written by berth.elastic.workers.htcondor for VM {vm}.
LOCAL_DIR = {WORKERS_DIR}/{vm}
LOG = $(LOCAL_DIR)/log
EXECUTE = $(LOCAL_DIR)/execute
LOCK = $(LOCAL_DIR)/lock
SPOOL = $(LOCAL_DIR)/spool
STARTD_NAME = {vm}
USE_SHARED_PORT = False
SEC_USE_FAMILY_SESSION = False
NUM_CPUS = {cpus}
NUM_SLOTS = {cpus}
BerthVm = "{vm}"
BerthGroup = "{group}"
# A startd killed without goodbye leaves the collector when its ads expire: in seconds.
ClassAdLifetime = 10
STARTD_ATTRS = $(STARTD_ATTRS) BerthVm BerthGroup ClassAdLifetime
START = (TARGET.AcctGroup =?= MY.BerthGroup)
CLAIM_WORKLIFE = 0
UPDATE_INTERVAL = 2
"""


class HTCondorWorkers:
    """`BatchWorker` for HTCondor; `root` is the pool's file system ("/" when not chrooted)."""

    system = BatchSystem.HTCONDOR

    def __init__(self, root: str | os.PathLike[str], collector: str) -> None:
        self.root = Path(root)
        self.collector = collector

    def _dir(self, vm: str) -> Path:
        if not vm or "/" in vm or vm.startswith("."):
            raise ValueError(f"vm: {vm!r} is not a usable VM name")
        return self.root / WORKERS_DIR.lstrip("/") / vm

    def _write(self, vm: str, group: str, cpus: int) -> None:
        path = self._dir(vm) / "worker.conf"
        path.write_text(worker_config(vm, group, cpus))

    def _cpus(self, vm: str) -> int:
        for line in (self._dir(vm) / "worker.conf").read_text().splitlines():
            if line.startswith("NUM_CPUS = "):
                return int(line.split("=")[1])
        raise BatchCommandError(f"{vm}: worker.conf names no NUM_CPUS")

    def start(self, vm: str, cpus: int) -> None:
        if cpus < 1:
            raise ValueError(f"cpus: must be at least 1, got {cpus}")
        home = self._dir(vm)
        if read_pid(home / "startd.pid"):
            return
        for sub in SUBDIRS:
            (home / sub).mkdir(parents=True, exist_ok=True)
        self._write(vm, DRAIN_GROUP, cpus)
        inside = f"{WORKERS_DIR}/{vm}"
        (home / "condor_config").write_text(
            f"include : /etc/condor/condor_config\nLOCAL_CONFIG_FILE = {inside}/worker.conf\n"
        )
        self._chroot(["chown", "-R", "condor:condor", inside])
        (home / "execute").chmod(0o1777)
        with open(home / "startd.out", "ab") as out:
            proc = subprocess.Popen(
                [
                    *self._prefix(),
                    "env",
                    f"CONDOR_CONFIG={inside}/condor_config",
                    "condor_startd",
                    "-f",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        (home / "startd.pid").write_text(f"{proc.pid}\n")

    def join(self, vm: str, queue: QueueSelector) -> None:
        if not queue.accounting_group:
            raise ValueError("queue.accounting_group: required to join an HTCondor queue")
        self._reconfig(vm, queue.accounting_group)

    def leave(self, vm: str) -> None:
        self._reconfig(vm, DRAIN_GROUP)

    def _reconfig(self, vm: str, group: str) -> None:
        pid = read_pid(self._dir(vm) / "startd.pid")
        if pid is None:
            raise BatchCommandError(f"{vm}: its startd is not running")
        self._write(vm, group, self._cpus(vm))
        os.kill(pid, signal.SIGHUP)

    def running_jobs(self, vm: str) -> int:
        htc = bindings()
        ads = htc.Collector(self.collector).query(
            htc.AdTypes.Startd, f'BerthVm == "{vm}" && State == "Claimed"', projection=["Name"]
        )
        return len(ads)

    def stop(self, vm: str) -> None:
        pid = read_pid(self._dir(vm) / "startd.pid")
        if pid is not None:
            stop_pid(pid, grace=15.0)
        (self._dir(vm) / "startd.pid").unlink(missing_ok=True)

    def workers(self) -> list[str]:
        base = self.root / WORKERS_DIR.lstrip("/")
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if read_pid(p / "startd.pid"))

    def _prefix(self) -> list[str]:
        return [] if self.root == Path("/") else ["chroot", str(self.root)]

    def _chroot(self, cmd: list[str]) -> None:
        run([*self._prefix(), *cmd])
