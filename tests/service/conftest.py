"""A service on the demo topology (SQLite from a session template) and a token per role."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from berth.fleet.demo import DEMO_NOW
from berth.service.app import create_app
from berth.service.config import ServiceConfig
from berth.service.demo import load_demo
from berth.service.replica import Replica
from berth.store.repo import Store
from tests.store.conftest import db_url, migrated_sqlite, pg_url

__all__ = ["Env", "db_url", "make_env", "migrated_sqlite", "pg_url"]


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "berth.db"
    store = Store.open(f"sqlite:///{path}")
    load_demo(store, now=DEMO_NOW)
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


@dataclass
class Env:
    app: FastAPI
    client: TestClient
    store: Store
    replica: Replica
    tokens: dict[str, str]

    def h(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def get(self, path: str, who: str = "admin", **kw):
        return self.client.get(path, headers={**self.h(who), **kw.pop("headers", {})}, **kw)

    def post(self, path: str, body: object = None, who: str = "admin", **kw):
        return self.client.post(
            path, json=body, headers={**self.h(who), **kw.pop("headers", {})}, **kw
        )

    def delete(self, path: str, who: str = "admin"):
        return self.client.delete(path, headers=self.h(who))


def make_env(db_path: Path, *, replica_id: str = "r1", token_cache_ttl: float = 0.0) -> Env:
    store = Store.open(f"sqlite:///{db_path}", replica=replica_id)
    config = ServiceConfig(
        db_url=str(store.engine.url), replica_id=replica_id, token_cache_ttl=token_cache_ttl
    )
    app = create_app(config, store=store, clock=lambda: DEMO_NOW, background=False)
    tokens = {
        "admin": store.create_token("admin", "admin")[1],
        "operator": store.create_token("op", "operator")[1],
        "reader": store.create_token("ro", "reader")[1],
        "alpha": store.create_token("alpha", "tenant", "project-1")[1],
        "beta": store.create_token("beta", "tenant", "project-2")[1],
    }
    return Env(app, TestClient(app), store, app.state.replica, tokens)


@pytest.fixture
def env(demo_db: Path, tmp_path: Path) -> Iterator[Env]:
    db = tmp_path / "berth.db"
    shutil.copy(demo_db, db)
    e = make_env(db)
    yield e
    e.store.close()
