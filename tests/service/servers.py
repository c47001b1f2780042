"""Start `berth serve` replicas as separate processes on loopback ports, and stop them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

BERTH = str(Path(sys.executable).with_name("berth"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    url: str
    name: str
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no cleanup, mid-request."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def start(db_url: str, name: str, logdir: Path, *extra: str) -> Server:
    port = free_port()
    log = logdir / f"{name}.log"
    proc = subprocess.Popen(
        [
            BERTH,
            "serve",
            "--db",
            db_url,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--replica-id",
            name,
            *extra,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return Server(proc, f"http://127.0.0.1:{port}", name, log)


def wait_ready(servers: list[Server], timeout: float = 120.0) -> None:
    """Until every server answers /healthz. The bound is generous (a ready server returns at
    once): on a loaded 2-core machine a `berth serve` start was seen to take over 60 s."""
    deadline = time.monotonic() + timeout
    for s in servers:
        while True:
            if not s.alive():
                raise RuntimeError(f"{s.name} exited: {s.log.read_text()[-2000:]}")
            try:
                if httpx.get(s.url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{s.name} not ready: {s.log.read_text()[-2000:]}")
            time.sleep(0.1)
