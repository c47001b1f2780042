"""Engines for the two supported databases, schema upgrades through Alembic, and `Database`:
the handle every part of the store shares (its transactions and the event log's append).

* SQLite (the embedded default): a file in a data directory, WAL journal, `synchronous=NORMAL`,
  a busy timeout, foreign keys on. Write transactions start with `BEGIN IMMEDIATE`, so a writer
  takes the database lock up front instead of failing to upgrade a read lock half-way.
* PostgreSQL through psycopg 3: `postgresql://...` URLs are accepted as they are.

Event ids are unique and increasing in the order they are assigned, but on PostgreSQL two
transactions may commit out of id order (serialising every commit on one lock would serialise
the WAL flushes too). Readers therefore remember the ids below the newest they have seen that
have not appeared yet and ask for them again (`Replica.sync`); what matters for applying events
is the order per host, which the host row lock guarantees. SQLite serialises writers anyway.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from berth.store import schema as t
from berth.store.records import EventRow

DEFAULT_SQLITE_FILE = "berth.db"
UPGRADE_LOCK = 0x42455255
NOTIFY_CHANNEL = "berth_events"
"""The PostgreSQL channel a write notifies ("last event id:replica") to wake other replicas."""

EventItem = tuple[str, str | None, int | None, dict[str, Any]]
"""An event to append: (kind, host, host generation after, payload)."""

_EVENT = insert(t.events).returning(t.events.c.id)

ABORTED_SQLSTATES = frozenset({"40P01", "40001"})
"""deadlock_detected and serialization_failure: PostgreSQL rolled the whole transaction back,
so running it again is safe."""
RETRIES = 3
"""Attempts of a transaction PostgreSQL aborted as a deadlock or serialization failure."""

T = TypeVar("T")
log = logging.getLogger("berth.store")


def aborted_by_conflict(exc: BaseException) -> bool:
    """True when the database aborted the transaction as a deadlock or serialization failure."""
    return getattr(getattr(exc, "orig", exc), "sqlstate", None) in ABORTED_SQLSTATES


def retry_aborted(run: Callable[[], T], attempts: int = RETRIES) -> T:
    """Run a whole transaction (`run`), again up to `attempts` times in all when PostgreSQL
    aborts it as a deadlock or serialization failure (nothing of it was written), after a
    short random pause so the two sides do not collide again."""
    for attempt in range(1, attempts + 1):
        try:
            return run()
        except DBAPIError as exc:
            if attempt == attempts or not aborted_by_conflict(exc):
                raise
            log.info("transaction aborted (%s), attempt %d of %d", exc.orig, attempt, attempts)
            time.sleep(random.uniform(0.005, 0.02) * attempt)
    raise AssertionError("unreachable")


def bump_group(conn: Connection, project: str, gid: str | None) -> int | None:
    """Bump the generation of project's deployment set `gid` (a member joined or left); the new
    one, or None without a set or when the set is gone."""
    if gid is None:
        return None
    gen = conn.execute(
        update(t.deployment_sets)
        .where(t.deployment_sets.c.project == project, t.deployment_sets.c.id == gid)
        .values(generation=t.deployment_sets.c.generation + 1)
        .returning(t.deployment_sets.c.generation)
    ).scalar()
    return None if gen is None else int(gen)


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


class Database:
    """One database and the replica writing to it: the transactions and the event append that
    every resource module of the store (`berth.store.repo`) builds on. Thread-safe: each call
    runs its own transaction."""

    def __init__(self, engine: Engine, replica: str = "local") -> None:
        self.engine = engine
        self.replica = replica
        self.sqlite = is_sqlite(engine)
        self._sqlite_writer = threading.Lock()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        if self.sqlite:  # one writer at a time anyway: queue here, not in SQLite's busy loop
            with self._sqlite_writer, self.engine.begin() as conn:
                yield conn
            return
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self, *, snapshot: bool = False) -> Iterator[Connection]:
        opts: dict[str, Any] = {}
        if self.sqlite:
            opts["sqlite_begin"] = "DEFERRED"
        elif snapshot:
            opts["isolation_level"] = "REPEATABLE READ"
        with self.engine.connect().execution_options(**opts) as conn, conn.begin():
            yield conn

    def _append(self, conn: Connection, items: Sequence[EventItem]) -> list[EventRow]:
        """Append events (kind, host, generation, payload) at the end of a write transaction.

        Ids come from a sequence, so on PostgreSQL concurrent transactions may commit out of id
        order; readers track the ids they have not seen yet (`Replica.sync`). Events of one host
        are always in order: the host's row stays locked from its generation update to commit.
        """
        if not items:
            return []
        now = time.time()
        out = []
        for kind, host, generation, payload in items:
            new_id = conn.execute(
                _EVENT,
                {
                    "ts": now,
                    "kind": kind,
                    "host": host,
                    "generation": generation,
                    "replica": self.replica,
                    "payload": payload,
                },
            ).scalar_one()
            out.append(EventRow(int(new_id), now, kind, host, generation, self.replica, payload))
        if not self.sqlite:  # wake the other replicas: "last id written:replica"
            conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, f"{out[-1].id}:{self.replica}")))
        return out


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
