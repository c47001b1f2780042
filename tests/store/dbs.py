"""Databases for tests: a fresh SQLite file, or a uniquely named PostgreSQL database.

PostgreSQL is found at `BERTH_TEST_PG` (default: postgresql://postgres@127.0.0.1:5432/postgres,
the server `scripts/ensure-postgres.sh` makes available). Each test session creates its own
database `berth_test_<pid>_<random>` and drops it at the end. When the server is unreachable the
PostgreSQL tests are skipped locally, but fail under CI (`CI=true`): they must run there.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, create_engine, text

from berth.store import schema
from berth.store.db import normalise_url

ADMIN_URL = os.environ.get("BERTH_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def _admin_engine() -> Engine:
    return create_engine(normalise_url(ADMIN_URL), isolation_level="AUTOCOMMIT")


def pg_available() -> str | None:
    """None when PostgreSQL answers, else why not."""
    try:
        engine = _admin_engine()
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:
        return str(exc).splitlines()[0]


def require_pg() -> None:
    why = pg_available()
    if why is None:
        return
    message = f"PostgreSQL unavailable at {ADMIN_URL}: {why}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + " (CI must run the PostgreSQL tests: see scripts/ensure-postgres.sh)")
    pytest.skip(message)


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """Create a uniquely named database; yield its URL; drop it afterwards."""
    require_pg()
    name = f"berth_test_{os.getpid()}_{secrets.token_hex(4)}"
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    base = ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                {"n": name},
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


TABLES = ", ".join(table.name for table in schema.metadata.sorted_tables)
"""Every table of the schema (Alembic's version table is not in it): a table a migration adds
is emptied between tests without a list to keep up to date."""


def truncate_pg(url: str) -> None:
    engine = create_engine(normalise_url(url))
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE"))
    engine.dispose()
