"""Instance rows: reads, the eviction log, and the helpers other writes use on them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, select, update

from berth.store import schema as t
from berth.store.db import Database
from berth.store.errors import NotFoundError
from berth.store.records import InstanceRow, instance_row


class Instances(Database):
    """Reading instances and evictions (claims and releases write them: `berth.store.claims`)."""

    def get_instance(self, instance_id: str) -> InstanceRow:
        with self._read() as conn:
            row = conn.execute(select(t.instances).where(t.instances.c.id == instance_id)).first()
        if row is None:
            raise NotFoundError("instance", instance_id)
        return instance_row(row)

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
            return [instance_row(r) for r in conn.execute(q)]

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


def an_instance(conn: Connection, where: Any) -> str | None:
    """The id of some instance matching `where` (what keeps a row in use), or None."""
    row = conn.execute(select(t.instances.c.id).where(where).limit(1)).first()
    return None if row is None else str(row.id)


def free_ip(conn: Connection, network: str | None) -> None:
    """Give one IP back to `network` (None: the instance took none)."""
    if network is not None:
        conn.execute(
            update(t.ip_pools)
            .where(t.ip_pools.c.name == network, t.ip_pools.c.used > 0)
            .values(used=t.ip_pools.c.used - 1)
        )
