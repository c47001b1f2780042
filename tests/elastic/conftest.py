"""Session fixtures: a private Slurm cluster and HTCondor pool, started once per test session.

Each session (each xdist worker) gets its own, named after its pid, with its own ports and
state: another test run on the machine — or the shared pool a demo uses — never sees its jobs
or workers. Both are torn down (daemons stopped, files removed) when the session ends; those of
a session that died first are swept when the next one starts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.elastic.batch import (
    HTCondorPool,
    SlurmCluster,
    private_name,
    sweep_stale,
    up_htcondor,
    up_slurm,
)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    sweep_stale()
    cluster = up_slurm(private_name("slurm"))
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def htcondor_pool() -> Iterator[HTCondorPool]:
    pool = up_htcondor(private_name("htc"))
    sweep_stale(pool.root)
    try:
        yield pool
    finally:
        pool.remove_all()
        pool.down()
