"""The real batch systems the elastic tests run against, as the session fixtures hand them out.

`up_slurm()` and `up_htcondor()` run the project's scripts (scripts/ensure-slurm.sh,
scripts/ensure-htcondor.sh: install once, start; both idempotent) and describe the result.
Given a `private` name (the fixtures give one per test session), each starts a cluster or pool
of its own — own state, own ports — so concurrent test runs on one machine, and the shared pool
demos use, never take each other's jobs or workers; `down()` stops it and removes its files.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from berth.elastic.workers.htcondor import POOL_CONFIG, WORKERS_DIR, HTCondorWorkers
from berth.elastic.workers.slurm import SlurmWorkers

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count(1)


def _script(script: str, action: str, env: dict[str, str], *, out: bool = False) -> str:
    done = subprocess.run(
        [str(ROOT / "scripts" / script), action],
        env={**os.environ, **env},
        check=True,
        capture_output=out,
        text=True,
    )
    return done.stdout or ""


def _script_env(script: str, env: dict[str, str]) -> dict[str, str]:
    _script(script, "up", env)
    out = _script(script, "env", env, out=True)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def free_ports(count: int) -> int:
    """The first of `count` consecutive free TCP ports on 127.0.0.1, below the ephemeral range."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - count)
        if all(_port_free(p) for p in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports in 20000-32000")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    step: float = 0.2,
    detail: Callable[[], object] | None = None,
) -> float:
    """Poll `check` until true; return the seconds it took, fail naming `what` (and `detail()`,
    what the system showed then) on timeout."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            shown = f"; saw {detail()!r}" if detail else ""
            raise AssertionError(f"not within {timeout} s: {what}{shown}")
        time.sleep(step)
    return time.monotonic() - start


@dataclass(frozen=True)
class SlurmCluster:
    """A running slurmctld (no static node); `env` carries SLURM_CONF for every command."""

    conf: Path
    home: Path
    env: dict[str, str]
    groups: tuple[str, ...]  # one partition (and account) per group
    script_env: dict[str, str] = field(default_factory=dict)  # how ensure-slurm.sh made it

    def run(self, *cmd: str) -> str:
        return subprocess.run(
            cmd, env={**os.environ, **self.env}, check=True, capture_output=True, text=True
        ).stdout

    def workers(self, mode: str = "slot") -> SlurmWorkers:
        return SlurmWorkers(self.conf, mode=mode)

    def submit(
        self, group: str, count: int = 1, seconds: float = 1.0, *, hold: bool = False
    ) -> list[int]:
        """`count` jobs in `group`'s partition and account; each writes its node's name."""
        out_dir = self.home / "jobs"
        out_dir.mkdir(exist_ok=True)
        ids = []
        for _ in range(count):
            cmd = ["sbatch", "--parsable", "-p", group, "-A", group, "-o", f"{out_dir}/%j.out"]
            cmd += ["--hold"] if hold else []
            cmd += ["--wrap", f"echo $SLURMD_NODENAME; sleep {seconds}"]
            ids.append(int(self.run(*cmd).strip().split(";")[0]))
        return ids

    def output(self, job: int) -> str | None:
        path = self.home / "jobs" / f"{job}.out"
        return path.read_text().strip() if path.exists() else None

    def cancel_all(self) -> None:
        self.run("scancel", "--user", "root")

    def down(self) -> None:
        """Stop a private cluster's daemons (workers too) and remove its state dir."""
        if not self.script_env:
            return  # the shared cluster outlives the session
        _script("ensure-slurm.sh", "down", self.script_env)
        shutil.rmtree(self.script_env["BERTH_BATCH_HOME"], ignore_errors=True)


@dataclass(frozen=True)
class HTCondorPool:
    """A running personal pool (no startd of its own) in a chroot at `root`."""

    root: Path
    collector: str
    user: str
    quotas: dict[str, float] = field(default_factory=dict)  # accounting group -> cores
    config: str = POOL_CONFIG  # the pool's condor_config, inside the chroot
    workers_dir: str = WORKERS_DIR  # the workers' local dirs, inside the chroot
    script_env: dict[str, str] = field(default_factory=dict)  # how ensure-htcondor.sh made it

    @property
    def jobs_dir(self) -> str:
        """Where this pool's test jobs are written, inside the chroot (the user's, per pool)."""
        pool = self.script_env.get("BERTH_HTCONDOR_POOL", "shared")
        return f"/home/{self.user}/{pool}"

    def chroot(self, *cmd: str, as_user: bool = False) -> str:
        spec = [f"--userspec={self.user}:{self.user}"] if as_user else []
        return subprocess.run(
            ["chroot", *spec, str(self.root), "env", f"CONDOR_CONFIG={self.config}", *cmd],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def workers(self) -> HTCondorWorkers:
        return HTCondorWorkers(
            self.root, self.collector, config=self.config, workers_dir=self.workers_dir
        )

    def submit(self, group: str, count: int = 1, seconds: float = 1.0, *, extra: str = "") -> int:
        """`count` jobs of accounting group `group`; each writes its machine's BerthVm."""
        name = f"berth-test-{os.getpid()}-{next(_names)}"
        home = self.jobs_dir
        self.chroot("mkdir", "-p", home, as_user=True)
        (self.root / home.lstrip("/") / f"{name}.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c 'echo $$(BerthVm); sleep {seconds}'\"\n"
            f"accounting_group = {group}\naccounting_group_user = {self.user}\n"
            f"output = {home}/{name}.$(Process).out\nerror = {home}/{name}.$(Process).err\n"
            f"should_transfer_files = NO\n{extra}queue {count}\n"
        )
        submit = f"cd {home} && condor_submit {name}.sub"
        for attempt in range(20):  # a schedd that just started may refuse for a moment
            try:
                out = self.chroot("sh", "-c", submit, as_user=True)
                break
            except subprocess.CalledProcessError:
                if attempt == 19:
                    raise
                time.sleep(0.5)
        return int(out.rsplit("cluster", 1)[1].strip(" .\n"))

    def outputs(self) -> list[str]:
        home = self.root / self.jobs_dir.lstrip("/")
        return [p.read_text().strip() for p in home.glob("berth-test-*.out") if p.stat().st_size]

    def remove_all(self) -> None:
        subprocess.run(
            ["chroot", f"--userspec={self.user}:{self.user}", str(self.root), "env",
             f"CONDOR_CONFIG={self.config}", "condor_rm", "-all"],
            capture_output=True,
            check=False,  # nothing to remove is no error
        )  # fmt: skip

    def down(self) -> None:
        """Stop a private pool, its workers and daemons, and remove its files."""
        if not self.script_env:
            return  # the shared pool outlives the session
        _script("ensure-htcondor.sh", "destroy", self.script_env)
        shutil.rmtree(self.root / self.jobs_dir.lstrip("/"), ignore_errors=True)


def private_name(kind: str) -> str:
    """A name for a session's private cluster or pool: `<kind>-<pid>-<random>`."""
    return f"{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _owner_gone(name: str, kind: str) -> bool:
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != kind or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def sweep_stale(chroot: Path | None = None) -> list[str]:
    """Tear down private clusters and pools whose test session died without tearing them down
    (its pid is gone); returns their names."""
    swept = []
    for home in _temp_dir().glob("berth-slurm-*"):
        name = home.name.removeprefix("berth-")
        if _owner_gone(name, "slurm"):
            _script("ensure-slurm.sh", "down", {"BERTH_BATCH_HOME": str(home)})
            shutil.rmtree(home, ignore_errors=True)
            swept.append(name)
    pools = chroot / "var/lib/berth-pools" if chroot else None
    for pool in sorted(pools.iterdir()) if pools and pools.is_dir() else []:
        if _owner_gone(pool.name, "htc"):
            _script("ensure-htcondor.sh", "destroy", {"BERTH_HTCONDOR_POOL": pool.name})
            swept.append(pool.name)
    return swept


def _temp_dir() -> Path:
    return Path(os.environ.get("TMPDIR", "/tmp"))


def up_slurm(private: str | None = None) -> SlurmCluster:
    """The shared cluster, or with `private` (a name) a cluster of its own: a state dir under
    the system's temp dir and free ports, 2 one-CPU and 2 two-CPU worker slots."""
    script_env: dict[str, str] = {}
    if private:
        base = free_ports(6)
        script_env = {
            "BERTH_BATCH_HOME": str(_temp_dir() / f"berth-{private}"),
            "BERTH_SLURMCTLD_PORT": str(base),
            "BERTH_SLURMD_PORT": str(base + 1),
            "BERTH_SLURM_SLOT_PORT": str(base + 2),
            "BERTH_SLURM_SLOTS": "1:2,2:2",
        }
    env = _script_env("ensure-slurm.sh", script_env)
    conf = Path(env["SLURM_CONF"])
    groups = tuple(env["BERTH_SLURM_GROUPS"].split(","))
    return SlurmCluster(
        conf, Path(env["BERTH_SLURM_HOME"]), {"SLURM_CONF": str(conf)}, groups, script_env
    )


def up_htcondor(private: str | None = None) -> HTCondorPool:
    """The shared pool, or with `private` (a name) a pool of its own in the same chroot."""
    script_env: dict[str, str] = {}
    if private:
        script_env = {"BERTH_HTCONDOR_POOL": private, "BERTH_HTCONDOR_PORT": str(free_ports(1))}
    env = _script_env("ensure-htcondor.sh", script_env)
    quotas = {
        name: float(q)
        for name, q in (e.split("=") for e in env["BERTH_HTCONDOR_GROUPS"].split(","))
    }
    return HTCondorPool(
        Path(env["BERTH_HTCONDOR_ROOT"]),
        env["BERTH_HTCONDOR_COLLECTOR"],
        env["BERTH_HTCONDOR_USER"],
        quotas,
        env["BERTH_HTCONDOR_CONFIG"],
        env["BERTH_HTCONDOR_WORKERS"],
        script_env,
    )
