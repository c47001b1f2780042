"""Engines for the two supported databases, and schema upgrades through Alembic.

* SQLite (the embedded default): a file in a data directory, WAL journal, `synchronous=NORMAL`,
  a busy timeout, foreign keys on. Write transactions start with `BEGIN IMMEDIATE`, so a writer
  takes the database lock up front instead of failing to upgrade a read lock half-way.
* PostgreSQL through psycopg 3: `postgresql://...` URLs are accepted as they are.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

DEFAULT_SQLITE_FILE = "berth.db"
UPGRADE_LOCK = 0x42455255


def normalise_url(url: str) -> str:
    """Accept `postgresql://` and `postgres://` for psycopg 3; pass SQLite URLs through."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url.removeprefix("postgres://")
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url


def sqlite_url(data_dir: str | Path) -> str:
    path = Path(data_dir)
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(path / DEFAULT_SQLITE_FILE).resolve()}"


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"


def make_engine(url: str, *, pool_size: int = 10) -> Engine:
    """An engine for `url` with Berth's connection settings."""
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        _configure_sqlite(engine)
        return engine
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"unsupported database URL {url!r}: use sqlite:/// or postgresql://")
    return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_recycle=3600)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
        conn.exec_driver_sql(f"BEGIN {mode}" if mode else "BEGIN")


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(resources.files("berth.store") / "migrations"))
    cfg.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision` (idempotent)."""
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.connect() as conn:
        if not is_sqlite(engine):  # replicas starting together upgrade one at a time
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({UPGRADE_LOCK})")
            conn.commit()
        try:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
            if conn.in_transaction():
                conn.commit()
        finally:
            if not is_sqlite(engine):
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({UPGRADE_LOCK})")
                conn.commit()


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
