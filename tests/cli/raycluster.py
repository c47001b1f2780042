"""A one-node Ray cluster for tests: `ray start --head --block` in a session of its own, on
loopback ports, with 2 CPUs, a 100 MB object store and no dashboard; stopped by SIGTERM to that
one process, then checked to have left no process of its session behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
OBJECT_STORE_BYTES = 100 * 2**20
START_TIMEOUT_S = 120.0

ENV = {
    # Ray takes 127.0.0.1 to mean "this machine's address on the network" unless it is told it
    # runs one node alone: keep every port on loopback
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # SIGTERM stops the node at once instead of draining it for up to 30 s
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}


WORKER_PORTS = range(10_002, 20_000)
"""Ray's default range for its worker processes: `ray start` refuses a port chosen inside it."""


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in WORKER_PORTS:
            return port


@dataclass
class RayCluster:
    proc: subprocess.Popen[bytes]
    address: str
    """The GCS address, ``127.0.0.1:PORT``: a driver on this node connects to it."""
    client_address: str
    """The Ray Client address, ``ray://127.0.0.1:PORT``."""
    temp_dir: Path

    def log(self) -> str:
        return (self.temp_dir / "ray-start.log").read_text(errors="replace")[-3000:]


def start() -> RayCluster:
    temp_dir = Path(tempfile.mkdtemp(prefix="berth-ray-"))  # short: Ray's socket paths fit
    gcs, client = free_port(), free_port()
    command = [RAY, "start", "--head", "--block", "--disable-usage-stats"]
    command += ["--port", str(gcs), "--ray-client-server-port", str(client)]
    command += ["--dashboard-agent-listen-port", str(free_port())]
    command += ["--num-cpus", "2", "--object-store-memory", str(OBJECT_STORE_BYTES)]
    command += ["--include-dashboard", "false", "--temp-dir", str(temp_dir)]
    with (temp_dir / "ray-start.log").open("wb") as log:
        proc = subprocess.Popen(
            command,
            env={**os.environ, **ENV},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cluster = RayCluster(proc, f"127.0.0.1:{gcs}", f"ray://127.0.0.1:{client}", temp_dir)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            output = cluster.log()
            stop(cluster)
            raise RuntimeError(f"ray start exited with {proc.returncode}:\n{output}")
        try:  # the client server starts last: the node is up when it answers
            socket.create_connection(("127.0.0.1", client), timeout=1).close()
            return cluster
        except OSError:
            if time.monotonic() > deadline:
                stop(cluster)
                raise RuntimeError(f"Ray did not start in {START_TIMEOUT_S} s") from None
            time.sleep(0.2)


def session_processes(sid: int) -> list[int]:
    """The live (not zombie) processes of session `sid`: all that `ray start` started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _ppid, _pgrp, session = stat.rpartition(")")[2].split()[:4]
        if int(session) == sid and state != "Z":
            found.append(int(entry.name))
    return found


def stop(cluster: RayCluster, grace_s: float = 30.0) -> list[int]:
    """SIGTERM to `ray start` (it stops the processes it started); returns the processes of its
    session still alive after `grace_s`, which are then killed by id."""
    proc = cluster.proc
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    deadline = time.monotonic() + grace_s
    while (left := session_processes(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)
    return left
