"""One Idempotency-Key sent several times at once to `/v1/schedule` for the last free slot of a
region: every request gets the committed 201 answer, never a 409 for the placement that was
committed (docs/service.md, "Idempotency"). Through the real app on the policy demo, on one
replica and on two replicas sharing one SQLite database.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from tests.service.conftest import Env
from tests.service.test_policy import policy_db, policy_env

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


def _rounds(envs: list[Env]) -> None:
    """ROUNDS races for the region's last slot, each freed again after its checks."""
    env = envs[0]
    before = _gpu_instances(env)
    for n in range(ROUNDS):
        for e in envs:
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
