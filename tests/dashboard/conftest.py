"""The dashboard on the real app (TestClient, demo topology) with a logged-in client per role."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import Env, demo_db, make_env

__all__ = ["demo_db"]


def _env(demo_db: Path, where: Path) -> Iterator[Env]:
    db = where / "berth.db"
    shutil.copy(demo_db, db)
    e = make_env(db)
    yield e
    e.store.close()


@pytest.fixture(scope="module")
def env(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One app per test module (building one takes seconds): tests add placements and plans
    but check only figures they read at one moment, or cursors from before their own writes."""
    yield from _env(demo_db, tmp_path_factory.mktemp("dashboard"))


@pytest.fixture
def fresh_env(demo_db: Path, tmp_path: Path) -> Iterator[Env]:
    """An app of its own, for a test that changes the topology."""
    yield from _env(demo_db, tmp_path)


def login(env: Env, who: str) -> TestClient:
    """A client of the same app whose cookie holds `who`'s token (through the login form)."""
    client = TestClient(env.app)
    resp = client.post("/dashboard/login", data={"token": env.tokens[who]}, follow_redirects=False)
    assert resp.status_code == 303, resp.text
    return client
