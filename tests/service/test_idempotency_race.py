"""One Idempotency-Key sent several times at once for the last free slot: every request gets the
committed 201 answer, never a 409 for the placement that was committed.

On one replica (the real app, threads), on two replicas sharing one SQLite database, and on two
`berth serve` replicas sharing one PostgreSQL database.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.service.demo import load_fleet_into
from berth.store.repo import Store
from tests.service.conftest import Env, make_env
from tests.service.servers import Server, start, wait_ready
from tests.store.dbs import fresh_pg_database
from tests.store.fleets import small_fleet

FLAVOR = "c3.large"
ROUNDS = 5
AT_ONCE = 5

Post = Callable[[dict[str, Any], str], httpx.Response]


def _fill_one_host(env: Env) -> tuple[str, str]:
    """Fill the host of a first instance (the anchor) with `same_host` placements; the anchor
    and the last instance placed there (deleting it frees the host's last slot)."""
    first = env.post("/v1/placements", {"flavor": FLAVOR}).json()["instances"][0]
    last = None
    for _ in range(200):
        resp = env.post("/v1/placements", {"flavor": FLAVOR, "same_host": [first["id"]]})
        if resp.status_code != 201:
            break
        last = resp.json()["instances"][0]["id"]
    assert last is not None, "the anchor's host took no second instance"
    return first["id"], last


def _race(posts: list[Post], body: dict[str, Any], key: str) -> list[httpx.Response]:
    """Send `body` with `key` from AT_ONCE threads at once, round-robin over `posts`."""
    out: list[httpx.Response] = []
    go = threading.Barrier(AT_ONCE)

    def run(n: int) -> None:
        go.wait()
        resp = posts[n % len(posts)](body, key)
        out.append(resp)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(AT_ONCE)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(out) == AT_ONCE
    return out


def _one_answer(answers: list[httpx.Response]) -> dict[str, Any]:
    assert [r.status_code for r in answers] == [201] * AT_ONCE, [r.text for r in answers]
    bodies = [r.json() for r in answers]
    assert all(b == bodies[0] for b in bodies)
    assert sum(r.headers.get("Idempotent-Replayed") != "true" for r in answers) <= 1
    return bodies[0]


def _rounds(env: Env, posts: list[Post], sync: Callable[[], object]) -> None:
    anchor, last = _fill_one_host(env)
    body = {"flavor": FLAVOR, "same_host": [anchor]}
    for n in range(ROUNDS):
        assert env.delete(f"/v1/instances/{last}").status_code == 204  # one free slot
        sync()
        placed = _one_answer(_race(posts, body, f"race-{n}"))
        (inst,) = placed["instances"]
        rows = env.get("/v1/instances", params={"host": inst["host"]}).json()
        assert sum(r["placement_id"] == placed["id"] for r in rows) == 1
        last = inst["id"]


def _poster(env: Env) -> Post:
    def post(body: dict[str, Any], key: str) -> httpx.Response:
        return env.post("/v1/placements", body, headers={"Idempotency-Key": key})

    return post


def test_one_key_at_once_on_one_replica(env: Env) -> None:
    _rounds(env, [_poster(env)], lambda: None)


def test_one_key_at_once_on_two_replicas(env: Env) -> None:
    """The second replica hears of the first's commits only when it syncs (no background
    thread): its loser fails on the free slot the first took, then finds the committed answer."""
    other = make_env(Path(env.store.engine.url.database or ""), replica_id="r2")
    other.tokens = env.tokens
    try:
        _rounds(env, [_poster(env), _poster(other)], other.replica.sync)
    finally:
        other.store.close()


@pytest.mark.slow
def test_one_key_at_once_on_two_served_replicas_on_postgresql(tmp_path: Path) -> None:
    with fresh_pg_database() as url:
        store = Store.open(url, replica="loader")
        load_fleet_into(store, small_fleet(1), {"c1": "r1"}, now=time.time())
        _, token = store.create_token("race", "admin")
        servers: list[Server] = [start(url, f"r{i}", tmp_path) for i in (1, 2)]
        try:
            wait_ready(servers)
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(timeout=60, headers=headers) as http:

                def post_to(server: Server) -> Post:
                    def post(body: dict[str, Any], key: str) -> httpx.Response:
                        return http.post(
                            server.url + "/v1/placements",
                            json=body,
                            headers={"Idempotency-Key": key},
                        )

                    return post

                posts = [post_to(s) for s in servers]
                # one host: two p8 fit (one per NUMA cell); take one, race for the other
                first = posts[0]({"flavor": "p8"}, "fill")
                assert first.status_code == 201, first.text
                for n in range(ROUNDS):
                    placed = _one_answer(_race(posts, {"flavor": "p8"}, f"race-{n}"))
                    (inst,) = placed["instances"]
                    assert store.counts()["instances"] == 2
                    gone = http.delete(f"{servers[n % 2].url}/v1/instances/{inst['id']}")
                    assert gone.status_code == 204, gone.text
        finally:
            for s in servers:
                s.stop()
            store.close()
