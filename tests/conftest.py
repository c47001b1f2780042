"""Shared test configuration: a reproducible Hypothesis profile; under xdist, slow tests first.

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the slow tests first (a stable sort, the same on every worker).

    xdist hands tests out in collection order (one at a time with `--maxschedchunk 1`, as the
    Makefile runs it), so the long end-to-end tests start at once on every worker instead of one
    of them ending the run alone.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
