"""Session fixtures: the real Slurm cluster and HTCondor pool, started once per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.elastic.batch import HTCondorPool, SlurmCluster, up_htcondor, up_slurm


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    cluster = up_slurm()
    yield cluster
    cluster.cancel_all()


@pytest.fixture(scope="session")
def htcondor_pool() -> Iterator[HTCondorPool]:
    pool = up_htcondor()
    yield pool
    pool.remove_all()
