"""Shared test configuration: a reproducible Hypothesis profile; under xdist, worker groups
and slow tests first.

`derandomize=True` makes every run explore the same examples (CI reproducibility); set
HYPOTHESIS_PROFILE=explore locally to search with fresh random examples.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "explore",
    deadline=None,
    max_examples=500,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def _worker_group(item: pytest.Item) -> str | None:
    """The tests one xdist worker runs in turn (`--dist loadgroup`, as the Makefile runs them).

    `openstack`: they take turns on the shared stack (tests/openstack/conftest.py's lock), so
    on two workers one would wait for the other's lock, idle. `slurm`, `htcondor`: each worker
    that runs one starts a private cluster of its own (tests/elastic/conftest.py), once. `nova`:
    one Nova runner, and the coverage check runs in the process where the property did.
    """
    if item.get_closest_marker("openstack") is not None:
        return "openstack"
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("system") if callspec is not None else None  # tests/elastic
    if "htcondor_pool" in names or param == "htcondor":
        return "htcondor"
    if "slurm_cluster" in names or param == "slurm":
        return "slurm"
    if "nova" in names:
        return "nova"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the `xdist_group` marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups of tests for one worker each (`_worker_group`); under pytest-xdist, the slow tests
    first (a stable sort, the same on every worker).

    xdist hands the groups out first, largest first (`--dist loadgroup` orders work units by
    their number of tests), then the other tests one at a time in collection order, so the
    long end-to-end tests start at once on every worker instead of one of them ending the run
    alone.
    """
    for item in items:
        group = _worker_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
