"""One warm Nova runner per test session (scripts/ensure-nova-venv.sh makes its venv)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.nova.runner import NovaRunner


@pytest.fixture(scope="session")
def nova() -> Iterator[NovaRunner]:
    runner = NovaRunner()
    yield runner
    runner.close()
