"""An HTCondor startd standing for one VM: started, joined, drained and stopped by Berth.

Each VM's startd runs standalone (no condor_master) with its own local directory
(`<workers_dir>/<vm>`, default `/var/lib/berth-workers/<vm>`, under `root`, the file system the
pool's daemons see; "/" on a real VM) and a configuration file of its own that names the VM
(`BerthVm`) and the accounting group it serves (`BerthGroup`); `START` admits only that group's
jobs, so the drain group `G_none` admits none. Joining or leaving rewrites that file and sends
the startd SIGHUP (a reconfig). `CLAIM_WORKLIFE = 0` ends each claim with its job, so a drained
worker takes no next job from a claim it already holds. `SEC_USE_FAMILY_SESSION = False`: there
is no master to share a security session with. `stop` sends SIGTERM (a startd shutting down
withdraws its ads) and then withdraws whatever ads of the VM are left: a killed startd's stay in
the collector otherwise (a `ClassAdLifetime` in the ad did not make the collector drop them
within 90 s).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from berth.elastic.model import DRAIN_GROUP, BatchSystem, QueueSelector
from berth.elastic.procs import BatchCommandError, kill_group, read_pid, run, stop_pid
from berth.elastic.watchers.htcondor import bindings, claims

WORKERS_DIR = "/var/lib/berth-workers"
POOL_CONFIG = "/etc/condor/condor_config"
STOP_GRACE = 15.0  # seconds a startd gets to shut down (and withdraw its ads) before SIGKILL
SUBDIRS = ("log", "execute", "lock", "spool", "run", "run/condor")


def worker_config(
    vm: str, group: str, cpus: int, workers_dir: str = WORKERS_DIR, collector: str | None = None
) -> str:
    """The startd's own settings, read after the pool's (LOCAL_CONFIG_FILE); `collector`, when
    given, overrides the pool configuration's COLLECTOR_HOST."""
    reports_to = f"COLLECTOR_HOST = {collector}\n" if collector else ""
    return f"""# Written by berth.elastic.workers.htcondor for VM {vm}.
{reports_to}LOCAL_DIR = {workers_dir}/{vm}
LOG = $(LOCAL_DIR)/log
EXECUTE = $(LOCAL_DIR)/execute
LOCK = $(LOCAL_DIR)/lock
SPOOL = $(LOCAL_DIR)/spool
RUN = $(LOCAL_DIR)/run
STARTD_NAME = {vm}
USE_SHARED_PORT = False
SEC_USE_FAMILY_SESSION = False
NUM_CPUS = {cpus}
NUM_SLOTS = {cpus}
BerthVm = "{vm}"
BerthGroup = "{group}"
STARTD_ATTRS = $(STARTD_ATTRS) BerthVm BerthGroup
START = (TARGET.AcctGroup =?= MY.BerthGroup)
CLAIM_WORKLIFE = 0
UPDATE_INTERVAL = 2
"""


class HTCondorWorkers:
    """`BatchWorker` for HTCondor; `root` is the pool's file system ("/" when not chrooted).

    The startd reports to `collector` whatever the pool's configuration says. `config` is the
    pool's configuration file and `workers_dir` where the workers' local dirs go, both as the
    pool's daemons see them (a private pool of scripts/ensure-htcondor.sh names its own; the
    defaults are the shared pool's, which also work for a private pool's workers).
    """

    system = BatchSystem.HTCONDOR

    def __init__(
        self,
        root: str | os.PathLike[str],
        collector: str,
        *,
        config: str = POOL_CONFIG,
        workers_dir: str = WORKERS_DIR,
    ) -> None:
        self.root = Path(root)
        self.collector = collector
        self.config = config
        self.workers_dir = workers_dir.rstrip("/")

    def _dir(self, vm: str) -> Path:
        if not vm or "/" in vm or vm.startswith(".") or '"' in vm:
            raise ValueError(f"vm: {vm!r} is not a usable VM name")
        return self.root / self.workers_dir.lstrip("/") / vm

    def _write(self, vm: str, group: str, cpus: int) -> None:
        path = self._dir(vm) / "worker.conf"
        path.write_text(worker_config(vm, group, cpus, self.workers_dir, self.collector))

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
        inside = f"{self.workers_dir}/{vm}"
        (home / "condor_config").write_text(
            f"include : {self.config}\nLOCAL_CONFIG_FILE = {inside}/worker.conf\n"
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
            htc.AdTypes.Startd,
            f'BerthVm == "{vm}" && SlotType =!= "Dynamic"',
            projection=["SlotType", "State", "ChildState"],
        )
        return sum(claims(dict(ad)) for ad in ads)

    def stop(self, vm: str) -> None:
        """SIGTERM (a startd shutting down withdraws its ads), SIGKILL after `STOP_GRACE`, then
        withdraw whatever ads of the VM the collector still holds (a killed startd's) and remove
        the worker's directory."""
        pidfile = self._dir(vm) / "startd.pid"
        pid = read_pid(pidfile)
        if pid is not None:
            stop_pid(pid, grace=STOP_GRACE)
        leader = _recorded_pid(pidfile)
        if leader is not None:  # the startd led its own session: its procd and starters
            kill_group(leader)
        pidfile.unlink(missing_ok=True)
        self.invalidate(vm)
        shutil.rmtree(self._dir(vm), ignore_errors=True)  # the VM's disk goes with it

    def invalidate(self, vm: str) -> None:
        """Remove the VM's startd ads from the collector: `condor_advertise
        INVALIDATE_STARTD_ADS` with a query ad, run where the pool's daemons run (it needs the
        daemons' authentication, which the bindings on the host lack)."""
        home = self._dir(vm)
        home.mkdir(parents=True, exist_ok=True)
        (home / "invalidate.ad").write_text(
            f'MyType = "Query"\nTargetType = "Machine"\nRequirements = BerthVm == "{vm}"\n'
        )
        inside = f"{self.workers_dir}/{vm}/invalidate.ad"
        self._chroot(
            ["env", f"CONDOR_CONFIG={self.config}", "condor_advertise", "-pool", self.collector,
             "INVALIDATE_STARTD_ADS", inside]
        )  # fmt: skip

    def workers(self) -> list[str]:
        base = self.root / self.workers_dir.lstrip("/")
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if read_pid(p / "startd.pid"))

    def _prefix(self) -> list[str]:
        return [] if self.root == Path("/") else ["chroot", str(self.root)]

    def _chroot(self, cmd: list[str]) -> None:
        run([*self._prefix(), *cmd])


def _recorded_pid(path: Path) -> int | None:
    """The pid written in `path`, alive or not."""
    try:
        pid = int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None
