"""Several `berth serve` replicas on one PostgreSQL, one killed with SIGKILL mid-load.

Clients place into a nearly full fleet, half of the requests into anti-affinity deployment sets,
each request with its own Idempotency-Key, retried on another replica when its replica dies or
answers 5xx. Afterwards, from the database rows alone: no host is over-committed, no deployment
set has two members on a host, every acknowledged placement exists, and no instance exists that
was not acknowledged. Every loop is bounded; the test stops by itself.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import httpx
import pytest

from berth.service.demo import load_fleet_into
from berth.store.audit import audit
from berth.store.repo import GroupRow, Store
from tests.service.servers import Server, start, wait_ready
from tests.store.dbs import fresh_pg_database
from tests.store.fleets import small_fleet

REPLICAS = 3
CLIENTS = 6
REQUESTS_PER_CLIENT = 30
SETS = 4


def prepare(url: str) -> str:
    store = Store.open(url, replica="loader")
    now = time.time()
    fleet = small_fleet(12, zones=("c1", "c2"))
    load_fleet_into(store, fleet, {"c1": "r1", "c2": "r1"}, now=now)
    for i in range(SETS):
        store.add_group(GroupRow(f"set-{i}", "default", "anti-affinity", 1, None, 0))
    _, token = store.create_token("load", "admin")
    store.close()
    return token


def client(
    n: int,
    servers: list[Server],
    token: str,
    acked: dict[str, str],
    outcomes: list[str],
    lock: threading.Lock,
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=15) as http:
        for i in range(REQUESTS_PER_CLIENT):
            body: dict[str, object] = {"flavor": "p4" if i % 3 else "p8", "seed": n * 1000 + i}
            if i % 2 == 0:
                body["deployment_set"] = f"set-{(n + i) % SETS}"
            key = f"client-{n}-req-{i}"
            outcome = "gave up"
            for attempt in range(12):  # bounded retries, rotating replicas
                server = servers[(n + i + attempt) % len(servers)]
                try:
                    resp = http.post(
                        server.url + "/v1/placements",
                        json=body,
                        headers={**headers, "Idempotency-Key": key},
                    )
                except httpx.HTTPError:
                    time.sleep(0.05)
                    continue
                if resp.status_code >= 500:
                    with lock:
                        outcomes.append(f"HTTP {resp.status_code}")
                    time.sleep(0.05)
                    continue
                if resp.status_code == 201:
                    with lock:
                        for inst in resp.json()["instances"]:
                            acked[inst["id"]] = key
                    outcome = "placed"
                else:
                    outcome = resp.json()["error"]["code"]
                break
            with lock:
                outcomes.append(outcome)


@pytest.mark.slow
def test_replicas_survive_a_sigkill_without_double_booking(tmp_path: Path):
    with fresh_pg_database() as url:
        token = prepare(url)
        store = Store.open(url, replica="checker", migrate=False)
        prefilled = {i.id for i in store.list_instances()}
        servers = [
            start(url, f"r{i}", tmp_path, "--poll-interval", "0.2", "--service-down-time", "3600")
            for i in range(REPLICAS)
        ]
        try:
            wait_ready(servers)
            acked: dict[str, str] = {}
            outcomes: list[str] = []
            lock = threading.Lock()
            threads = [
                threading.Thread(
                    target=client, args=(n, servers, token, acked, outcomes, lock), daemon=True
                )
                for n in range(CLIENTS)
            ]
            for t in threads:
                t.start()
            total = CLIENTS * REQUESTS_PER_CLIENT
            for _ in itertools.repeat(None, 600):  # kill r0 about a third of the way in
                if len(outcomes) >= total // 3:
                    break
                time.sleep(0.05)
            done_at_kill = len(outcomes)
            servers[0].kill()
            for t in threads:
                t.join(timeout=300)
            assert not any(t.is_alive() for t in threads)
        finally:
            for s in servers:
                s.stop()

        print(
            f"killed r0 after {done_at_kill}/{total} answers; outcomes:",
            {o: outcomes.count(o) for o in set(outcomes)},
        )
        assert done_at_kill < total  # the kill landed mid-load
        assert not [o for o in outcomes if o.startswith("HTTP")]  # no 5xx, ever
        assert len(outcomes) == total
        for s in servers[1:]:
            assert "Traceback" not in s.log.read_text()
        assert "gave up" not in outcomes
        assert outcomes.count("placed") > 20
        assert "no_valid_host" in outcomes  # the fleet really filled up
        assert audit(store) == []
        instances = {i.id: i for i in store.list_instances(limit=100_000)}
        new = set(instances) - prefilled
        assert new == set(acked)  # every ack exists; nothing exists without an ack
        for gid in (f"set-{i}" for i in range(SETS)):
            hosts = [i.host for i in instances.values() if i.server_group == gid]
            assert len(hosts) == len(set(hosts))
        store.close()
