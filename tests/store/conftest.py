"""The store contract suite runs every test on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
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


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite database at the head revision, migrated once per worker: a copy opens in
    ~15 ms where a fresh file runs every migration (~100 ms), the PostgreSQL side's `pg_url`
    is migrated once per session too."""
    path = tmp_path_factory.mktemp("migrated") / "berth.db"
    Store.open(f"sqlite:///{path}", replica="template").close()
    with contextlib.closing(sqlite3.connect(path)) as conn:  # all in the file, none in a -wal
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        db = tmp_path / "berth.db"
        shutil.copy(request.getfixturevalue("migrated_sqlite"), db)
        return f"sqlite:///{db}"
    url: str = request.getfixturevalue("pg_url")
    truncate_pg(url)
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url, replica="test")
    yield s
    s.close()
