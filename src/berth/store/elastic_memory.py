"""What the elastic control loop remembers across restarts: the backoff and hysteresis history
of each group and cluster, and the demand samples of the tidal power forecast."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert, select

from berth.store import schema as t
from berth.store.db import Database
from berth.store.elastic_rows import BackoffRow
from berth.store.errors import InvalidReferenceError

KINDS = ("group", "cluster")


class ElasticMemory(Database):
    """Backoff history and demand samples."""

    def save_elastic_backoff(self, rows: Sequence[BackoffRow]) -> None:
        """Replace the remembered history with `rows`, in one transaction."""
        for r in rows:
            if r.kind not in KINDS:
                raise InvalidReferenceError("kind", f"must be group or cluster, not {r.kind!r}")
            if r.failures < 0:
                raise InvalidReferenceError("failures", f"must be >= 0, not {r.failures}")
        with self._write() as conn:
            conn.execute(delete(t.elastic_backoff))
            if rows:
                conn.execute(insert(t.elastic_backoff), [vars(r) for r in rows])

    def elastic_backoff(self) -> list[BackoffRow]:
        with self._read() as conn:
            b = t.elastic_backoff.c
            rows = conn.execute(select(t.elastic_backoff).order_by(b.kind, b.name))
            return [
                BackoffRow(r.kind, r.name, r.last_start, r.last_drain, r.failures, r.last_failure)
                for r in rows
            ]

    def record_demand(self, at: float, cores: float, *, keep_since: float | None = None) -> None:
        """Add a demand sample (cores wanted at `at`); drop the samples before `keep_since`."""
        if cores < 0:
            raise InvalidReferenceError("cores", f"must be >= 0, not {cores}")
        with self._write() as conn:
            conn.execute(insert(t.elastic_demand).values(at=at, cores=cores))
            if keep_since is not None:
                conn.execute(delete(t.elastic_demand).where(t.elastic_demand.c.at < keep_since))

    def demand_samples(self, since: float | None = None) -> list[tuple[float, float]]:
        """(time, cores) samples from `since` on, oldest first."""
        q = select(t.elastic_demand.c.at, t.elastic_demand.c.cores).order_by(
            t.elastic_demand.c.at, t.elastic_demand.c.id
        )
        if since is not None:
            q = q.where(t.elastic_demand.c.at >= since)
        with self._read() as conn:
            return [(float(a), float(c)) for a, c in conn.execute(q)]
