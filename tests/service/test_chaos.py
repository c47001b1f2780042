"""Chaos: three `berth serve` replicas on a private PostgreSQL, one SIGKILLed, the database
restarted, under mixed placements and deletes; then every invariant, checked from the rows.

Client threads place (into anti-affinity sets, affinity sets naming either cluster, or no set)
and delete their own instances, each request with its own Idempotency-Key; some first attempts
are cut short by a forced client time-out and retried with the same key on another replica, as
are answers 503 and refused connections. Mid-run, once every replica LISTENs, one replica is
SIGKILLed; a second later PostgreSQL is stopped for a few seconds and started again (a private
cluster: the shared server is never touched, tests/service/pgcluster.py), and then the killed
replica is started again; the load runs on throughout, on the replicas that are up, and for a
few seconds more once all are back. Afterwards, from the database rows
(`berth.store.audit`) and the replicas' answers:

* capacity: no NUMA cell, device or host is over-committed;
* anti-affinity: no set has more than `max_per_host` members on a host;
* affinity: every affinity set's members share one host;
* set-size: no set is over its `max_size`;
* acknowledged: every acknowledged placement not acknowledged as deleted exists on its host;
* unacknowledged: no instance exists that was not acknowledged;
* idempotent-retry: no key's stored (committed) answer differs from what its client was told;
* replicas: every live replica reports each host's usage exactly as the rows give it;
* listen: every replica is subscribed (LISTEN) to change notifications again after the restart.

Every loop is bounded in count and time; traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import text

from berth.service.config import ServiceConfig
from berth.service.demo import load_fleet_into
from berth.service.replica import Replica
from berth.store.audit import audit_by_invariant, usage_from_rows
from berth.store.repo import GroupRow, Store
from tests.service.servers import Server, start, wait_ready
from tests.store.fleets import NOW, claim_one, small_fleet
from tests.store.pgcluster import PgCluster, private_cluster

# Invariants that fail on main for a known, open reason: a failure of one of these alone makes
# the test xfail with the reason (a pass still passes). Remove an entry once its fix is merged;
# BERTH_CHAOS_STRICT=1 ignores them all.
KNOWN_OPEN: dict[str, str] = {}

REPLICAS = 3
CLIENTS = 3
WARM_UP_SECONDS = 2.0  # load before the SIGKILL
KILLED_SECONDS = 1.0  # load on the other replicas before the database goes down
AFTER_SECONDS = 3.0  # load once the database and the killed replica are back
MAX_LOAD_SECONDS = 120.0  # the clients stop by then whatever happens
OPS_PER_CLIENT = 400
OP_DEADLINE = 25.0  # one operation's retries, across the database outage
PG_DOWN_SECONDS = 4.0  # the outage that used to lose LISTEN for good: 4 s or more
SETS = 3
CLUSTERS = ("c1", "c2")
READY_SECONDS = 120.0  # a replica's start-up, on a machine busy with the parallel suite
SERVE_ARGS = ("--poll-interval", "0.5", "--service-down-time", "3600")


@dataclass
class Ledger:
    """What the clients were told, shared by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, str] = field(default_factory=dict)  # instance -> key
    told: dict[str, int] = field(default_factory=dict)  # key -> final status (0: gave up)
    deleted: set[str] = field(default_factory=set)
    unsure: set[str] = field(default_factory=set)  # deletes whose outcome is unknown
    vanished: set[str] = field(default_factory=set)  # acked, then 404 at a first delete
    statuses: list[int] = field(default_factory=list)
    timeouts: int = 0


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    with private_cluster() as cluster:
        yield cluster


def prepare(url: str) -> tuple[str, set[str]]:
    """Load the fleet and the sets; (an admin token, the instances the fleet starts with)."""
    store = Store.open(url, replica="loader")
    fleet = small_fleet(6, zones=CLUSTERS)
    load_fleet_into(store, fleet, dict.fromkeys(CLUSTERS, "r1"), now=time.time())
    for i in range(SETS):
        store.add_group(GroupRow(f"anti-{i}", "default", "anti-affinity", 1, 5, 0))
        store.add_group(GroupRow(f"aff-{i}", "default", "affinity", 1, 3, 0))
    _, token = store.create_token("chaos", "admin")
    prefilled = {i.id for i in store.list_instances(limit=100_000)}
    store.close()
    return token, prefilled


def send(
    servers: list[Server], ledger: Ledger, rng: random.Random, method: str, path: str, **kw: Any
) -> tuple[int, Any, bool]:
    """(final status, its body, whether it took more than one attempt); status 0: gave up."""
    deadline = time.monotonic() + OP_DEADLINE
    attempt = 0
    while time.monotonic() < deadline:
        server = servers[rng.randrange(len(servers))]
        # 40% of the first attempts time out on purpose, mostly while being served
        timeout = rng.uniform(0.01, 0.3) if attempt == 0 and rng.random() < 0.4 else 10.0
        attempt += 1
        try:
            resp = httpx.request(method, server.url + path, timeout=timeout, **kw)
        except httpx.TimeoutException:
            with ledger.lock:
                ledger.timeouts += 1
            continue
        except httpx.HTTPError:
            time.sleep(0.2)
            continue
        with ledger.lock:
            ledger.statuses.append(resp.status_code)
        if resp.status_code == 503:
            time.sleep(0.2)
            continue
        return resp.status_code, resp.json() if resp.content else None, attempt > 1
    return 0, None, attempt > 1


def client(
    n: int, servers: list[Server], token: str, ledger: Ledger, stop: threading.Event
) -> None:
    rng = random.Random(n)
    auth = {"Authorization": f"Bearer {token}"}
    mine: list[str] = []
    for i in range(OPS_PER_CLIENT):
        if stop.is_set():
            return
        if mine and rng.random() < 0.3:
            victim = mine.pop(rng.randrange(len(mine)))
            status, _, retried = send(
                servers, ledger, rng, "DELETE", f"/v1/instances/{victim}", headers=auth
            )
            with ledger.lock:
                if status == 204 or (status == 404 and retried):
                    ledger.deleted.add(victim)
                else:
                    if status == 404:  # gone before this client's first attempt
                        ledger.vanished.add(victim)
                    ledger.unsure.add(victim)
            continue
        body: dict[str, Any] = {"flavor": "p4" if i % 3 else "p8", "seed": n * 1000 + i}
        kind = rng.randrange(3)
        if kind == 0:
            body["deployment_set"] = f"anti-{rng.randrange(SETS)}"
        elif kind == 1:
            body["deployment_set"] = f"aff-{rng.randrange(SETS)}"
            body["cluster"] = rng.choice(CLUSTERS)
        key = f"chaos-{n}-{i}"
        headers = {**auth, "Idempotency-Key": key}
        status, answer, _ = send(
            servers, ledger, rng, "POST", "/v1/placements", json=body, headers=headers
        )
        with ledger.lock:
            ledger.told[key] = status
            if status == 201:
                for inst in answer["instances"]:
                    ledger.acked[inst["id"]] = key
                    mine.append(inst["id"])


def chaos(pg: PgCluster, servers: list[Server], logdir: Path, stop: threading.Event) -> float:
    """Mid-load: SIGKILL replica r0; a second later restart PostgreSQL; then start r0 again
    (its start-up, the slowest step, overlaps neither the outage nor another wait); once it
    answers let the load run on a few seconds, then stop it. The seconds PostgreSQL was down.
    The replicas that live through the outage must LISTEN again (checked after the load)."""
    time.sleep(WARM_UP_SECONDS)
    assert check_listen(pg) == []  # the check sees listeners: every replica LISTENs before
    servers[0].kill()
    time.sleep(KILLED_SECONDS)
    down = pg.restart(PG_DOWN_SECONDS)
    again = start(pg.url, "r0", logdir, *SERVE_ARGS)
    wait_ready([again], timeout=READY_SECONDS)
    servers[0] = again
    time.sleep(AFTER_SECONDS)
    stop.set()
    return down


def check_rows(store: Store, ledger: Ledger, prefilled: set[str]) -> dict[str, list[str]]:
    found = audit_by_invariant(store)
    rows = {i.id: i for i in store.list_instances(limit=100_000)}
    live = set(ledger.acked) - ledger.deleted - ledger.unsure
    found["acknowledged"] = [
        f"acknowledged instance {i} (key {ledger.acked[i]}) is missing"
        for i in sorted(live)
        if i not in rows
    ] + [f"acknowledged instance {i} was not found by its first delete" for i in ledger.vanished]
    committed = committed_answers(store)
    stray = sorted(set(rows) - prefilled - set(ledger.acked) - ledger.unsure)
    found["unacknowledged"] = []
    found["idempotent-retry"] = []
    for iid in stray:
        key = committed.get(iid)
        if key is not None and ledger.told.get(key) not in (201, 0):
            found["idempotent-retry"].append(
                f"instance {iid} on {rows[iid].host} was committed for key {key}, whose client "
                f"was told {ledger.told[key]}"
            )
        else:
            found["unacknowledged"].append(f"instance {iid} on {rows[iid].host} was never acked")
    return found


def committed_answers(store: Store) -> dict[str, str]:
    """Instance -> the Idempotency-Key whose stored answer (a 201) placed it."""
    out = {}
    with store.engine.connect() as conn:
        for key, status, response in conn.execute(
            text("SELECT key, status, response FROM idempotency")
        ):
            body = json.loads(response) if isinstance(response, str) else response
            if status == 201:
                for inst in body.get("instances", []):
                    out[inst["id"]] = key
    return out


def check_replicas(store: Store, servers: list[Server], token: str) -> list[str]:
    """Each replica's per-host usage equals the rows' (waiting up to 15 s for it to catch up)."""
    expected = usage_from_rows(store)
    auth = {"Authorization": f"Bearer {token}"}
    problems: list[str] = []
    for server in servers:
        for _ in range(30):
            got = {
                h["name"]: h["usage"]
                for h in httpx.get(server.url + "/v1/hosts", headers=auth, timeout=10).json()
            }
            problems = [
                f"replica {server.name} reports host {name} usage {got.get(name)}, rows {use}"
                for name, use in sorted(expected.items())
                if got.get(name) != use
            ]
            if not problems:
                break
            time.sleep(0.5)
        if problems:
            return problems
    return []


def check_listen(pg: PgCluster, tries: int = 20) -> list[str]:
    """One LISTEN connection per replica (waiting up to `tries` half-seconds for it): a
    listener's last statement, as `pg_stat_activity` shows it, is its LISTEN."""
    n = 0
    for _ in range(tries):
        with psycopg.connect(pg.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query = %s", ("LISTEN berth_events",)
            ).fetchone()
        n = int(row[0]) if row else 0
        if n >= REPLICAS:
            return []
        time.sleep(0.5)
    return [f"{n} of {REPLICAS} replicas LISTEN for change notifications"]


def verdict(found: dict[str, list[str]]) -> None:
    known = {} if os.environ.get("BERTH_CHAOS_STRICT") == "1" else KNOWN_OPEN
    failed = {name: problems for name, problems in found.items() if problems}
    report = "\n".join(f"{n}: {len(p)} {p[:5]}" for n, p in failed.items())
    if set(failed) - set(known):
        pytest.fail("invariants broken under chaos:\n" + report)
    if failed:
        reasons = "; ".join(f"{n}: {known[n]}" for n in failed)
        pytest.xfail(f"known open: {reasons}\n{report}")


@pytest.mark.slow
def test_replicas_keep_every_invariant_under_chaos(pg: PgCluster, tmp_path: Path) -> None:
    began = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = round(time.monotonic() - began - sum(phases.values()), 1)

    token, prefilled = prepare(pg.url)
    servers = [start(pg.url, f"r{i}", tmp_path, *SERVE_ARGS) for i in range(REPLICAS)]
    ledger = Ledger()
    try:
        wait_ready(servers, timeout=READY_SECONDS)
        phase("start")
        stop = threading.Event()
        cap = threading.Timer(MAX_LOAD_SECONDS, stop.set)
        cap.daemon = True
        cap.start()
        threads = [
            threading.Thread(target=client, args=(n, servers, token, ledger, stop), daemon=True)
            for n in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        down = chaos(pg, servers, tmp_path, stop)
        phase("chaos")
        for t in threads:
            t.join(timeout=MAX_LOAD_SECONDS + OP_DEADLINE)
        cap.cancel()
        phase("drain")
        assert not any(t.is_alive() for t in threads)
        assert all(s.alive() for s in servers)
        placed = sum(1 for s in ledger.told.values() if s == 201)
        print(
            f"PostgreSQL down {down:.1f} s; {len(ledger.told)} placements ({placed} placed), "
            f"{len(ledger.deleted)} deletes, {ledger.timeouts} forced time-outs; statuses",
            {c: ledger.statuses.count(c) for c in sorted(set(ledger.statuses))},
        )
        assert placed > 20
        assert ledger.deleted
        assert ledger.timeouts
        assert 409 in ledger.told.values()  # the fleet really filled up
        assert not [c for c in ledger.statuses if c >= 500 and c != 503]
        assert 0 not in ledger.told.values()  # every placement got its answer
        # opened after the restart: its connections are fresh
        store = Store.open(pg.url, replica="checker", migrate=False)
        found = check_rows(store, ledger, prefilled)
        found["replicas"] = check_replicas(store, servers, token)
        found["listen"] = check_listen(pg)
        store.close()
        phase("checks")
        print("seconds by phase:", phases)
    finally:
        for s in servers:
            s.stop()
    verdict(found)


def test_the_audit_finds_a_split_affinity_set_and_gives_the_replicas_usage(tmp_path: Path) -> None:
    """The row audits the chaos test relies on: an affinity set split over two hosts is found
    (and nothing else), and the usage from the rows is what a replica loading them reports."""
    store = Store.open(f"sqlite:///{tmp_path / 'berth.db'}", replica="audit")
    fleet = small_fleet(2, zones=CLUSTERS)
    load_fleet_into(store, fleet, dict.fromkeys(CLUSTERS, "r1"), now=NOW)
    store.add_group(GroupRow("aff", "default", "affinity", 1, 3, 0))
    claim_one(store, fleet, "i-a", "h-c1-0", group="aff")
    assert all(not found for found in audit_by_invariant(store).values())
    # the commit refuses a second host for an affinity set, so the split is written behind its
    # back: the audit must find it from the rows whatever made it
    claim_one(store, fleet, "i-b", "h-c2-1", "p8")
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE instances SET server_group = 'aff' WHERE id = 'i-b'"))
    found = audit_by_invariant(store)
    assert found["affinity"] == [
        "affinity deployment set aff (project default) has members on hosts ['h-c1-0', 'h-c2-1']"
    ]
    assert [name for name, problems in found.items() if problems] == ["affinity"]
    replica = Replica(store, ServiceConfig(db_url="sqlite://", replica_id="audit"), lambda: NOW)
    replica.reload()
    rows = usage_from_rows(store)
    assert rows == {h.name: replica.host_usage(h.name) for h in fleet.hosts}
    assert rows["h-c2-1"]["pinned_cpus_used"] == 8
    store.close()
