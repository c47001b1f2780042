"""The repository: every read and write the service makes, one transaction each.

Writes that change a host bump its generation and append events in the same transaction, so
the event log and the rows never disagree. Claims are optimistic (`commit_placement`): the
transaction updates each touched host with ``WHERE generation = :read`` and checks the row count,
re-verifies the footprints against the instances rows it now holds locked, and only then inserts;
any failure rolls the whole transaction back (no partial claim, even if the process dies).

Event ids are unique and increasing in the order they are assigned, but on PostgreSQL two
transactions may commit out of id order (serialising every commit on one lock would serialise
the WAL flushes too). Readers therefore remember the ids below the newest they have seen that
have not appeared yet and ask for them again (`Replica.sync`); what matters for applying events
is the order per host, which the host row lock guarantees. SQLite serialises writers anyway.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from berth.core.model import Aggregate, Flavor, Host, NumaCell, PciAlias
from berth.store import pgclaim
from berth.store import schema as t
from berth.store.db import is_sqlite, make_engine, upgrade
from berth.store.errors import (
    AlreadyExistsError,
    GenerationConflictError,
    IdempotencyRaceError,
    InUseError,
    InvalidReferenceError,
    NotFoundError,
    PlanRejectedError,
)
from berth.store.footprint import Footprint, sum_footprints
from berth.store.pgclaim import NOTIFY_CHANNEL

I64 = npt.NDArray[np.int64]
RECENT_IDS = 10_000  # how far back a snapshot looks for event ids not committed yet
ROLES = ("admin", "operator", "tenant", "reader")


_DAY: list[tuple[float, float, str]] = [(0.0, 0.0, "")]  # the last day asked: [start, end)


def day_of(ts: float) -> str:
    """The UTC day of a timestamp, "YYYY-MM-DD" (the last day is remembered: every placement
    asks, formatting a date costs more than the rest of its outcome row)."""
    start, end, label = _DAY[0]
    if start <= ts < end:
        return label
    label = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")
    start = ts - ts % 86400  # UTC days are 86400 s long (POSIX time has no leap seconds)
    _DAY[0] = (start, start + 86400, label)
    return label


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# Statements of the claim path, built once (building them per call costs more than running them).
_HOST_CAS = (
    update(t.hosts)
    .where(t.hosts.c.name == bindparam("h"), t.hosts.c.generation == bindparam("g"))
    .values(generation=t.hosts.c.generation + bindparam("k"))
)
_ON_HOSTS = select(t.instances.c.host, t.instances.c.server_group, t.instances.c.placement).where(
    t.instances.c.host.in_(bindparam("hosts", expanding=True))
)
_OUTCOME = insert(t.placement_outcomes)
_INSERT_INSTANCES = insert(t.instances)
_EVENT = insert(t.events).returning(t.events.c.id)


# ---------------------------------------------------------------------------- records
@dataclass(frozen=True)
class ClusterRow:
    name: str
    region: str
    state: str


@dataclass(frozen=True)
class PoolRow:
    cluster: str
    name: str
    trait: str
    description: str = ""


@dataclass(frozen=True)
class HostRecord:
    host: Host
    cluster: str
    pool: str | None
    generation: int
    report: dict[str, Any] | None = None
    report_ts: float | None = None


@dataclass(frozen=True)
class GroupRow:
    id: str
    project: str
    policy: str
    max_per_host: int
    max_size: int | None
    generation: int
    scope: str = "host"


@dataclass(frozen=True)
class InstanceRow:
    id: str
    project: str
    flavor: str
    host: str
    cluster: str
    server_group: str | None
    placement: Footprint
    placement_id: str | None
    business_type: str
    preemptible: bool
    migratable: bool
    created_at: float
    network: str | None = None


@dataclass(frozen=True)
class TokenRow:
    id: str
    name: str
    role: str
    project: str | None
    revoked: bool
    created_at: float


@dataclass(frozen=True)
class EventRow:
    id: int
    ts: float
    kind: str
    host: str | None
    generation: int | None
    replica: str
    payload: dict[str, Any]


@dataclass
class Snapshot:
    """Everything a replica needs to build its tables, read in one consistent transaction."""

    last_event_id: int
    regions: dict[str, str | None]
    """region (or IDC) -> its parent region (None: top level)"""
    clusters: dict[str, ClusterRow]
    pools: list[PoolRow]
    aggregates: list[Aggregate]
    pci_aliases: list[PciAlias]
    flavors: list[Flavor]
    groups: dict[str, GroupRow]
    hosts: list[HostRecord]
    instances: list[InstanceRow]
    missing_event_ids: list[int] = field(default_factory=list)
    """Ids below `last_event_id` not visible yet (their transactions were still committing)."""


@dataclass(frozen=True)
class NewInstance:
    id: str
    host: str
    cluster: str
    flavor: str
    footprint: Footprint
    project: str
    server_group: str | None = None
    business_type: str = "on-demand"
    preemptible: bool = False
    migratable: bool = True
    created_at: float | None = None  # None: the commit time
    network: str | None = None  # takes one IP of this network (ip_pools)


@dataclass(frozen=True)
class HostCapacity:
    """A host's inventory in one table's layout, for re-verifying a plan at commit."""

    cell_cap: I64
    host_cap: I64
    device_types: list[str]


@dataclass(frozen=True)
class Outcome:
    outcome: str  # success | failure
    reason: str
    flavor: str
    project: str
    num_instances: int
    latency_ms: float


@dataclass(frozen=True)
class Idempotent:
    principal: str
    key: str
    request_hash: str
    status: int
    response: dict[str, Any]


@dataclass
class CommitResult:
    events: list[EventRow] = field(default_factory=list)
    groups: dict[str, int] = field(default_factory=dict)  # group -> generation after commit
    evicted: list[InstanceRow] = field(default_factory=list)


def _instance(row: Any) -> InstanceRow:
    return InstanceRow(
        id=row.id,
        project=row.project,
        flavor=row.flavor,
        host=row.host,
        cluster=row.cluster,
        server_group=row.server_group,
        placement=row.placement,
        placement_id=row.placement_id,
        business_type=row.business_type,
        preemptible=bool(row.preemptible),
        migratable=bool(row.migratable),
        created_at=float(row.created_at),
        network=row.network,
    )


def _event(row: Any) -> EventRow:
    return EventRow(
        id=int(row.id),
        ts=float(row.ts),
        kind=row.kind,
        host=row.host,
        generation=None if row.generation is None else int(row.generation),
        replica=row.replica,
        payload=row.payload,
    )


def _host_spec(host: Host) -> dict[str, Any]:
    return host.model_dump(mode="json", exclude={"numa_cells", "enabled", "last_heartbeat"})


# ---------------------------------------------------------------------------- the store
class Store:
    """All database access. Thread-safe: each call runs its own transaction."""

    def __init__(self, engine: Engine, replica: str = "local") -> None:
        self.engine = engine
        self.replica = replica
        self.sqlite = is_sqlite(engine)
        self._sqlite_writer = threading.Lock()

    @classmethod
    def open(cls, url: str, *, replica: str = "local", migrate: bool = True) -> Store:
        store = cls(make_engine(url), replica)
        if migrate:
            upgrade(store.engine)
        return store

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ transactions
    @contextmanager
    def _write(self) -> Iterator[Connection]:
        if self.sqlite:  # one writer at a time anyway: queue here, not in SQLite's busy loop
            with self._sqlite_writer, self.engine.begin() as conn:
                yield conn
            return
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self, *, snapshot: bool = False) -> Iterator[Connection]:
        opts: dict[str, Any] = {}
        if self.sqlite:
            opts["sqlite_begin"] = "DEFERRED"
        elif snapshot:
            opts["isolation_level"] = "REPEATABLE READ"
        with self.engine.connect().execution_options(**opts) as conn, conn.begin():
            yield conn

    def _append(
        self, conn: Connection, items: Sequence[tuple[str, str | None, int | None, dict[str, Any]]]
    ) -> list[EventRow]:
        """Append events (kind, host, generation, payload) at the end of a write transaction.

        Ids come from a sequence, so on PostgreSQL concurrent transactions may commit out of id
        order; readers track the ids they have not seen yet (`Replica.sync`). Events of one host
        are always in order: the host's row stays locked from its generation update to commit.
        """
        if not items:
            return []
        now = time.time()
        out = []
        for kind, host, generation, payload in items:
            new_id = conn.execute(
                _EVENT,
                {
                    "ts": now,
                    "kind": kind,
                    "host": host,
                    "generation": generation,
                    "replica": self.replica,
                    "payload": payload,
                },
            ).scalar_one()
            out.append(EventRow(int(new_id), now, kind, host, generation, self.replica, payload))
        if not self.sqlite:  # wake the other replicas: "last id written:replica"
            conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, f"{out[-1].id}:{self.replica}")))
        return out

    # ------------------------------------------------------------------ snapshot & events
    def snapshot(self) -> Snapshot:
        with self._read(snapshot=True) as conn:
            last = int(conn.execute(select(func.max(t.events.c.id))).scalar() or 0)
            # ids below `last` not committed yet (a transaction still in flight) come later
            window = max(1, last - RECENT_IDS + 1)
            present = {
                int(r[0])
                for r in conn.execute(select(t.events.c.id).where(t.events.c.id >= window))
            }
            missing = [i for i in range(window, last + 1) if i not in present]
            regions = {r.name: r.parent for r in conn.execute(select(t.regions))}
            clusters = {
                r.name: ClusterRow(r.name, r.region, r.state)
                for r in conn.execute(select(t.clusters))
            }
            pools = [
                PoolRow(r.cluster, r.name, r.trait, r.description)
                for r in conn.execute(select(t.pools).order_by(t.pools.c.cluster, t.pools.c.name))
            ]
            aggregates = [
                Aggregate(name=r.name, metadata=r.meta)
                for r in conn.execute(select(t.aggregates).order_by(t.aggregates.c.name))
            ]
            aliases = [
                PciAlias(name=r.name, device_type=r.device_type)
                for r in conn.execute(select(t.pci_aliases).order_by(t.pci_aliases.c.name))
            ]
            flavors = [
                Flavor.model_validate(r.spec)
                for r in conn.execute(select(t.flavors).order_by(t.flavors.c.name))
            ]
            groups = {
                r.id: GroupRow(
                    r.id,
                    r.project,
                    r.policy,
                    r.max_per_host,
                    r.max_size,
                    int(r.generation),
                    r.scope,
                )
                for r in conn.execute(select(t.deployment_sets))
            }
            hosts = self._hosts(conn)
            instances = [
                _instance(r)
                for r in conn.execute(select(t.instances).order_by(t.instances.c.created_at))
            ]
        return Snapshot(
            last,
            regions,
            clusters,
            pools,
            aggregates,
            aliases,
            flavors,
            groups,
            hosts,
            instances,
            missing,
        )

    def _hosts(self, conn: Connection, names: Sequence[str] | None = None) -> list[HostRecord]:
        q = select(t.hosts).order_by(t.hosts.c.created_at, t.hosts.c.name)
        cq = select(t.host_cells).order_by(t.host_cells.c.host, t.host_cells.c.cell)
        if names is not None:
            q = q.where(t.hosts.c.name.in_(names))
            cq = cq.where(t.host_cells.c.host.in_(names))
        cells: dict[str, list[NumaCell]] = {}
        for c in conn.execute(cq):
            cells.setdefault(c.host, []).append(
                NumaCell(
                    shared_cpus=c.shared_cpus,
                    dedicated_cpus=c.dedicated_cpus,
                    memory_mb=c.memory_mb,
                    hugepages_mb=c.hugepages_mb,
                    pci=c.pci,
                )
            )
        out = []
        for r in conn.execute(q):
            host = Host.model_validate(
                {
                    **r.spec,
                    "enabled": r.enabled,
                    "last_heartbeat": r.last_heartbeat,
                    "numa_cells": cells.get(r.name, []),
                }
            )
            out.append(
                HostRecord(host, r.cluster, r.pool, int(r.generation), r.report, r.report_ts)
            )
        return out

    def latest_event_id(self) -> int:
        with self._read() as conn:
            return int(conn.execute(select(func.max(t.events.c.id))).scalar() or 0)

    def events_after(
        self,
        after: int,
        limit: int = 1000,
        kind: str | None = None,
        also: Sequence[int] = (),
    ) -> list[EventRow]:
        """Events with an id above `after` (and those among `also`), oldest first."""
        cond = t.events.c.id > after
        if also:
            cond = or_(cond, t.events.c.id.in_(list(also)))
        q = select(t.events).where(cond)
        if kind is not None:
            q = q.where(t.events.c.kind == kind)
        with self._read() as conn:
            rows = conn.execute(q.order_by(t.events.c.id).limit(limit))
            return [_event(r) for r in rows]

    def heartbeats_since(self, since: float) -> list[tuple[str, float]]:
        with self._read() as conn:
            rows = conn.execute(
                select(t.hosts.c.name, t.hosts.c.last_heartbeat).where(
                    t.hosts.c.last_heartbeat > since
                )
            )
            return [(r.name, float(r.last_heartbeat)) for r in rows]

    # ------------------------------------------------------------------ topology
    def add_region(self, name: str, description: str = "", parent: str | None = None) -> None:
        try:
            with self._write() as conn:
                conn.execute(
                    insert(t.regions).values(
                        name=name, description=description, created_at=time.time(), parent=parent
                    )
                )
                self._append(conn, [("region_added", None, None, {"name": name, "parent": parent})])
        except IntegrityError:
            raise AlreadyExistsError("region", name) from None

    def list_regions(self) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(select(t.regions).order_by(t.regions.c.name))
            return [
                {"name": r.name, "description": r.description, "parent": r.parent} for r in rows
            ]

    def add_cluster(self, name: str, region: str) -> None:
        now = time.time()
        with self._write() as conn:
            if (
                conn.execute(select(t.regions.c.name).where(t.regions.c.name == region)).first()
                is None
            ):
                raise InvalidReferenceError("region", f"unknown region {region!r}")
            if conn.execute(select(t.clusters.c.name).where(t.clusters.c.name == name)).first():
                raise AlreadyExistsError("cluster", name)
            conn.execute(
                insert(t.clusters).values(
                    name=name, region=region, state="active", created_at=now, changed_at=now
                )
            )
            self._append(conn, [("cluster_joined", None, None, {"name": name, "region": region})])

    def set_cluster_state(self, name: str, state: str) -> None:
        """Join (`active`) or leave (`left`): a cluster that left gets no placements; its
        instances and hosts stay recorded and can be released."""
        with self._write() as conn:
            res = conn.execute(
                update(t.clusters)
                .where(t.clusters.c.name == name)
                .values(state=state, changed_at=time.time())
            )
            if res.rowcount == 0:
                raise NotFoundError("cluster", name)
            kind = "cluster_joined" if state == "active" else "cluster_left"
            self._append(conn, [(kind, None, None, {"name": name})])

    def list_clusters(self) -> list[ClusterRow]:
        with self._read() as conn:
            rows = conn.execute(select(t.clusters).order_by(t.clusters.c.name))
            return [ClusterRow(r.name, r.region, r.state) for r in rows]

    def add_pool(self, pool: PoolRow) -> None:
        with self._write() as conn:
            if not conn.execute(
                select(t.clusters.c.name).where(t.clusters.c.name == pool.cluster)
            ).first():
                raise InvalidReferenceError("cluster", f"unknown cluster {pool.cluster!r}")
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(t.pools).values(
                            cluster=pool.cluster,
                            name=pool.name,
                            trait=pool.trait,
                            description=pool.description,
                        )
                    )
            except IntegrityError:
                raise AlreadyExistsError("pool", f"{pool.cluster}/{pool.name}") from None
            self._append(
                conn, [("pool_added", None, None, {"cluster": pool.cluster, "name": pool.name})]
            )

    def list_pools(self, cluster: str | None = None) -> list[PoolRow]:
        q = select(t.pools).order_by(t.pools.c.cluster, t.pools.c.name)
        if cluster is not None:
            q = q.where(t.pools.c.cluster == cluster)
        with self._read() as conn:
            return [PoolRow(r.cluster, r.name, r.trait, r.description) for r in conn.execute(q)]

    def put_aggregates(self, aggregates: Sequence[Aggregate]) -> None:
        with self._write() as conn:
            for agg in aggregates:
                conn.execute(delete(t.aggregates).where(t.aggregates.c.name == agg.name))
                conn.execute(insert(t.aggregates).values(name=agg.name, meta=dict(agg.metadata)))
            self._append(
                conn,
                [("aggregates_changed", None, None, {"names": [a.name for a in aggregates]})],
            )

    def put_pci_aliases(self, aliases: Sequence[PciAlias]) -> None:
        with self._write() as conn:
            for a in aliases:
                conn.execute(delete(t.pci_aliases).where(t.pci_aliases.c.name == a.name))
                conn.execute(insert(t.pci_aliases).values(name=a.name, device_type=a.device_type))
            self._append(
                conn, [("pci_aliases_changed", None, None, {"names": [a.name for a in aliases]})]
            )

    # ------------------------------------------------------------------ hosts
    def add_hosts(self, cluster: str, hosts: Sequence[tuple[Host, str | None]]) -> None:
        """Add hosts (with their pool) to a cluster: one transaction, one `hosts_added` event."""
        now = time.time()
        with self._write() as conn:
            if not conn.execute(
                select(t.clusters.c.name).where(t.clusters.c.name == cluster)
            ).first():
                raise InvalidReferenceError("cluster", f"unknown cluster {cluster!r}")
            pools = {
                r.name
                for r in conn.execute(select(t.pools.c.name).where(t.pools.c.cluster == cluster))
            }
            aggs = {r.name for r in conn.execute(select(t.aggregates.c.name))}
            names = [h.name for h, _ in hosts]
            existing = conn.execute(select(t.hosts.c.name).where(t.hosts.c.name.in_(names))).first()
            if existing is not None:
                raise AlreadyExistsError("host", existing.name)
            host_rows, cell_rows = [], []
            for i, (host, pool) in enumerate(hosts):
                if pool is not None and pool not in pools:
                    raise InvalidReferenceError(
                        f"hosts[{i}].pool", f"unknown pool {pool!r} in {cluster}"
                    )
                for agg in host.aggregates:
                    if agg not in aggs:
                        raise InvalidReferenceError(
                            f"hosts[{i}].aggregates", f"unknown aggregate {agg!r}"
                        )
                host_rows.append(
                    {
                        "name": host.name,
                        "cluster": cluster,
                        "pool": pool,
                        "spec": _host_spec(host),
                        "enabled": host.enabled,
                        "last_heartbeat": host.last_heartbeat,
                        "generation": 0,
                        "created_at": now,
                    }
                )
                for c, cell in enumerate(host.numa_cells):
                    cell_rows.append(
                        {
                            "host": host.name,
                            "cell": c,
                            "shared_cpus": cell.shared_cpus,
                            "dedicated_cpus": cell.dedicated_cpus,
                            "memory_mb": cell.memory_mb,
                            "hugepages_mb": cell.hugepages_mb,
                            "pci": dict(cell.pci),
                        }
                    )
            if host_rows:
                conn.execute(insert(t.hosts), host_rows)
                conn.execute(insert(t.host_cells), cell_rows)
            self._append(conn, [("hosts_added", None, None, {"cluster": cluster, "hosts": names})])

    def remove_host(self, name: str) -> None:
        """Decommission an empty host (one with instances is `InUseError`)."""
        with self._write() as conn:
            used = _an_instance(conn, t.instances.c.host, name)
            if used is not None:
                raise InUseError(f"host {name!r} still runs instance {used!r}")
            conn.execute(delete(t.host_cells).where(t.host_cells.c.host == name))
            if conn.execute(delete(t.hosts).where(t.hosts.c.name == name)).rowcount == 0:
                raise NotFoundError("host", name)
            self._append(conn, [("host_removed", name, None, {"name": name})])

    def get_host(self, name: str) -> HostRecord:
        with self._read() as conn:
            found = self._hosts(conn, [name])
        if not found:
            raise NotFoundError("host", name)
        return found[0]

    def list_hosts(self, cluster: str | None = None) -> list[HostRecord]:
        with self._read() as conn:
            names = None
            if cluster is not None:
                names = [
                    r.name
                    for r in conn.execute(
                        select(t.hosts.c.name).where(t.hosts.c.cluster == cluster)
                    )
                ]
            return self._hosts(conn, names)

    def set_host_enabled(self, name: str, enabled: bool) -> EventRow:
        with self._write() as conn:
            gen = conn.execute(
                update(t.hosts)
                .where(t.hosts.c.name == name)
                .values(enabled=enabled, generation=t.hosts.c.generation + 1)
                .returning(t.hosts.c.generation)
            ).scalar()
            if gen is None:
                raise NotFoundError("host", name)
            return self._append(conn, [("host_state", name, int(gen), {"enabled": enabled})])[0]

    def report(
        self,
        name: str,
        timestamp: float,
        report: dict[str, Any] | None,
        *,
        down_after: float | None = None,
    ) -> bool:
        """Record a heartbeat (and the host's own view when given); older never overwrite newer.

        With `down_after` (the service-down time), a heartbeat that revives a host (none
        before, or the previous one more than `down_after` older) also appends a `host_alive`
        event, so that other replicas let the host back in at once instead of at their next
        heartbeat poll. Heartbeats bump no generation. Returns False when the report was older
        than what is recorded (nothing changed).
        """
        with self._write() as conn:
            cur = conn.execute(
                select(t.hosts.c.last_heartbeat, t.hosts.c.report_ts).where(t.hosts.c.name == name)
            ).first()
            if cur is None:
                raise NotFoundError("host", name)
            values: dict[str, Any] = {}
            if cur.last_heartbeat is None or timestamp > cur.last_heartbeat:
                values["last_heartbeat"] = timestamp
            if report is not None and (cur.report_ts is None or timestamp > cur.report_ts):
                values["report"] = report
                values["report_ts"] = timestamp
            if not values:
                return False
            conn.execute(update(t.hosts).where(t.hosts.c.name == name).values(**values))
            revived = "last_heartbeat" in values and (
                cur.last_heartbeat is None
                or (down_after is not None and timestamp - cur.last_heartbeat > down_after)
            )
            if down_after is not None and revived:
                payload = {"heartbeat": timestamp, "previous": cur.last_heartbeat}
                self._append(conn, [("host_alive", name, None, payload)])
            return True

    def touch_heartbeats(self, now: float, max_age: float) -> int:
        """Heartbeat, at `now`, every host whose last heartbeat is within `max_age` of the
        freshest one (`berth serve --simulate-agents`, the demo's stand-in for compute agents:
        hosts that were down stay down, even after the service was stopped for a while)."""
        with self._write() as conn:
            freshest = conn.execute(select(func.max(t.hosts.c.last_heartbeat))).scalar()
            if freshest is None:
                return 0
            res = conn.execute(
                update(t.hosts)
                .where(
                    t.hosts.c.last_heartbeat >= min(now, float(freshest)) - max_age,
                    t.hosts.c.last_heartbeat < now,
                )
                .values(last_heartbeat=now)
            )
            return int(res.rowcount)

    def reconcile(self, hosts: Sequence[str] | None = None) -> list[EventRow]:
        """Compare each host's latest reported instances with the instances Berth records.

        Every discrepancy (an instance Berth knows that the host does not report, or one the host
        runs that Berth does not know) is recorded as a `discrepancy` event. A report is
        reconciled once; a host that never reported its instances is skipped.
        """
        with self._write() as conn:
            q = select(t.hosts.c.name, t.hosts.c.report, t.hosts.c.report_ts).where(
                t.hosts.c.report_ts.is_not(None),
                or_(
                    t.hosts.c.reconciled_ts.is_(None),
                    t.hosts.c.reconciled_ts < t.hosts.c.report_ts,
                ),
            )
            if hosts is not None:
                q = q.where(t.hosts.c.name.in_(hosts))
            found = []
            for row in conn.execute(q).all():
                reported = row.report.get("instances")
                if reported is None:
                    continue
                known = {
                    r.id
                    for r in conn.execute(
                        select(t.instances.c.id).where(t.instances.c.host == row.name)
                    )
                }
                missing = sorted(known - set(reported))
                unknown = sorted(set(reported) - known)
                conn.execute(
                    update(t.hosts)
                    .where(t.hosts.c.name == row.name)
                    .values(reconciled_ts=row.report_ts)
                )
                if missing or unknown:
                    found.append(
                        (
                            "discrepancy",
                            row.name,
                            None,
                            {
                                "report_ts": row.report_ts,
                                "missing_on_host": missing,
                                "unknown_to_berth": unknown,
                            },
                        )
                    )
            return self._append(conn, found)

    # ------------------------------------------------------------------ catalogue
    def add_flavor(self, flavor: Flavor) -> None:
        try:
            with self._write() as conn:
                conn.execute(
                    insert(t.flavors).values(
                        name=flavor.name,
                        spec=flavor.model_dump(mode="json"),
                        created_at=time.time(),
                    )
                )
                self._append(
                    conn,
                    [
                        (
                            "flavor_added",
                            None,
                            None,
                            {"name": flavor.name, "spec": flavor.model_dump(mode="json")},
                        )
                    ],
                )
        except IntegrityError:
            raise AlreadyExistsError("flavor", flavor.name) from None

    def delete_flavor(self, name: str) -> None:
        with self._write() as conn:
            used = _an_instance(conn, t.instances.c.flavor, name)
            if used is not None:
                raise InUseError(f"flavor {name!r} is used by instance {used!r}")
            if conn.execute(delete(t.flavors).where(t.flavors.c.name == name)).rowcount == 0:
                raise NotFoundError("flavor", name)
            self._append(conn, [("flavor_deleted", None, None, {"name": name})])

    def list_flavors(self) -> list[Flavor]:
        with self._read() as conn:
            rows = conn.execute(select(t.flavors).order_by(t.flavors.c.name))
            return [Flavor.model_validate(r.spec) for r in rows]

    def add_image(self, image: dict[str, Any]) -> None:
        try:
            with self._write() as conn:
                conn.execute(insert(t.images).values(**image, created_at=time.time()))
                self._append(conn, [("image_added", None, None, {"name": image["name"]})])
        except IntegrityError:
            raise AlreadyExistsError("image", image["name"]) from None

    def list_images(self) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(select(t.images).order_by(t.images.c.name))
            return [
                {
                    "name": r.name,
                    "architecture": r.architecture,
                    "hypervisor_type": r.hypervisor_type,
                    "required_traits": r.required_traits,
                    "clusters": r.clusters,
                }
                for r in rows
            ]

    def get_image(self, name: str) -> dict[str, Any]:
        for image in self.list_images():
            if image["name"] == name:
                return image
        raise NotFoundError("image", name)

    def add_ip_pool(self, name: str, cluster: str, cidr: str, total: int) -> None:
        with self._write() as conn:
            if not conn.execute(
                select(t.clusters.c.name).where(t.clusters.c.name == cluster)
            ).first():
                raise InvalidReferenceError("cluster", f"unknown cluster {cluster!r}")
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(t.ip_pools).values(
                            name=name,
                            cluster=cluster,
                            cidr=cidr,
                            total=total,
                            used=0,
                            created_at=time.time(),
                        )
                    )
            except IntegrityError:
                raise AlreadyExistsError("network", name) from None
            self._append(conn, [("network_added", None, None, {"name": name, "cluster": cluster})])

    def list_ip_pools(self) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(select(t.ip_pools).order_by(t.ip_pools.c.name))
            return [
                {
                    "name": r.name,
                    "cluster": r.cluster,
                    "cidr": r.cidr,
                    "total": r.total,
                    "used": r.used,
                }
                for r in rows
            ]

    # ------------------------------------------------------------------ deployment sets
    def add_group(self, group: GroupRow) -> None:
        try:
            with self._write() as conn:
                conn.execute(
                    insert(t.deployment_sets).values(
                        id=group.id,
                        project=group.project,
                        policy=group.policy,
                        max_per_host=group.max_per_host,
                        max_size=group.max_size,
                        generation=0,
                        created_at=time.time(),
                        scope=group.scope,
                    )
                )
                payload = {
                    "id": group.id,
                    "project": group.project,
                    "policy": group.policy,
                    "max_per_host": group.max_per_host,
                    "max_size": group.max_size,
                    "scope": group.scope,
                }
                self._append(conn, [("group_added", None, None, payload)])
        except IntegrityError:
            raise AlreadyExistsError("deployment set", group.id) from None

    def delete_group(self, group_id: str) -> None:
        with self._write() as conn:
            used = _an_instance(conn, t.instances.c.server_group, group_id)
            if used is not None:
                raise InUseError(f"deployment set {group_id!r} still has instance {used!r}")
            res = conn.execute(delete(t.deployment_sets).where(t.deployment_sets.c.id == group_id))
            if res.rowcount == 0:
                raise NotFoundError("deployment set", group_id)
            self._append(conn, [("group_deleted", None, None, {"id": group_id})])

    def list_groups(self, project: str | None = None) -> list[GroupRow]:
        q = select(t.deployment_sets).order_by(t.deployment_sets.c.id)
        if project is not None:
            q = q.where(t.deployment_sets.c.project == project)
        with self._read() as conn:
            return [
                GroupRow(
                    r.id,
                    r.project,
                    r.policy,
                    r.max_per_host,
                    r.max_size,
                    int(r.generation),
                    r.scope,
                )
                for r in conn.execute(q)
            ]

    def group_members(self, group_id: str) -> list[str]:
        with self._read() as conn:
            rows = conn.execute(
                select(t.instances.c.id).where(t.instances.c.server_group == group_id)
            )
            return [r.id for r in rows]

    # ------------------------------------------------------------------ claims
    def commit_placement(
        self,
        *,
        placement_id: str,
        instances: Sequence[NewInstance],
        host_generations: dict[str, int],
        group_generations: dict[str, int],
        capacities: dict[str, HostCapacity],
        evict: Sequence[tuple[str, str]] = (),
        idempotent: Idempotent | None = None,
        outcome: Outcome | None = None,
        preemptible_limit: tuple[str, int] | None = None,
    ) -> CommitResult:
        """Claim `instances` (after evicting `evict`: (instance id, reason)) all or nothing.

        Raises `GenerationConflictError` when a touched host or deployment set is no longer at the
        generation read, `PlanRejectedError` when the footprints no longer fit the current rows,
        `IdempotencyRaceError` when the idempotency key was used meanwhile. Nothing is written then.
        """
        now = time.time()
        result = CommitResult()
        try:
            if not self.sqlite and not evict and preemptible_limit is None:
                return self._commit_two_trips(
                    placement_id,
                    instances,
                    host_generations,
                    group_generations,
                    capacities,
                    idempotent,
                    outcome,
                    now,
                )
            with self._write() as conn:
                # 1. deployment sets, then hosts, each in name order (no lock-order deadlocks)
                for gid in sorted(group_generations):
                    gen = conn.execute(
                        update(t.deployment_sets)
                        .where(
                            t.deployment_sets.c.id == gid,
                            t.deployment_sets.c.generation == group_generations[gid],
                        )
                        .values(generation=t.deployment_sets.c.generation + 1)
                        .returning(t.deployment_sets.c.generation)
                    ).scalar()
                    if gen is None:
                        raise GenerationConflictError("deployment set", gid)
                    result.groups[gid] = int(gen)
                ops: dict[str, int] = dict.fromkeys(host_generations, 0)
                victims = self._victims(conn, evict)
                for v in victims:
                    if v.host not in ops:
                        raise PlanRejectedError(
                            f"eviction of {v.id!r} touches unread host {v.host!r}"
                        )
                    ops[v.host] += 1
                for inst in instances:
                    if inst.host not in ops:
                        raise PlanRejectedError(
                            f"instance {inst.id!r} on unread host {inst.host!r}"
                        )
                    ops[inst.host] += 1
                for host in sorted(host_generations):
                    res = conn.execute(
                        _HOST_CAS, {"h": host, "g": host_generations[host], "k": ops[host]}
                    )
                    if res.rowcount != 1:
                        raise GenerationConflictError("host", host)
                # 2. evictions
                items: list[tuple[str, str | None, int | None, dict[str, Any]]] = []
                step = dict.fromkeys(host_generations, 0)
                for v, (_, reason) in zip(victims, evict, strict=True):
                    conn.execute(delete(t.instances).where(t.instances.c.id == v.id))
                    self._free_ip(conn, v.network)
                    conn.execute(
                        insert(t.evictions).values(
                            instance_id=v.id,
                            host=v.host,
                            project=v.project,
                            flavor=v.flavor,
                            reason=reason,
                            placement_id=placement_id,
                            created_at=now,
                        )
                    )
                    step[v.host] += 1
                    victim_group_gen = None
                    if v.server_group is not None:
                        victim_group_gen = conn.execute(
                            update(t.deployment_sets)
                            .where(t.deployment_sets.c.id == v.server_group)
                            .values(generation=t.deployment_sets.c.generation + 1)
                            .returning(t.deployment_sets.c.generation)
                        ).scalar()
                        if v.server_group in result.groups and victim_group_gen is not None:
                            result.groups[v.server_group] = int(victim_group_gen)
                    items.append(
                        (
                            "instance_released",
                            v.host,
                            host_generations[v.host] + step[v.host],
                            {
                                "instance_id": v.id,
                                "cluster": v.cluster,
                                "server_group": v.server_group,
                                "network": v.network,
                                "group_generation": victim_group_gen,
                                "evicted": True,
                                "reason": reason,
                            },
                        )
                    )
                    result.evicted.append(v)
                # 3. re-verify the plan against the current rows of the touched hosts
                self._verify(conn, instances, capacities, group_generations)
                if preemptible_limit is not None:
                    self._verify_preemptible(conn, instances, *preemptible_limit)
                # 4. IPs, then claims
                wanted: dict[str, int] = {}
                for i in instances:
                    if i.network is not None:
                        wanted[i.network] = wanted.get(i.network, 0) + 1
                for net in sorted(wanted):
                    res = conn.execute(
                        update(t.ip_pools)
                        .where(
                            t.ip_pools.c.name == net,
                            t.ip_pools.c.used + wanted[net] <= t.ip_pools.c.total,
                        )
                        .values(used=t.ip_pools.c.used + wanted[net])
                    )
                    if res.rowcount != 1:
                        raise PlanRejectedError(f"network {net!r} has no {wanted[net]} free IPs")
                conn.execute(
                    _INSERT_INSTANCES, [_instance_values(i, placement_id, now) for i in instances]
                )
                for i in instances:
                    step[i.host] += 1
                    items.append(
                        _claimed(
                            i,
                            placement_id,
                            host_generations[i.host] + step[i.host],
                            result.groups.get(i.server_group or ""),
                            now,
                        )
                    )
                if idempotent is not None:
                    conn.execute(insert(t.idempotency).values(_idempotency_values(idempotent, now)))
                if outcome is not None:
                    self._outcome(conn, outcome, now)
                result.events = self._append(conn, items)
        except IntegrityError as exc:
            if idempotent is not None and "idempotency" in str(exc.orig).lower():
                raise IdempotencyRaceError(f"idempotency key {idempotent.key!r} was used") from None
            raise PlanRejectedError(f"conflicting write: {exc.orig}") from None
        return result

    def _commit_two_trips(
        self,
        placement_id: str,
        instances: Sequence[NewInstance],
        host_generations: dict[str, int],
        group_generations: dict[str, int],
        capacities: dict[str, HostCapacity],
        idempotent: Idempotent | None,
        outcome: Outcome | None,
        now: float,
    ) -> CommitResult:
        """`commit_placement` without evictions on PostgreSQL: the same statements, locks and
        checks in two round trips (`berth.store.pgclaim`)."""
        ops: dict[str, int] = dict.fromkeys(host_generations, 0)
        for inst in instances:
            if inst.host not in ops:
                raise PlanRejectedError(f"instance {inst.id!r} on unread host {inst.host!r}")
            ops[inst.host] += 1
        after = {gid: gen + 1 for gid, gen in group_generations.items()}  # if the check passes
        step = dict.fromkeys(host_generations, 0)
        items: list[tuple[str, str | None, int | None, dict[str, Any]]] = []
        for i in instances:
            step[i.host] += 1
            items.append(
                _claimed(
                    i,
                    placement_id,
                    host_generations[i.host] + step[i.host],
                    after.get(i.server_group or ""),
                    now,
                )
            )
        wanted: dict[str, int] = {}
        for i in instances:
            if i.network is not None:
                wanted[i.network] = wanted.get(i.network, 0) + 1
        writes = pgclaim.ClaimWrites(
            sets=[(gid, group_generations[gid]) for gid in sorted(group_generations)],
            hosts=[(h, host_generations[h], ops[h]) for h in sorted(host_generations)],
            verify_hosts=sorted({i.host for i in instances}),
            sized_sets=sorted(group_generations) if instances else [],
            networks=[(n, wanted[n]) for n in sorted(wanted)],
            instances=[_instance_values(i, placement_id, now) for i in instances],
            idempotency=None if idempotent is None else _idempotency_values(idempotent, now),
            outcome=None if outcome is None else _outcome_values(outcome, now),
            events=items,
            ts=now,
            replica=self.replica,
        )
        result = CommitResult()

        def verify(read: pgclaim.ClaimRead) -> None:
            result.groups = {gid: gen for gid, (gen, _, _, _) in read.sets.items()}
            if instances:
                sets = {
                    gid: (p, per_host, size) for gid, (_, p, per_host, size) in read.sets.items()
                }
                _check_plan(read.rows, instances, capacities, sets, read.sizes)

        ids = pgclaim.commit(self.engine, writes, verify)
        result.events = [
            EventRow(new_id, now, kind, host, gen, self.replica, payload)
            for new_id, (kind, host, gen, payload) in zip(ids, items, strict=True)
        ]
        return result

    def _verify_preemptible(
        self, conn: Connection, new: Sequence[NewInstance], region: str, limit: int
    ) -> None:
        """At most `limit` preemptible instances in the region's (IDC's) clusters, counted under
        a lock on the region's row so that concurrent commits of other replicas queue here."""
        adding = sum(1 for i in new if i.preemptible)
        if not adding:
            return
        lock = select(t.regions.c.name).where(t.regions.c.name == region)
        if not self.sqlite:  # SQLite has one writer at a time already
            lock = lock.with_for_update()
        conn.execute(lock)
        clusters = select(t.clusters.c.name).where(t.clusters.c.region == region)
        current = conn.execute(
            select(func.count()).where(
                t.instances.c.preemptible.is_(True), t.instances.c.cluster.in_(clusters)
            )
        ).scalar_one()
        if current + adding > limit:
            raise PlanRejectedError(
                f"IDC {region!r} holds {current} preemptible instances; its limit is {limit}"
            )

    def _free_ip(self, conn: Connection, network: str | None) -> None:
        if network is not None:
            conn.execute(
                update(t.ip_pools)
                .where(t.ip_pools.c.name == network, t.ip_pools.c.used > 0)
                .values(used=t.ip_pools.c.used - 1)
            )

    def _victims(self, conn: Connection, evict: Sequence[tuple[str, str]]) -> list[InstanceRow]:
        out = []
        for iid, _ in evict:
            row = conn.execute(select(t.instances).where(t.instances.c.id == iid)).first()
            if row is None:
                raise GenerationConflictError("instance", iid)
            out.append(_instance(row))
        return out

    def _verify(
        self,
        conn: Connection,
        new: Sequence[NewInstance],
        capacities: dict[str, HostCapacity],
        group_generations: dict[str, int],
    ) -> None:
        hosts = sorted({i.host for i in new})
        if not hosts:
            return
        rows = [
            (r.host, r.server_group, r.placement) for r in conn.execute(_ON_HOSTS, {"hosts": hosts})
        ]
        sets: dict[str, tuple[str, int, int | None]] = {}
        sizes: dict[str, int] = {}
        for gid in group_generations:
            g = conn.execute(select(t.deployment_sets).where(t.deployment_sets.c.id == gid)).first()
            if g is None:
                raise PlanRejectedError(f"deployment set {gid!r} no longer exists")
            sets[gid] = (g.policy, g.max_per_host, g.max_size)
            if g.max_size is not None:
                sizes[gid] = conn.execute(
                    select(func.count()).where(t.instances.c.server_group == gid)
                ).scalar_one()
        _check_plan(rows, new, capacities, sets, sizes)

    def release(
        self, instance_id: str, *, project: str | None = None, reason: str | None = None
    ) -> tuple[InstanceRow, EventRow]:
        """Delete an instance and free its footprint (bumping its host's generation).

        With `project`, only an instance of that project is found (others are "not found").
        With `reason`, the release is recorded as an eviction.
        """
        with self._write() as conn:
            q = select(t.instances).where(t.instances.c.id == instance_id)
            if project is not None:
                q = q.where(t.instances.c.project == project)
            row = conn.execute(q).first()
            if row is None:
                raise NotFoundError("instance", instance_id)
            inst = _instance(row)
            # Row locks in the claim's order (deployment set, host, instance, IP pool), so that a
            # release and a concurrent claim on PostgreSQL queue instead of deadlocking.
            group_gen = None
            if inst.server_group is not None:
                group_gen = conn.execute(
                    update(t.deployment_sets)
                    .where(t.deployment_sets.c.id == inst.server_group)
                    .values(generation=t.deployment_sets.c.generation + 1)
                    .returning(t.deployment_sets.c.generation)
                ).scalar()
            gen = conn.execute(
                update(t.hosts)
                .where(t.hosts.c.name == inst.host)
                .values(generation=t.hosts.c.generation + 1)
                .returning(t.hosts.c.generation)
            ).scalar_one()
            gone = conn.execute(delete(t.instances).where(t.instances.c.id == instance_id))
            if gone.rowcount != 1:  # released by someone else since the read: roll back
                raise NotFoundError("instance", instance_id)
            self._free_ip(conn, inst.network)
            if reason is not None:
                conn.execute(
                    insert(t.evictions).values(
                        instance_id=inst.id,
                        host=inst.host,
                        project=inst.project,
                        flavor=inst.flavor,
                        reason=reason,
                        placement_id=None,
                        created_at=time.time(),
                    )
                )
            payload = {
                "instance_id": inst.id,
                "cluster": inst.cluster,
                "network": inst.network,
                "server_group": inst.server_group,
                "group_generation": group_gen,
                "evicted": reason is not None,
                "reason": reason,
            }
            ev = self._append(conn, [("instance_released", inst.host, int(gen), payload)])
            return inst, ev[0]

    # ------------------------------------------------------------------ instances
    def get_instance(self, instance_id: str) -> InstanceRow:
        with self._read() as conn:
            row = conn.execute(select(t.instances).where(t.instances.c.id == instance_id)).first()
        if row is None:
            raise NotFoundError("instance", instance_id)
        return _instance(row)

    def list_instances(
        self,
        *,
        project: str | None = None,
        host: str | None = None,
        cluster: str | None = None,
        placement_id: str | None = None,
        server_group: str | None = None,
        limit: int = 1000,
        after: str | None = None,
    ) -> list[InstanceRow]:
        conds = []
        if project is not None:
            conds.append(t.instances.c.project == project)
        if host is not None:
            conds.append(t.instances.c.host == host)
        if cluster is not None:
            conds.append(t.instances.c.cluster == cluster)
        if placement_id is not None:
            conds.append(t.instances.c.placement_id == placement_id)
        if server_group is not None:
            conds.append(t.instances.c.server_group == server_group)
        if after is not None:
            conds.append(t.instances.c.id > after)
        q = select(t.instances).where(and_(True, *conds)).order_by(t.instances.c.id).limit(limit)
        with self._read() as conn:
            return [_instance(r) for r in conn.execute(q)]

    def list_evictions(self, project: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        q = select(t.evictions).order_by(t.evictions.c.id).limit(limit)
        if project is not None:
            q = q.where(t.evictions.c.project == project)
        with self._read() as conn:
            return [
                {
                    "id": int(r.id),
                    "instance_id": r.instance_id,
                    "host": r.host,
                    "project": r.project,
                    "flavor": r.flavor,
                    "reason": r.reason,
                    "placement_id": r.placement_id,
                    "created_at": r.created_at,
                }
                for r in conn.execute(q)
            ]

    # ------------------------------------------------------------------ idempotency & outcomes
    def get_idempotent(self, principal: str, key: str) -> Idempotent | None:
        with self._read() as conn:
            row = conn.execute(
                select(t.idempotency).where(
                    t.idempotency.c.principal == principal, t.idempotency.c.key == key
                )
            ).first()
        if row is None:
            return None
        return Idempotent(row.principal, row.key, row.request_hash, row.status, row.response)

    def _outcome(self, conn: Connection, o: Outcome, now: float) -> None:
        conn.execute(_OUTCOME, _outcome_values(o, now))

    def record_outcome(self, outcome: Outcome) -> None:
        with self._write() as conn:
            self._outcome(conn, outcome, time.time())

    def stats(self, days: int = 30, now: float | None = None) -> list[dict[str, Any]]:
        """Per day: requests, successes, success rate, failures by reason."""
        since = day_of((now or time.time()) - days * 86400)
        q = (
            select(
                t.placement_outcomes.c.day,
                t.placement_outcomes.c.outcome,
                t.placement_outcomes.c.reason,
                func.count(),
            )
            .where(t.placement_outcomes.c.day > since)
            .group_by(
                t.placement_outcomes.c.day,
                t.placement_outcomes.c.outcome,
                t.placement_outcomes.c.reason,
            )
        )
        out: dict[str, dict[str, Any]] = {}
        with self._read() as conn:
            for day, outcome, reason, n in conn.execute(q):
                d = out.setdefault(day, {"day": day, "requests": 0, "successes": 0, "failures": {}})
                d["requests"] += n
                if outcome == "success":
                    d["successes"] += n
                else:
                    d["failures"][reason] = d["failures"].get(reason, 0) + n
        for d in out.values():
            d["success_rate"] = d["successes"] / d["requests"] if d["requests"] else None
        return [out[k] for k in sorted(out)]

    # ------------------------------------------------------------------ tokens
    def create_token(
        self, name: str, role: str, project: str | None = None
    ) -> tuple[TokenRow, str]:
        """A new bearer token; the secret is returned once and only its hash is stored."""
        if role not in ROLES:
            raise InvalidReferenceError("role", f"must be one of {', '.join(ROLES)}")
        if role == "tenant" and not project:
            raise InvalidReferenceError("project", "a tenant token needs a project")
        secret = "berth_" + secrets.token_urlsafe(32)
        row = TokenRow(secrets.token_hex(8), name, role, project, False, time.time())
        with self._write() as conn:
            conn.execute(
                insert(t.tokens).values(
                    id=row.id,
                    name=name,
                    role=role,
                    project=project,
                    hash=hash_token(secret),
                    revoked=False,
                    created_at=row.created_at,
                )
            )
        return row, secret

    def lookup_token(self, secret: str) -> TokenRow | None:
        with self._read() as conn:
            r = conn.execute(select(t.tokens).where(t.tokens.c.hash == hash_token(secret))).first()
        if r is None or r.revoked:
            return None
        return TokenRow(r.id, r.name, r.role, r.project, bool(r.revoked), r.created_at)

    def list_tokens(self) -> list[TokenRow]:
        with self._read() as conn:
            rows = conn.execute(select(t.tokens).order_by(t.tokens.c.created_at))
            return [
                TokenRow(r.id, r.name, r.role, r.project, bool(r.revoked), r.created_at)
                for r in rows
            ]

    def revoke_token(self, token_id: str) -> None:
        with self._write() as conn:
            res = conn.execute(
                update(t.tokens).where(t.tokens.c.id == token_id).values(revoked=True)
            )
            if res.rowcount == 0:
                raise NotFoundError("token", token_id)

    # ------------------------------------------------------------------ checks
    def is_empty(self) -> bool:
        with self._read() as conn:
            return conn.execute(select(t.hosts.c.name).limit(1)).first() is None

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            return {
                name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
                for name, table in (
                    ("hosts", t.hosts),
                    ("instances", t.instances),
                    ("events", t.events),
                    ("flavors", t.flavors),
                )
            }


def _instance_values(i: NewInstance, placement_id: str, now: float) -> dict[str, Any]:
    """The instances row of a new claim."""
    return {
        "id": i.id,
        "project": i.project,
        "flavor": i.flavor,
        "host": i.host,
        "cluster": i.cluster,
        "server_group": i.server_group,
        "placement": i.footprint,
        "placement_id": placement_id,
        "business_type": i.business_type,
        "preemptible": i.preemptible,
        "migratable": i.migratable,
        "created_at": now if i.created_at is None else i.created_at,
        "network": i.network,
    }


def _claimed(
    i: NewInstance, placement_id: str, generation: int, group_generation: int | None, now: float
) -> tuple[str, str | None, int | None, dict[str, Any]]:
    """The `instance_claimed` event of a new claim (kind, host, generation after, payload)."""
    return (
        "instance_claimed",
        i.host,
        generation,
        {
            "instance_id": i.id,
            "cluster": i.cluster,
            "flavor": i.flavor,
            "footprint": i.footprint,
            "server_group": i.server_group,
            "group_generation": group_generation,
            "project": i.project,
            "placement_id": placement_id,
            "preemptible": i.preemptible,
            "business_type": i.business_type,
            "network": i.network,
            "created_at": now if i.created_at is None else i.created_at,
        },
    )


def _idempotency_values(d: Idempotent, now: float) -> dict[str, Any]:
    return {
        "principal": d.principal,
        "key": d.key,
        "request_hash": d.request_hash,
        "status": d.status,
        "response": d.response,
        "created_at": now,
    }


def _outcome_values(o: Outcome, now: float) -> dict[str, Any]:
    return {
        "ts": now,
        "day": day_of(now),
        "outcome": o.outcome,
        "reason": o.reason,
        "flavor": o.flavor,
        "project": o.project,
        "num_instances": o.num_instances,
        "latency_ms": o.latency_ms,
    }


def _check_plan(
    rows: Sequence[tuple[str, str | None, Footprint]],
    new: Sequence[NewInstance],
    capacities: dict[str, HostCapacity],
    sets: dict[str, tuple[str, int, int | None]],
    sizes: dict[str, int],
) -> None:
    """Re-verify a plan against the rows read in its transaction: the current instances on the
    touched hosts (host, set, footprint) plus the new ones fit every host's inventory, per NUMA
    cell and per host; each touched deployment set (policy, max per host, max size) keeps its
    anti-affinity and size. Raises `PlanRejectedError`."""
    hosts = sorted({i.host for i in new})
    by_host: dict[str, list[Footprint]] = {h: [] for h in hosts}
    members: dict[tuple[str, str], int] = {}
    for host, group, fp in rows:
        by_host[host].append(fp)
        if group is not None:
            members[(group, host)] = members.get((group, host), 0) + 1
    for i in new:
        by_host[i.host].append(i.footprint)
        if i.server_group is not None:
            members[(i.server_group, i.host)] = members.get((i.server_group, i.host), 0) + 1
    for host in hosts:
        cap = capacities.get(host)
        if cap is None:
            raise PlanRejectedError(f"no inventory given for host {host!r}")
        cell_used, host_used = sum_footprints(by_host[host], cap.device_types)
        if (cell_used > cap.cell_cap).any() or (host_used > cap.host_cap).any():
            raise PlanRejectedError(f"host {host!r} would be over-committed")
    for gid, (policy, max_per_host, max_size) in sets.items():
        if policy == "anti-affinity":
            for (group, host), n in members.items():
                if group == gid and n > max_per_host:
                    raise PlanRejectedError(
                        f"deployment set {gid!r} would have {n} members on host {host!r}"
                    )
        if max_size is not None:
            adding = sum(1 for i in new if i.server_group == gid)
            if sizes.get(gid, 0) + adding > max_size:
                raise PlanRejectedError(f"deployment set {gid!r} would exceed {max_size} members")


def _an_instance(conn: Connection, column: Any, value: str) -> str | None:
    """The id of some instance whose `column` equals `value` (what keeps a row in use), or None."""
    row = conn.execute(select(t.instances.c.id).where(column == value).limit(1)).first()
    return None if row is None else str(row.id)
