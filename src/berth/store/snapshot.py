"""What a replica reads to build its tables and keep them current: the snapshot, the event log
after it, and the row counts of the whole store."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, or_, select

from berth.core.model import Aggregate, Flavor, PciAlias
from berth.store import schema as t
from berth.store.db import Database
from berth.store.hosts import read_hosts
from berth.store.records import (
    ClusterRow,
    EventRow,
    PoolRow,
    Snapshot,
    event_row,
    group_row,
    instance_row,
)

RECENT_IDS = 10_000  # how far back a snapshot looks for event ids not committed yet


class Snapshots(Database):
    """The snapshot and the event log (read only)."""

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
            groups = {g.key: g for g in map(group_row, conn.execute(select(t.deployment_sets)))}
            hosts = read_hosts(conn)
            instances = [
                instance_row(r)
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
            return [event_row(r) for r in rows]

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
