"""A private PostgreSQL cluster for tests that must stop or restart the database server.

The shared server (tests/store/dbs.py) serves every test running in parallel, so it is never
stopped; a test that takes PostgreSQL down starts its own cluster with `initdb` and `pg_ctl` in a
temporary directory, on a free loopback port, with trust authentication, and removes it at the
end. Without `initdb` the test is skipped locally but fails under CI (`CI=true`), as the shared
PostgreSQL tests do. As root (PostgreSQL refuses to run as root) the cluster runs as the
`postgres` user, or `nobody` when there is none.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.service.servers import free_port


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    return None


@dataclass
class PgCluster:
    """One running cluster: its data directory, port and log; `url` is its `postgres` database."""

    root: Path
    port: int
    user: str | None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str, timeout: float = 60) -> None:
        subprocess.run(
            ["pg_ctl", "-D", str(self.data), *args],
            check=True,
            capture_output=True,
            timeout=timeout,
            user=self.user,
        )

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        self._ctl("-l", str(self.log), "-o", opts, "-w", "-t", "60", "start", timeout=90)

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "-w", "-t", "60", "stop", timeout=90)

    def restart(self, down_for: float) -> float:
        """Stop the server, keep it down `down_for` seconds, start it; the seconds it was down."""
        began = time.monotonic()
        self.stop()
        time.sleep(down_for)
        self.start()
        return time.monotonic() - began


def require_initdb() -> None:
    if shutil.which("initdb") and shutil.which("pg_ctl"):
        return
    message = "initdb/pg_ctl not on the PATH: cannot start a private PostgreSQL cluster"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + " (CI must run the chaos test: install the PostgreSQL server)")
    pytest.skip(message)


@contextlib.contextmanager
def private_cluster() -> Iterator[PgCluster]:
    """initdb a cluster in a fresh temporary directory, start it, yield it; stop and remove."""
    require_initdb()
    root = Path(tempfile.mkdtemp(prefix="berth-pg-"))
    user = _run_as()
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    cluster = PgCluster(root, free_port(), user)
    try:
        subprocess.run(
            ["initdb", "-D", str(cluster.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            timeout=120,
            user=user,
        )
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
