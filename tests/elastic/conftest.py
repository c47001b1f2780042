"""Session fixtures: a private Slurm cluster and HTCondor pool, started once per test session.

Each session (each xdist worker) gets its own, named after it, with its own ports and state:
another test run on the machine — or the shared pool a demo uses — never sees its jobs or
workers. Both are torn down (daemons stopped, files removed) when the session ends.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.elastic.batch import HTCondorPool, SlurmCluster, up_htcondor, up_slurm


def _private_name(kind: str) -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"{kind}-{worker}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    cluster = up_slurm(_private_name("slurm"))
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def htcondor_pool() -> Iterator[HTCondorPool]:
    pool = up_htcondor(_private_name("htc"))
    try:
        yield pool
    finally:
        pool.remove_all()
        pool.down()
