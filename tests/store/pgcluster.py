"""A private PostgreSQL cluster for tests that stop and start the server.

The shared server on 127.0.0.1:5432 must never be restarted (other test sessions use it), so a
test that needs a database outage runs its own cluster: `initdb` in a temporary directory and
`pg_ctl` on a free port. As root, both run as the `postgres` user (initdb refuses root). Without
`initdb` the tests are skipped locally, but fail under CI (`CI=true`), as `tests/store/dbs.py`
does for the shared server.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"a private PostgreSQL cluster is needed: {why}")
    pytest.skip(f"no private PostgreSQL cluster: {why}")


class PrivateCluster:
    """One PostgreSQL cluster in a temporary directory, on a free loopback port."""

    def __init__(self) -> None:
        initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
        if initdb is None or pg_ctl is None:
            _unavailable("initdb and pg_ctl are not on the PATH")
        self.pg_ctl = str(pg_ctl)
        self.prefix: list[str] = []
        self.root = Path(tempfile.mkdtemp(prefix="berth-pg-"))
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                _unavailable("running as root and there is no postgres user to run initdb as")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        self.data = self.root / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run(str(initdb), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def _run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        log = str(self.root / "server.log")
        self._run(
            self.pg_ctl, "-D", str(self.data), "-l", log, "-o", opts, "-w", "-t", "60", "start"
        )

    def stop(self) -> None:
        """Stop at once (`-m fast`: clients are disconnected, as in a crash or restart)."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def remove(self) -> None:
        subprocess.run(
            [*self.prefix, self.pg_ctl, "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)
