"""The claim transaction on PostgreSQL in two round trips.

`Store.commit_placement` (`berth.store.claims`; without evictions or a preemptible limit) runs
the same statements, in the same order and taking the same row locks, as its general path; only
the waiting is batched, by sending several statements in one message (parameters bound and
quoted by psycopg on the client, `ClientCursor`; one result per statement):

1. BEGIN; the generation check-and-bump of every touched deployment set, then of every touched
   host, in name order (``UPDATE ... WHERE generation = :read RETURNING``); the instances rows
   of the touched hosts (read after the host rows are locked); the member count of each set;
   the IP reservations. One wait.
2. The repository checks the answers (a missing row is a `GenerationConflictError`) and
   re-verifies the plan against the rows read; any failure rolls back, nothing was written.
3. One statement writes the instances, the idempotency record, the outcome and the events
   (data-modifying CTEs; event ids drawn at insert time, while the host rows are locked, so one
   host's events are in commit order) and sends the NOTIFY; then COMMIT. One wait.

The general path waited eight times for one instance (BEGIN, each statement, COMMIT), each wait
with SQLAlchemy's and psycopg's per-statement work around it; measured on the service
benchmark, a placement's replica CPU went from about 2.9 ms to 2.0 ms
(benchmarks/results/service.md). psycopg's pipeline mode batches the waits too but costs more
driver work per statement than it saves here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from berth.store.db import NOTIFY_CHANNEL, EventItem
from berth.store.errors import GenerationConflictError, PlanRejectedError
from berth.store.records import instance_set_key, split_set_key

_SET_CAS = (
    "UPDATE deployment_sets SET generation = generation + 1 "
    "WHERE project = %s AND id = %s AND generation = %s "
    "RETURNING generation, policy, max_per_host, max_size"
)
_HOST_CAS = (
    "UPDATE hosts SET generation = generation + %s WHERE name = %s AND generation = %s "
    "RETURNING generation"
)
_ON_HOSTS = "SELECT host, project, server_group, placement FROM instances WHERE host = ANY(%s)"
_SET_SIZE = "SELECT count(*) FROM instances WHERE project = %s AND server_group = %s"
_TAKE_IPS = (
    "UPDATE ip_pools SET used = used + %s WHERE name = %s AND used + %s <= total RETURNING used"
)
_INSTANCE_COLUMNS = (
    "id, project, flavor, host, cluster, server_group, placement, placement_id, business_type, "
    "preemptible, migratable, created_at, network"
)
_IDEMPOTENCY = (
    "INSERT INTO idempotency (principal, key, request_hash, status, response, created_at) "
    "VALUES (%s, %s, %s, %s, %s, %s)"
)
_OUTCOME = (
    "INSERT INTO placement_outcomes (ts, day, outcome, reason, flavor, project, num_instances, "
    "latency_ms, business_type, detail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_OUTCOME_WHY = (  # with the compact why (docs/why.md): only when one was recorded
    "INSERT INTO placement_outcomes (ts, day, outcome, reason, flavor, project, num_instances, "
    "latency_ms, business_type, detail, why) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
# payload "last id:replica", as `Database._append` sends
_IDS_AND_NOTIFY = (
    " SELECT array_agg(id ORDER BY id), pg_notify(%s, max(id)::text || ':' || %s) FROM e"
)


def _rows(n: int, width: int) -> str:
    """`(%s, ...), ...`: n rows of `width` parameters (one statement, whatever the count)."""
    one = "(" + ", ".join(["%s"] * width) + ")"
    return ", ".join([one] * n)


@dataclass(frozen=True)
class ClaimWrites:
    """Everything the claim transaction runs, precomputed by the repository."""

    sets: Sequence[tuple[str, int]]
    """(deployment set key, generation read), in key order"""
    hosts: Sequence[tuple[str, int, int]]
    """(host, generation read, changes), in name order"""
    verify_hosts: Sequence[str]
    sized_sets: Sequence[str]
    """the keys of the sets whose current member count the re-verification needs"""
    networks: Sequence[tuple[str, int]]
    """(network, IPs to take), in name order"""
    instances: Sequence[dict[str, Any]]
    idempotency: dict[str, Any] | None
    outcome: dict[str, Any] | None
    events: Sequence[EventItem]
    ts: float
    replica: str


@dataclass
class ClaimRead:
    """What the first round trip read, for the repository's re-verification."""

    sets: dict[str, tuple[int, str, int, int | None]] = field(default_factory=dict)
    """set key -> (generation after the bump, policy, max per host, max size)"""
    rows: list[tuple[str, str | None, dict[str, Any]]] = field(default_factory=list)
    """(host, deployment set key, footprint) of every instance on the touched hosts"""
    sizes: dict[str, int] = field(default_factory=dict)


def commit(engine: Engine, w: ClaimWrites, verify: Callable[[ClaimRead], None]) -> list[int]:
    """Run the claim transaction; the ids of the events written, in the order of `w.events`.

    Raises what `verify` raises, `GenerationConflictError` for a set or host no longer at the
    generation read, `PlanRejectedError` for a network without the IPs, and SQLAlchemy's
    `IntegrityError` / `DBAPIError` for driver errors (as the general path does); nothing is
    written then.
    """
    pooled = engine.raw_connection()  # the driver's connection, no SQLAlchemy wrapper
    raw: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
    lost = False  # the connection is broken: the pool must not hand it out again
    try:
        # BEGIN and COMMIT travel with our statements: with autocommit off, psycopg would
        # send its own BEGIN first and wait for it
        raw.autocommit = True
        return _run(raw, w, verify)
    except BaseException as exc:
        with contextlib.suppress(psycopg.Error):
            raw.rollback()
        lost = raw.broken or raw.closed
        if isinstance(exc, psycopg.IntegrityError):
            raise IntegrityError("claim transaction", None, exc) from None
        if isinstance(exc, psycopg.Error):
            raise DBAPIError.instance(
                "claim transaction",
                None,
                exc,
                psycopg.Error,
                connection_invalidated=lost,
            ) from exc
        raise
    finally:
        if not lost:
            try:  # the pool's other users expect a connection that is not in autocommit
                raw.autocommit = False
            except psycopg.Error:
                lost = True
        if lost:
            pooled.invalidate()
        pooled.close()  # back to the pool (an invalidated one is discarded)


def _run(
    raw: psycopg.Connection[Any], w: ClaimWrites, verify: Callable[[ClaimRead], None]
) -> list[int]:
    # Parameters are bound by psycopg on the client (quoted by libpq): several statements then
    # go in one message and come back as one result each, in order (`nextset`).
    cur = psycopg.ClientCursor(raw)
    cur.execute(*_checks(w))  # the first wait
    verify(_read_checks(cur, w))
    _read_ip_reservations(cur, w)
    # the writes as one statement: the inserts as data-modifying CTEs (each runs exactly
    # once), the events' ids and the NOTIFY from the last one; then COMMIT, the second wait
    parts, params, final = _writes(w)
    if parts:
        cur.execute("WITH " + ", ".join(parts) + final + "; COMMIT", params)
        row = cur.fetchone()  # the first statement's result (COMMIT's follows)
    else:
        cur.execute("COMMIT")
        row = None
    if raw.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise PlanRejectedError("the claim transaction did not commit")
    return sorted(int(i) for i in row[0]) if row is not None and row[0] is not None else []


def _checks(w: ClaimWrites) -> tuple[str, list[Any]]:
    """The first message: BEGIN, the generation checks, the reads, the IP reservations."""
    sql = ["BEGIN"]
    params: list[Any] = []
    for key, gen in w.sets:
        sql.append(_SET_CAS)
        params += [*split_set_key(key), gen]
    for h, gen, k in w.hosts:
        sql.append(_HOST_CAS)
        params += [k, h, gen]
    if w.verify_hosts:
        sql.append(_ON_HOSTS)
        params.append(list(w.verify_hosts))
    for key in w.sized_sets:
        sql.append(_SET_SIZE)
        params += split_set_key(key)
    for net, n in w.networks:
        sql.append(_TAKE_IPS)
        params += [n, net, n]
    return "; ".join(sql), params


def _read_checks(cur: psycopg.ClientCursor[Any], w: ClaimWrites) -> ClaimRead:
    """The answers to the generation checks and the reads; a set or host no longer at the
    generation read is `GenerationConflictError`."""
    read = ClaimRead()
    for gid, _ in w.sets:
        cur.nextset()
        row = cur.fetchone()
        if row is None:
            raise GenerationConflictError("deployment set", gid)
        read.sets[gid] = (int(row[0]), row[1], int(row[2]), row[3])
    for host, _, _ in w.hosts:
        cur.nextset()
        if cur.fetchone() is None:
            raise GenerationConflictError("host", host)
    if w.verify_hosts:
        cur.nextset()
        read.rows = [(r[0], instance_set_key(r[1], r[2]), r[3]) for r in cur.fetchall()]
    for gid in w.sized_sets:
        cur.nextset()
        one = cur.fetchone()
        read.sizes[gid] = int(one[0]) if one is not None else 0
    return read


def _read_ip_reservations(cur: psycopg.ClientCursor[Any], w: ClaimWrites) -> None:
    """A network that had too few free IPs is `PlanRejectedError`."""
    for net, n in w.networks:
        cur.nextset()
        if cur.fetchone() is None:
            raise PlanRejectedError(f"network {net!r} has no {n} free IPs")


def _writes(w: ClaimWrites) -> tuple[list[str], list[Any], str]:
    """The second message's CTEs, their parameters, and its final SELECT."""
    parts: list[str] = []
    params: list[Any] = []
    if w.instances:
        parts.append(
            f"i AS (INSERT INTO instances ({_INSTANCE_COLUMNS}) "
            f"VALUES {_rows(len(w.instances), 13)})"
        )
        params += _instance_params(w.instances)
    if w.idempotency is not None:
        d = w.idempotency
        parts.append(f"k AS ({_IDEMPOTENCY})")
        params += [
            d["principal"],
            d["key"],
            d["request_hash"],
            d["status"],
            Jsonb(d["response"]),
            d["created_at"],
        ]
    if w.outcome is not None:
        o = w.outcome
        why = o.get("why")
        parts.append(f"o AS ({_OUTCOME if why is None else _OUTCOME_WHY})")
        params += [
            o["ts"],
            o["day"],
            o["outcome"],
            o["reason"],
            o["flavor"],
            o["project"],
            o["num_instances"],
            o["latency_ms"],
            o["business_type"],
            o["detail"],
        ]
        if why is not None:
            params.append(Jsonb(why))
    if not w.events:
        return parts, params, " SELECT NULL"
    # a multi-row INSERT inserts its rows, and draws their ids, in VALUES order
    parts.append(
        "e AS (INSERT INTO events (ts, kind, host, generation, replica, payload) "
        f"VALUES {_rows(len(w.events), 6)} RETURNING id)"
    )
    params += [v for k, h, g, p in w.events for v in (w.ts, k, h, g, w.replica, Jsonb(p))]
    params += [NOTIFY_CHANNEL, w.replica]
    return parts, params, _IDS_AND_NOTIFY


def _instance_params(instances: Sequence[dict[str, Any]]) -> list[Any]:
    """The instances rows' values, in `_INSTANCE_COLUMNS` order."""
    return [
        v
        for i in instances
        for v in (
            i["id"],
            i["project"],
            i["flavor"],
            i["host"],
            i["cluster"],
            i["server_group"],
            Jsonb(i["placement"]),
            i["placement_id"],
            i["business_type"],
            i["preemptible"],
            i["migratable"],
            i["created_at"],
            i["network"],
        )
    ]
