"""Token expiry and agent tokens scoped to their hosts (docs/service.md, "Roles" and "Tokens")."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from berth.cli.main import app as cli
from berth.fleet.demo import DEMO_NOW
from berth.store.db import current_revision, make_engine, upgrade
from berth.store.repo import Store
from tests.service.conftest import Env, make_env
from tests.store.dbs import fresh_pg_database, require_pg

runner = CliRunner()
HOST = "std-az1-000"
OTHER = "std-az1-001"


def _as(env: Env, secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_expired_token_is_refused_on_routes_and_from_the_cache(demo_db: Path, tmp_path: Path):
    shutil.copy(demo_db, tmp_path / "berth.db")
    env = make_env(tmp_path / "berth.db", token_cache_ttl=60.0)
    _, secret = env.store.create_token("short", "reader", ttl=1.0)
    unknown = "berth_unknown"
    assert env.client.get("/v1/hosts", headers=_as(env, secret)).status_code == 200  # now cached
    time.sleep(1.1)
    expired = env.client.get("/v1/hosts", headers=_as(env, secret))
    never = env.client.get("/v1/hosts", headers=_as(env, unknown))
    assert expired.status_code == never.status_code == 401
    assert expired.json() == never.json()
    assert env.store.lookup_token(secret) is None
    listed = {t["name"]: t for t in env.get("/v1/tokens").json()}
    assert listed["short"]["expires_at"] is not None
    assert listed["admin"]["expires_at"] is None


def test_token_api_sets_expiry_and_hosts(env: Env):
    made = env.post(
        "/v1/tokens", {"name": "a", "role": "agent", "hosts": [HOST], "ttl_seconds": 60}
    )
    assert made.status_code == 201, made.text
    assert made.json()["hosts"] == [HOST]
    assert time.time() + 50 < made.json()["expires_at"] < time.time() + 70
    no_hosts = env.post("/v1/tokens", {"name": "a", "role": "agent"})
    assert no_hosts.status_code == 422
    assert "hosts" in no_hosts.text
    bad_ttl = env.post("/v1/tokens", {"name": "a", "role": "reader", "ttl_seconds": 0})
    assert bad_ttl.status_code == 422
    assert "ttl_seconds" in bad_ttl.text


def test_agent_reports_only_for_its_hosts(env: Env):
    _, secret = env.store.create_token("agent", "agent", hosts=(HOST,))
    h = _as(env, secret)
    ok = env.client.post(f"/v1/hosts/{HOST}/reports", json={"timestamp": DEMO_NOW}, headers=h)
    assert ok.status_code == 200, ok.text
    assert ok.json()["applied"] is True
    other = env.client.post(f"/v1/hosts/{OTHER}/reports", json={"timestamp": DEMO_NOW}, headers=h)
    assert other.status_code == 403
    place = env.client.post(
        "/v1/placements", json={"flavor": "c3.large", "project": "p"}, headers=h
    )
    assert place.status_code == 403
    assert env.client.delete(f"/v1/hosts/{HOST}", headers=h).status_code == 403
    for path in ("/v1/hosts", f"/v1/hosts/{HOST}", "/v1/instances", "/v1/tokens"):
        assert env.client.get(path, headers=h).status_code == 403, path
    assert env.client.post(f"/v1/hosts/{HOST}/disable", headers=h).status_code == 403
    assert env.get(f"/v1/hosts/{HOST}").json()["enabled"] is True


def test_cli_creates_expiring_and_agent_tokens(tmp_path: Path):
    data = str(tmp_path / "d")
    assert runner.invoke(cli, ["db", "upgrade", "--data-dir", data]).exit_code == 0
    made = runner.invoke(
        cli,
        [
            "admin",
            "create-token",
            "--role",
            "agent",
            "--host",
            HOST,
            "--ttl",
            "30d",
            "--data-dir",
            data,
        ],
    )
    assert made.exit_code == 0, made.output
    store = Store.open(f"sqlite:///{tmp_path / 'd' / 'berth.db'}")
    row = store.lookup_token(made.stdout.strip().splitlines()[0])
    assert row is not None
    assert row.role == "agent"
    assert row.hosts == (HOST,)
    assert row.expires_at is not None
    assert abs(row.expires_at - row.created_at - 30 * 86400) < 1
    secs = runner.invoke(cli, ["admin", "create-token", "--ttl", "90", "--data-dir", data])
    assert secs.exit_code == 0, secs.output
    for bad in ("0", "-5", "3w", "soon"):
        refused = runner.invoke(cli, ["admin", "create-token", "--ttl", bad, "--data-dir", data])
        assert refused.exit_code == 2, (bad, refused.output)
        assert "--ttl" in refused.output, (bad, refused.output)
    no_host = runner.invoke(cli, ["admin", "create-token", "--role", "agent", "--data-dir", data])
    assert no_host.exit_code == 2
    assert "hosts" in no_host.output


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_upgrades_a_database_at_the_previous_revision(kind: str, tmp_path: Path):
    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            url = f"sqlite:///{tmp_path / 'old.db'}"
        else:
            require_pg()
            url = stack.enter_context(fresh_pg_database())
        _upgrade_from_0003(url)


def _upgrade_from_0003(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade(engine, "0003")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO tokens (id, name, role, project, hash, revoked, created_at) "
                "VALUES ('t1', 'old', 'reader', NULL, :h, false, 1.0)"
            ),
            {"h": "0" * 64},
        )
    upgrade(engine)
    assert current_revision(engine) == "0010"
    store = Store.open(db_url)
    (old,) = [t for t in store.list_tokens() if t.id == "t1"]
    assert old.expires_at is None
    assert old.hosts == ()
    row, _ = store.create_token("agent", "agent", hosts=("h1", "h2"), ttl=5.0)
    assert [t.hosts for t in store.list_tokens() if t.id == row.id] == [("h1", "h2")]
    store.close()
    engine.dispose()
