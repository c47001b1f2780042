"""Clusters driven through a cloud driver and the servers Berth boots in them.

`cloud_clusters` holds one row per cluster that joined with a driver: its kind, its connection
config (endpoints and a credential *reference*: secrets stay in the environment or a file the
driver reads), its state (`joining` while its inventory is imported, `joined`, `leaving`) and
the change feed's cursor. `cloud_servers` holds one row per server Berth booted or adopted,
keyed by the instance id, which is also the server's name in the cloud: the row is written in
state `intent` *before* the cloud is asked, so that a retry or a restarted replica finds the
server by name and adopts it instead of booting a second one (docs/openstack.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from berth.store import schema as t
from berth.store.db import Database
from berth.store.errors import AlreadyExistsError, NotFoundError
from berth.store.records import CloudClusterRow, ServerRecord

CLOUD_STATES = ("joining", "joined", "leaving")
SERVER_STATES = (
    "intent",
    "building",
    "active",
    "migrating",
    "shutoff",
    "error",
    "deleted",
    "failed",
)
"""`intent`: written, the cloud not answered yet; `failed`: Berth gave up (claim released,
`fault` says why); the others are the cloud's own states."""


class Clouds(Database):
    """Cloud clusters (kind, config, state, cursor) and the servers Berth boots in them."""

    # ------------------------------------------------------------------ clusters
    def add_cloud(self, cluster: str, kind: str, config: dict[str, Any]) -> CloudClusterRow:
        """Record that `cluster` (already a cluster row) is driven by a `kind` driver."""
        now = time.time()
        try:
            with self._write() as conn:
                conn.execute(
                    insert(t.cloud_clusters).values(
                        cluster=cluster,
                        kind=kind,
                        config=config,
                        state="joining",
                        created_at=now,
                        changed_at=now,
                    )
                )
                self._append(
                    conn, [("cloud_joining", None, None, {"cluster": cluster, "kind": kind})]
                )
        except IntegrityError:
            raise AlreadyExistsError("cloud cluster", cluster) from None
        return self.get_cloud(cluster)

    def get_cloud(self, cluster: str) -> CloudClusterRow:
        with self._read() as conn:
            row = conn.execute(
                select(t.cloud_clusters).where(t.cloud_clusters.c.cluster == cluster)
            ).first()
        if row is None:
            raise NotFoundError("cloud cluster", cluster)
        return _cloud_row(row)

    def list_clouds(self, states: Sequence[str] | None = None) -> list[CloudClusterRow]:
        q = select(t.cloud_clusters).order_by(t.cloud_clusters.c.cluster)
        if states is not None:
            q = q.where(t.cloud_clusters.c.state.in_(list(states)))
        with self._read() as conn:
            return [_cloud_row(r) for r in conn.execute(q)]

    def set_cloud_state(self, cluster: str, state: str) -> None:
        if state not in CLOUD_STATES:
            raise ValueError(f"state: {state!r} is not one of {', '.join(CLOUD_STATES)}")
        with self._write() as conn:
            res = conn.execute(
                update(t.cloud_clusters)
                .where(t.cloud_clusters.c.cluster == cluster)
                .values(state=state, changed_at=time.time())
            )
            if res.rowcount == 0:
                raise NotFoundError("cloud cluster", cluster)
            self._append(conn, [(f"cloud_{state}", None, None, {"cluster": cluster})])

    def save_cursor(self, cluster: str, cursor: str | None, *, reconciled: bool = False) -> None:
        """Remember where the change feed stopped (and, after a full reconcile, when)."""
        values: dict[str, Any] = {"cursor": cursor}
        if reconciled:
            values["reconciled_at"] = time.time()
        with self._write() as conn:
            conn.execute(
                update(t.cloud_clusters)
                .where(t.cloud_clusters.c.cluster == cluster)
                .values(**values)
            )

    def heartbeat_cluster(self, cluster: str, now: float) -> int:
        """The cloud answered for `cluster`: its hosts' heartbeats are `now` (rows locked in
        name order, the order a placement locks hosts). The number of hosts."""
        with self._write() as conn:
            names = list(
                conn.execute(
                    select(t.hosts.c.name)
                    .where(t.hosts.c.cluster == cluster)
                    .order_by(t.hosts.c.name)
                    .with_for_update(key_share=True)
                ).scalars()
            )
            if names:
                conn.execute(
                    update(t.hosts).where(t.hosts.c.cluster == cluster).values(last_heartbeat=now)
                )
            return len(names)

    # ------------------------------------------------------------------ servers
    def put_intent(
        self, instance_id: str, cluster: str, host: str, flavor: str, alternates: Sequence[str]
    ) -> ServerRecord:
        """Write (or rewrite, for a retry on another host) a boot intent, before the cloud call.
        The hosts already tried stay recorded."""
        now = time.time()
        with self._write() as conn:
            old = conn.execute(
                select(t.cloud_servers.c.tried, t.cloud_servers.c.created_at).where(
                    t.cloud_servers.c.instance_id == instance_id
                )
            ).first()
            values = {
                "cluster": cluster,
                "server_id": None,
                "host": host,
                "flavor": flavor,
                "state": "intent",
                "fault": None,
                "alternates": list(alternates),
                "updated_at": now,
            }
            if old is None:
                conn.execute(
                    insert(t.cloud_servers).values(
                        instance_id=instance_id, tried=[], created_at=now, **values
                    )
                )
            else:
                conn.execute(
                    update(t.cloud_servers)
                    .where(t.cloud_servers.c.instance_id == instance_id)
                    .values(**values)
                )
        return self.get_server(instance_id)

    def put_intents(self, rows: Sequence[tuple[str, str, str, str, Sequence[str]]]) -> None:
        """Boot intents (instance id, cluster, host, flavor, alternates) in one transaction."""
        now = time.time()
        with self._write() as conn:
            conn.execute(
                insert(t.cloud_servers),
                [
                    {
                        "instance_id": iid,
                        "cluster": cluster,
                        "server_id": None,
                        "host": host,
                        "flavor": flavor,
                        "state": "intent",
                        "fault": None,
                        "alternates": list(alternates),
                        "tried": [],
                        "created_at": now,
                        "updated_at": now,
                    }
                    for iid, cluster, host, flavor, alternates in rows
                ],
            )

    def set_server(
        self,
        instance_id: str,
        *,
        state: str,
        server_id: str | None = None,
        host: str | None = None,
        fault: str | None = None,
        tried: dict[str, str] | None = None,
        alternates: Sequence[str] | None = None,
    ) -> ServerRecord:
        """Record what the cloud said of a server (its id once known, state, host, fault);
        `tried` appends a failed attempt {host, error}."""
        if state not in SERVER_STATES:
            raise ValueError(f"state: {state!r} is not one of {', '.join(SERVER_STATES)}")
        with self._write() as conn:
            row = conn.execute(
                select(t.cloud_servers).where(t.cloud_servers.c.instance_id == instance_id)
            ).first()
            if row is None:
                raise NotFoundError("server of instance", instance_id)
            values: dict[str, Any] = {"state": state, "fault": fault, "updated_at": time.time()}
            if server_id is not None:
                values["server_id"] = server_id
            if host is not None:
                values["host"] = host
            if tried is not None:
                values["tried"] = [*row.tried, tried]
            if alternates is not None:
                values["alternates"] = list(alternates)
            conn.execute(
                update(t.cloud_servers)
                .where(t.cloud_servers.c.instance_id == instance_id)
                .values(**values)
            )
        return self.get_server(instance_id)

    def record_boot(self, instance_id: str, server_id: str, state: str, host: str) -> ServerRecord:
        """What `boot` answered, unless the change feed already recorded this server (its news
        is newer than the boot's answer): one conditional UPDATE."""
        with self._write() as conn:
            conn.execute(
                update(t.cloud_servers)
                .where(
                    t.cloud_servers.c.instance_id == instance_id,
                    or_(
                        t.cloud_servers.c.server_id.is_(None),
                        t.cloud_servers.c.server_id != server_id,
                    ),
                )
                .values(
                    server_id=server_id,
                    state=state,
                    host=host,
                    fault=None,
                    updated_at=time.time(),
                )
            )
        return self.get_server(instance_id)

    def adopt_server(
        self, instance_id: str, cluster: str, server_id: str, host: str, flavor: str, state: str
    ) -> ServerRecord:
        """Record a server Berth did not boot (imported with its cluster, or found running)."""
        now = time.time()
        with self._write() as conn:
            conn.execute(
                delete(t.cloud_servers).where(t.cloud_servers.c.instance_id == instance_id)
            )
            conn.execute(
                insert(t.cloud_servers).values(
                    instance_id=instance_id,
                    cluster=cluster,
                    server_id=server_id,
                    host=host,
                    flavor=flavor,
                    state=state,
                    fault=None,
                    alternates=[],
                    tried=[],
                    created_at=now,
                    updated_at=now,
                )
            )
        return self.get_server(instance_id)

    def get_server(self, instance_id: str) -> ServerRecord:
        with self._read() as conn:
            row = conn.execute(
                select(t.cloud_servers).where(t.cloud_servers.c.instance_id == instance_id)
            ).first()
        if row is None:
            raise NotFoundError("server of instance", instance_id)
        return _server_row(row)

    def server_by_cloud_id(self, cluster: str, server_id: str) -> ServerRecord | None:
        """The record of `cluster`'s server `server_id` (ids are a cloud's own), if any."""
        with self._read() as conn:
            row = conn.execute(
                select(t.cloud_servers)
                .where(
                    t.cloud_servers.c.cluster == cluster,
                    t.cloud_servers.c.server_id == server_id,
                )
                .limit(1)
            ).first()
        return None if row is None else _server_row(row)

    def find_server(self, instance_id: str) -> ServerRecord | None:
        try:
            return self.get_server(instance_id)
        except NotFoundError:
            return None

    def list_servers(
        self,
        cluster: str | None = None,
        states: Sequence[str] | None = None,
        instance_ids: Sequence[str] | None = None,
    ) -> list[ServerRecord]:
        q = select(t.cloud_servers).order_by(t.cloud_servers.c.instance_id)
        if cluster is not None:
            q = q.where(t.cloud_servers.c.cluster == cluster)
        if states is not None:
            q = q.where(t.cloud_servers.c.state.in_(list(states)))
        if instance_ids is not None:
            q = q.where(t.cloud_servers.c.instance_id.in_(list(instance_ids)))
        with self._read() as conn:
            return [_server_row(r) for r in conn.execute(q)]

    def forget_server(self, instance_id: str) -> None:
        with self._write() as conn:
            conn.execute(
                delete(t.cloud_servers).where(t.cloud_servers.c.instance_id == instance_id)
            )


def _cloud_row(r: Any) -> CloudClusterRow:
    return CloudClusterRow(
        r.cluster,
        r.kind,
        dict(r.config),
        r.state,
        r.cursor,
        r.reconciled_at,
        float(r.created_at),
    )


def _server_row(r: Any) -> ServerRecord:
    return ServerRecord(
        r.instance_id,
        r.cluster,
        r.server_id,
        r.host,
        r.flavor,
        r.state,
        r.fault,
        tuple(r.alternates),
        tuple(r.tried),
        float(r.created_at),
        float(r.updated_at),
    )
