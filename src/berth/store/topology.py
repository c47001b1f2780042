"""Regions, clusters, pools, aggregates and PCI aliases: the rows that place hosts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from berth.core.model import Aggregate, PciAlias
from berth.store import schema as t
from berth.store.db import Database
from berth.store.errors import AlreadyExistsError, InvalidReferenceError, NotFoundError
from berth.store.records import ClusterRow, PoolRow


class Topology(Database):
    """Regions, clusters (joining and leaving), pools, aggregates and PCI aliases."""

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
