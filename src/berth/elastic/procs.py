"""Running the batch systems' commands and stopping their daemons (watchers' and workers' I/O)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence


class BatchCommandError(Exception):
    """A batch command failed; the message names the command and quotes its error output."""


def run(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30.0) -> str:
    """Run `cmd`, return its standard output; raise `BatchCommandError` if it fails."""
    full_env = {**os.environ, **(env or {})}
    try:
        done = subprocess.run(
            list(cmd), env=full_env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BatchCommandError(f"{' '.join(cmd)}: {exc}") from exc
    if done.returncode != 0:
        err = (done.stderr or done.stdout).strip()
        raise BatchCommandError(f"{' '.join(cmd)} exited {done.returncode}: {err}")
    return done.stdout


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_pid(path: str | os.PathLike[str]) -> int | None:
    """The pid in `path` if that process is alive, else None."""
    try:
        with open(path) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and alive(pid) else None


def stop_pid(pid: int, *, grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; reaps the process if it is our child."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if _reaped(pid) or not alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while not _reaped(pid) and alive(pid):
        time.sleep(0.05)


def kill_group(pgid: int) -> None:
    """SIGKILL what is left of process group `pgid` (a stopped daemon's helpers); no error if
    none is."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return


def _reaped(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid
