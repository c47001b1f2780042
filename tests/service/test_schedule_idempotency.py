"""One Idempotency-Key sent several times at once to `/v1/schedule` for the last free slot of a
region: every request gets the committed 201 answer, never a 409 for the placement that was
committed (docs/service.md, "Idempotency"). Through the real app on the policy demo, on one
replica, on two replicas sharing one SQLite database, and on two replicas on one PostgreSQL
database of which one has not heard of the previous round's release (it catches up and decides
again instead of answering 409).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from berth.service.app import create_app
from berth.service.config import ServiceConfig
from berth.service.policy_topology import load_topology_into
from berth.store.repo import Store
from tests.service.conftest import Env
from tests.service.test_policy import NOW, POLICY, TOPOLOGY, policy_db, policy_env
from tests.store.dbs import fresh_pg_database, require_pg

__all__ = ["policy_db"]

# The demo topology has room for exactly one v.gn3.4xlarge in guangzhou (docs/policy.md).
BODY = {"region": "guangzhou", "flavor": "v.gn3.4xlarge"}
ROUNDS = 5
AT_ONCE = 5


def _race(envs: list[Env], key: str) -> list[httpx.Response]:
    """Send BODY with `key` from AT_ONCE threads at once, round-robin over `envs`."""
    out: list[httpx.Response] = []
    go = threading.Barrier(AT_ONCE)

    def run(n: int) -> None:
        go.wait()
        resp = envs[n % len(envs)].post("/v1/schedule", BODY, headers={"Idempotency-Key": key})
        out.append(resp)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(AT_ONCE)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(out) == AT_ONCE
    return out


def _gpu_instances(env: Env) -> list[dict[str, Any]]:
    rows = env.get("/v1/instances", params={"limit": 10000}).json()
    return [r for r in rows if r["flavor"].startswith(BODY["flavor"])]


def _rounds(envs: list[Env], *, stale: bool = False) -> None:
    """ROUNDS races for the region's last slot, each freed again after its checks. With
    `stale`, only the first replica syncs before a race: the others may not know yet that
    the previous round's instance was released."""
    env = envs[0]
    before = _gpu_instances(env)
    for n in range(ROUNDS):
        for e in envs[:1] if stale else envs:
            e.replica.sync()
        answers = _race(envs, f"sched-race-{n}")
        assert [r.status_code for r in answers] == [201] * AT_ONCE, [r.text for r in answers]
        bodies = [r.json() for r in answers]
        assert all(b == bodies[0] for b in bodies)
        assert sum(r.headers.get("Idempotent-Replayed") != "true" for r in answers) == 1
        placed = bodies[0]["instances"][0]["id"]
        now = _gpu_instances(env)
        assert len(now) == len(before) + 1
        assert placed in {r["id"] for r in now}
        env.replica.sync()
        full = env.post("/v1/schedule", BODY)  # it was the region's last slot
        assert full.status_code == 409, full.text
        assert full.json()["error"]["code"] == "no_valid_host"
        assert env.delete(f"/v1/instances/{placed}").status_code == 204


def test_one_key_at_once_on_one_replica(policy_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "berth.db"
    db.write_bytes(policy_db.read_bytes())
    env = policy_env(db)
    try:
        _rounds([env])
    finally:
        env.store.close()


def test_one_key_at_once_on_two_replicas(policy_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "berth.db"
    db.write_bytes(policy_db.read_bytes())
    envs = [policy_env(db), policy_env(db, replica_id="p2")]
    envs[1].tokens = envs[0].tokens  # one token: the key is scoped by (token, key)
    try:
        _rounds(envs)
    finally:
        for env in envs:
            env.store.close()


def _catch_up_before_refusing(a: Env, b: Env) -> None:
    """`b` has not heard that `a` released the region's last slot: a request with a key
    catches up and decides again (201) instead of answering 409 for a slot that is free."""
    taken = a.post("/v1/schedule", BODY)
    assert taken.status_code == 201, taken.text
    b.replica.sync()
    assert a.delete(f"/v1/instances/{taken.json()['instances'][0]['id']}").status_code == 204
    again = b.post("/v1/schedule", BODY, headers={"Idempotency-Key": "after-release"})
    assert again.status_code == 201, again.text
    assert a.delete(f"/v1/instances/{again.json()['instances'][0]['id']}").status_code == 204
    a.replica.sync()


def _url_env(url: str, replica_id: str, tokens: dict[str, str]) -> Env:
    store = Store.open(url, replica=replica_id)
    config = ServiceConfig(db_url=url, replica_id=replica_id, token_cache_ttl=0, policy=POLICY)
    app = create_app(config, store=store, clock=lambda: NOW, background=False)
    return Env(app, TestClient(app), store, app.state.replica, tokens)


@pytest.mark.slow
def test_one_key_at_once_on_two_stale_replicas_on_postgresql() -> None:
    require_pg()
    with fresh_pg_database() as url:
        loader = Store.open(url, replica="loader")
        load_topology_into(loader, POLICY, TOPOLOGY)
        tokens = {"admin": loader.create_token("admin", "admin")[1]}
        loader.close()
        envs = [_url_env(url, name, tokens) for name in ("p1", "p2")]
        try:
            _catch_up_before_refusing(*envs)
            _rounds(envs, stale=True)
        finally:
            for env in envs:
                env.client.close()
                env.store.close()
