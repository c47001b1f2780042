"""The store contract suite runs every test on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from berth.store.db import make_engine, upgrade
from berth.store.repo import Store
from tests.store.dbs import fresh_pg_database, truncate_pg


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    with fresh_pg_database() as url:
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'berth.db'}"
    url: str = request.getfixturevalue("pg_url")
    truncate_pg(url)
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url, replica="test")
    yield s
    s.close()
