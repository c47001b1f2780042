"""Hosts: their inventory rows, enabling, heartbeats and reports, and reconciliation."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, delete, false, func, insert, or_, select, update

from berth.core.model import Host, NumaCell
from berth.store import schema as t
from berth.store.db import Database, retry_aborted
from berth.store.errors import AlreadyExistsError, InUseError, InvalidReferenceError, NotFoundError
from berth.store.instances import an_instance
from berth.store.records import EventRow, HostRecord

_CHUNK = 5000
"""Hosts per UPDATE of the bulk heartbeat (SQLite allows 32,766 parameters a statement)."""


class Hosts(Database):
    """Adding, removing, reading and reporting hosts."""

    def add_hosts(self, cluster: str, hosts: Sequence[tuple[Host, str | None]]) -> None:
        """Add hosts (with their pool) to a cluster: one transaction, one `hosts_added` event.

        A host added to a pool carries the pool's trait (added when missing), so that the
        pool's placements, which require that trait, can choose it."""
        now = time.time()
        with self._write() as conn:
            if not conn.execute(
                select(t.clusters.c.name).where(t.clusters.c.name == cluster)
            ).first():
                raise InvalidReferenceError("cluster", f"unknown cluster {cluster!r}")
            pools = {
                r.name: r.trait
                for r in conn.execute(
                    select(t.pools.c.name, t.pools.c.trait).where(t.pools.c.cluster == cluster)
                )
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
                if pool is not None and pools[pool] not in host.traits:
                    # placements choose a pool's hosts by its trait (docs/api.md, `/v1/pools`)
                    host = host.model_copy(update={"traits": [*host.traits, pools[pool]]})
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
            used = an_instance(conn, t.instances.c.host == name)
            if used is not None:
                raise InUseError(f"host {name!r} still runs instance {used!r}")
            conn.execute(delete(t.host_cells).where(t.host_cells.c.host == name))
            if conn.execute(delete(t.hosts).where(t.hosts.c.name == name)).rowcount == 0:
                raise NotFoundError("host", name)
            self._append(conn, [("host_removed", name, None, {"name": name})])

    def get_host(self, name: str) -> HostRecord:
        with self._read() as conn:
            found = read_hosts(conn, [name])
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
            return read_hosts(conn, names)

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
        not_after: float | None = None,
    ) -> bool:
        """Record a heartbeat (and the host's own view when given); older never overwrite newer.

        With `not_after` (the caller's clock plus the allowed skew), a stored heartbeat or report
        later than it is invalid (written before reports were checked, e.g. the year 2500) and
        is replaced by this one, so that the host's real reports count again.

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
            last = _valid(cur.last_heartbeat, not_after)
            if last is None or timestamp > last:
                values["last_heartbeat"] = timestamp
            report_ts = _valid(cur.report_ts, not_after)
            if report is not None and (report_ts is None or timestamp > report_ts):
                values["report"] = report
                values["report_ts"] = timestamp
            if not values:
                return False
            conn.execute(update(t.hosts).where(t.hosts.c.name == name).values(**values))
            revived = "last_heartbeat" in values and (
                last is None or (down_after is not None and timestamp - last > down_after)
            )
            if down_after is not None and revived:
                payload = {"heartbeat": timestamp, "previous": last}
                self._append(conn, [("host_alive", name, None, payload)])
            return True

    def touch_heartbeats(self, now: float, max_age: float, max_skew: float | None = None) -> int:
        """Heartbeat, at `now`, every host whose last heartbeat is within `max_age` of the
        freshest one (`berth serve --simulate-agents`, the demo's stand-in for compute agents:
        hosts that were down stay down, even after the service was stopped for a while).
        With `max_skew`, a heartbeat more than that ahead of `now` is invalid: it neither
        counts as the freshest nor survives (the host is touched at `now`).

        The rows are locked in name order first, the order a placement locks the hosts it
        touches (`berth.store.pgclaim`): one bulk UPDATE would lock them in the order it finds
        them on disk, and deadlock with a placement on PostgreSQL. A writer that still takes
        them in another order makes PostgreSQL abort one side: this one then runs again.
        """
        return retry_aborted(lambda: self._touch_heartbeats(now, max_age, max_skew))

    def _touch_heartbeats(self, now: float, max_age: float, max_skew: float | None) -> int:
        beat = t.hosts.c.last_heartbeat
        poisoned = false() if max_skew is None else beat > now + max_skew
        with self._write() as conn:
            freshest = conn.execute(select(func.max(beat)).where(~poisoned)).scalar()
            if freshest is None:
                freshest = now
            names = list(
                conn.execute(
                    select(t.hosts.c.name)
                    .where(
                        or_(
                            and_(beat >= min(now, float(freshest)) - max_age, beat < now),
                            poisoned,
                        )
                    )
                    .order_by(t.hosts.c.name)
                    .with_for_update(key_share=True)
                ).scalars()
            )
            for chunk in range(0, len(names), _CHUNK):
                conn.execute(
                    update(t.hosts)
                    .where(t.hosts.c.name.in_(names[chunk : chunk + _CHUNK]))
                    .values(last_heartbeat=now)
                )
            return len(names)

    def reconcile(self, hosts: Sequence[str] | None = None) -> list[EventRow]:
        """Compare each host's latest reported instances with the instances Berth records.

        Every discrepancy (an instance Berth knows that the host does not report, or one the host
        runs that Berth does not know) is recorded as a `discrepancy` event. A report is
        reconciled once; a host that never reported its instances is skipped. Aborted as a
        deadlock on PostgreSQL, it runs again (`retry_aborted`).
        """
        return retry_aborted(lambda: self._reconcile(hosts))

    def _reconcile(self, hosts: Sequence[str] | None) -> list[EventRow]:
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
            q = q.order_by(t.hosts.c.name)  # the hosts' rows are locked in name order
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

    def heartbeats_since(self, since: float) -> list[tuple[str, float]]:
        with self._read() as conn:
            rows = conn.execute(
                select(t.hosts.c.name, t.hosts.c.last_heartbeat).where(
                    t.hosts.c.last_heartbeat > since
                )
            )
            return [(r.name, float(r.last_heartbeat)) for r in rows]


def read_hosts(conn: Connection, names: Sequence[str] | None = None) -> list[HostRecord]:
    """The host records (with their NUMA cells) of `names`, or of every host, in creation order."""
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
        out.append(HostRecord(host, r.cluster, r.pool, int(r.generation), r.report, r.report_ts))
    return out


def _host_spec(host: Host) -> dict[str, Any]:
    return host.model_dump(mode="json", exclude={"numa_cells", "enabled", "last_heartbeat"})


def _valid(ts: float | None, not_after: float | None) -> float | None:
    """A stored timestamp, or None when there is none or it lies beyond `not_after`."""
    if ts is None or (not_after is not None and ts > not_after):
        return None
    return float(ts)
