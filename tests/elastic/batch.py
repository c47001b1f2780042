"""The real batch systems the elastic tests run against, as the session fixtures hand them out.

`up_slurm()` and `up_htcondor()` run the project's scripts (scripts/ensure-slurm.sh,
scripts/ensure-htcondor.sh: install once, start once; both idempotent) and describe the result.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_names = itertools.count(1)


def _script_env(script: str) -> dict[str, str]:
    subprocess.run([str(ROOT / "scripts" / script), "up"], check=True)
    out = subprocess.run(
        [str(ROOT / "scripts" / script), "env"], check=True, capture_output=True, text=True
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_until(check: Callable[[], bool], timeout: float, what: str, step: float = 0.2) -> float:
    """Poll `check` until true; return the seconds it took, fail naming `what` on timeout."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(step)
    return time.monotonic() - start


@dataclass(frozen=True)
class SlurmCluster:
    """A running slurmctld (no static node); `env` carries SLURM_CONF for every command."""

    conf: Path
    home: Path
    env: dict[str, str]
    groups: tuple[str, ...]  # one partition (and account) per group

    def run(self, *cmd: str) -> str:
        return subprocess.run(
            cmd, env={**os.environ, **self.env}, check=True, capture_output=True, text=True
        ).stdout

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


@dataclass(frozen=True)
class HTCondorPool:
    """A running personal pool (no startd of its own) in a chroot at `root`."""

    root: Path
    collector: str
    user: str
    quotas: dict[str, float] = field(default_factory=dict)  # accounting group -> cores

    def chroot(self, *cmd: str, as_user: bool = False) -> str:
        spec = [f"--userspec={self.user}:{self.user}"] if as_user else []
        return subprocess.run(
            ["chroot", *spec, str(self.root), *cmd], check=True, capture_output=True, text=True
        ).stdout

    def submit(self, group: str, count: int = 1, seconds: float = 1.0) -> int:
        """`count` jobs of accounting group `group`; each writes its machine's BerthVm."""
        name = f"berth-test-{os.getpid()}-{next(_names)}"
        home = f"/home/{self.user}"
        (self.root / home.lstrip("/") / f"{name}.sub").write_text(
            "executable = /bin/sh\n"
            f"arguments = \"-c 'echo $$(BerthVm); sleep {seconds}'\"\n"
            f"accounting_group = {group}\naccounting_group_user = {self.user}\n"
            f"output = {home}/{name}.$(Process).out\nerror = {home}/{name}.$(Process).err\n"
            f"should_transfer_files = NO\nqueue {count}\n"
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
        home = self.root / "home" / self.user
        return [p.read_text().strip() for p in home.glob("berth-test-*.out") if p.stat().st_size]

    def remove_all(self) -> None:
        subprocess.run(
            ["chroot", f"--userspec={self.user}:{self.user}", str(self.root), "condor_rm", "-all"],
            capture_output=True,
            check=False,  # nothing to remove is no error
        )


def up_slurm() -> SlurmCluster:
    env = _script_env("ensure-slurm.sh")
    conf = Path(env["SLURM_CONF"])
    groups = tuple(env["BERTH_SLURM_GROUPS"].split(","))
    return SlurmCluster(conf, Path(env["BERTH_SLURM_HOME"]), {"SLURM_CONF": str(conf)}, groups)


def up_htcondor() -> HTCondorPool:
    env = _script_env("ensure-htcondor.sh")
    quotas = {
        name: float(q)
        for name, q in (e.split("=") for e in env["BERTH_HTCONDOR_GROUPS"].split(","))
    }
    return HTCondorPool(
        Path(env["BERTH_HTCONDOR_ROOT"]),
        env["BERTH_HTCONDOR_COLLECTOR"],
        env["BERTH_HTCONDOR_USER"],
        quotas,
    )
