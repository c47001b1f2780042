"""Authentication before bodies, body-size limits, poisoned report timestamps (docs/service.md)."""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from berth.fleet.demo import DEMO_NOW
from berth.store.repo import Store
from tests.service.conftest import Env
from tests.service.servers import start, wait_ready

REPORT = "/v1/hosts/std-az1-000/reports"


def error(resp: Any) -> dict[str, Any]:
    body = resp.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


# ---------------------------------------------------------------------------- body limits
def test_unauthenticated_v1_request_is_refused_before_its_body(env: Env):
    def body() -> Iterator[bytes]:
        raise AssertionError("the body was read before the 401")
        yield b""  # pragma: no cover

    for headers in ({}, {"Authorization": "Bearer berth_nope"}):
        resp = env.client.post(REPORT, content=body(), headers=headers)
        assert resp.status_code == 401, resp.text
        assert error(resp)["code"] == "unauthenticated"
        assert resp.headers["www-authenticate"] == "Bearer"


def test_body_over_the_limit_is_413_by_length_and_by_chunks(env: Env):
    limit = env.app.state.config.max_body_bytes
    big = b"x" * (limit + 1)
    resp = env.client.post(REPORT, content=big, headers=env.h("operator"))
    assert resp.status_code == 413, resp.text
    assert error(resp)["code"] == "payload_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
        for _ in range(limit // 65536 + 2):
            yield b" " * 65536

    resp = env.client.post(REPORT, content=chunks(), headers=env.h("operator"))
    assert resp.status_code == 413, resp.text
    assert error(resp)["code"] == "payload_too_large"
    # a body within the limit still works, and nothing was recorded by the refusals
    ok = env.post(REPORT, {"timestamp": DEMO_NOW}, "operator")
    assert ok.status_code == 200, ok.text


def test_unauthenticated_routes_outside_v1_still_answer(env: Env):
    assert env.client.get("/healthz").status_code == 200


def _exchange(url: str, head: str, body_chunks: int = 0) -> bytes:
    """Send `head`, then up to `body_chunks` chunks of 64 KiB while the server lets us; return
    what the server answered (it must answer before the body is complete)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.encode())
        sock.settimeout(0.2)
        answer = b""
        for _ in range(max(body_chunks, 1)):
            try:
                answer = sock.recv(65536)
                if answer:
                    break
            except TimeoutError:
                pass
            if body_chunks:
                chunk = b" " * 65536
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        sock.settimeout(10)
        return answer or sock.recv(65536)


@pytest.mark.slow
def test_real_server_answers_before_a_huge_body_is_sent(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'berth.db'}"
    store = Store.open(url)
    token = store.create_token("op", "operator")[1]
    store.close()
    server = start(url, "guard", tmp_path)
    try:
        wait_ready([server])
        huge = "POST /v1/hosts/h/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        # 400 MB announced, not one byte sent: the answer must come anyway
        answer = _exchange(server.url, huge + "Content-Length: 400000000\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 401"), answer
        authed = huge + f"Authorization: Bearer {token}\r\n"
        answer = _exchange(server.url, authed + "Content-Length: 400000000\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 413"), answer
        # chunked: refused once 4 MiB have arrived, long before the 6,400 chunks (400 MB) offered
        answer = _exchange(server.url, authed + "Transfer-Encoding: chunked\r\n\r\n", 6400)
        assert answer.startswith(b"HTTP/1.1 413"), answer
    finally:
        server.stop()


# ---------------------------------------------------------------------------- report timestamps
def test_far_future_report_is_refused_and_changes_nothing(env: Env):
    before = env.get("/v1/hosts/std-az1-000").json()
    resp = env.post(REPORT, {"timestamp": 16725225600.0}, "operator")  # the year 2500
    assert resp.status_code == 422, resp.text
    assert error(resp)["field"] == "timestamp"
    assert env.get("/v1/hosts/std-az1-000").json() == before
    skew = env.app.state.config.max_clock_skew
    ok = env.post(REPORT, {"timestamp": DEMO_NOW + skew / 2}, "operator")
    assert ok.status_code == 200, ok.text
    assert ok.json()["applied"], ok.text
    later = env.post(REPORT, {"timestamp": DEMO_NOW + skew}, "operator")
    assert later.json()["applied"], later.text


def _table_beat(env: Env, host: str) -> float:
    view = env.replica.clusters[env.replica.host_cluster[host]]
    return float(view.table.heartbeat[view.table.index[host]])


def test_a_far_future_heartbeat_stored_earlier_is_healed(env: Env):
    """A year-2500 heartbeat written before reports were checked: on load the host counts as
    down (not alive until 2500), it stops no replica's heartbeat refresh, and the host's next
    real report replaces it (and every later one counts again)."""
    host, other = "std-az1-000", "dpdk-az1-000"
    with env.store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE hosts SET last_heartbeat = 16725225600.0, report_ts = 16725225600.0 "
                "WHERE name = :h"
            ),
            {"h": host},
        )
    env.replica.reload()
    assert math.isnan(_table_beat(env, host))  # no valid heartbeat: down, not alive for ages
    env.store.report(other, DEMO_NOW + 1, None)  # another host's beat still reaches the cache
    env.replica.refresh_heartbeats()
    assert _table_beat(env, other) == DEMO_NOW + 1
    first = env.post(
        f"/v1/hosts/{host}/reports", {"timestamp": DEMO_NOW - 10, "instances": []}, "operator"
    )
    assert first.status_code == 200, first.text
    assert first.json()["applied"], first.text
    assert first.json()["last_heartbeat"] == DEMO_NOW - 10
    assert _table_beat(env, host) == DEMO_NOW - 10
    assert env.get(f"/v1/hosts/{host}").json()["last_heartbeat"] == DEMO_NOW - 10
    older = env.post(f"/v1/hosts/{host}/reports", {"timestamp": DEMO_NOW - 20}, "operator")
    assert not older.json()["applied"]  # ordinary ordering again
    later = env.post(f"/v1/hosts/{host}/reports", {"timestamp": DEMO_NOW}, "operator")
    assert later.json()["applied"]
    assert _table_beat(env, host) == DEMO_NOW


def test_simulated_agents_heal_a_far_future_heartbeat(env: Env):
    host = "std-az1-000"
    with env.store.engine.begin() as conn:
        conn.execute(
            text("UPDATE hosts SET last_heartbeat = 16725225600.0 WHERE name = :h"), {"h": host}
        )
    touched = env.store.touch_heartbeats(DEMO_NOW + 30, 60.0, max_skew=300.0)
    assert touched > 1  # the freshest valid heartbeat, not 2500, sets which hosts are alive
    assert env.store.get_host(host).host.last_heartbeat == DEMO_NOW + 30


# ---------------------------------------------------------------------------- tenant isolation
def _place(env: Env, who: str, **body: Any) -> Any:
    return env.post("/v1/placements", {"flavor": "c3.large", "count": 1, **body}, who)


def _same_refusal(a: Any, b: Any) -> dict[str, Any]:
    """Two refusals that must not tell a foreign object from a missing one."""
    assert a.status_code == b.status_code, (a.text, b.text)
    ea, eb = error(a), error(b)
    assert (ea["code"], ea["field"], ea["details"]) == (eb["code"], eb["field"], eb["details"])
    return ea


def test_hints_treat_another_projects_instance_as_missing(env: Env):
    mine = _place(env, "alpha")
    assert mine.status_code == 201, mine.text
    theirs = mine.json()["instances"][0]
    before = len(env.get("/v1/instances", "beta").json())
    for hint in ("same_host", "different_host"):
        foreign = _place(env, "beta", **{hint: [theirs["id"]]})
        missing = _place(env, "beta", **{hint: ["i-0000000000000000"]})
        err = _same_refusal(foreign, missing)
        assert foreign.status_code == 422
        assert err["field"] == f"{hint}[0]"
        assert theirs["host"] not in foreign.text
    assert len(env.get("/v1/instances", "beta").json()) == before  # the refusals placed nothing
    for path in (f"/v1/instances/{theirs['id']}", f"/v1/placements/{mine.json()['id']}"):
        nope = path.rsplit("/", 1)[0] + "/x-0000000000000000"
        _same_refusal(env.get(path, "beta"), env.get(nope, "beta"))
    gone = env.delete(f"/v1/instances/{theirs['id']}", "beta")
    _same_refusal(gone, env.delete("/v1/instances/i-0000000000000000", "beta"))
    # the same project, and an operator placing for any project, may still name it
    again = _place(env, "alpha", same_host=[theirs["id"]])
    assert again.status_code == 201, again.text
    assert again.json()["instances"][0]["host"] == theirs["host"]
    op = _place(env, "operator", project="project-2", same_host=[theirs["id"]])
    assert op.status_code == 201, op.text
    assert op.json()["instances"][0]["host"] == theirs["host"]


def test_another_projects_deployment_set_looks_missing(env: Env):
    made = env.post("/v1/deployment-sets", {"id": "alpha-set", "policy": "affinity"}, "alpha")
    assert made.status_code == 201, made.text
    foreign = _place(env, "beta", deployment_set="alpha-set")
    missing = _place(env, "beta", deployment_set="no-such-set")
    _same_refusal(foreign, missing)
    for how in (env.get, env.delete):
        _same_refusal(
            how("/v1/deployment-sets/alpha-set", "beta"), how("/v1/deployment-sets/nope", "beta")
        )
    assert "alpha-set" not in env.get("/v1/deployment-sets", "beta").text
