"""Idempotency records and placement outcomes (the daily success rates of `stats`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select

from berth.store import schema as t
from berth.store.db import Database
from berth.store.records import Idempotent, Outcome, OutcomeRow

_OUTCOME = insert(t.placement_outcomes)

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


class Outcomes(Database):
    """Idempotency records (written with a claim) and placement outcomes."""

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

    def record_outcome(self, outcome: Outcome) -> None:
        with self._write() as conn:
            record_outcome_in(conn, outcome, time.time())

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

    def outcomes_after(
        self, after: int, limit: int = 100, project: str | None = None
    ) -> list[OutcomeRow]:
        """Placement decisions with an id above `after`, oldest first (of `project` only if
        given): the dashboard's decision stream tails them."""
        c = t.placement_outcomes.c
        q = select(t.placement_outcomes).where(c.id > after)
        if project is not None:
            q = q.where(c.project == project)
        with self._read() as conn:
            rows = conn.execute(q.order_by(c.id).limit(limit))
            return [_outcome_row(r) for r in rows]

    def recent_outcomes(self, limit: int = 50, project: str | None = None) -> list[OutcomeRow]:
        """The newest `limit` placement decisions, oldest first (of `project` only if given)."""
        c = t.placement_outcomes.c
        q = select(t.placement_outcomes)
        if project is not None:
            q = q.where(c.project == project)
        with self._read() as conn:
            rows = list(conn.execute(q.order_by(c.id.desc()).limit(limit)))
        return [_outcome_row(r) for r in reversed(rows)]


def _outcome_row(r: Any) -> OutcomeRow:
    return OutcomeRow(
        int(r.id),
        float(r.ts),
        r.outcome,
        r.reason,
        r.flavor,
        r.project,
        int(r.num_instances),
        float(r.latency_ms),
        r.business_type,
        r.detail,
        r.why,
    )


def record_outcome_in(conn: Connection, o: Outcome, now: float) -> None:
    conn.execute(_OUTCOME, outcome_values(o, now))


def idempotency_values(d: Idempotent, now: float) -> dict[str, Any]:
    return {
        "principal": d.principal,
        "key": d.key,
        "request_hash": d.request_hash,
        "status": d.status,
        "response": d.response,
        "created_at": now,
    }


def outcome_values(o: Outcome, now: float) -> dict[str, Any]:
    """The row of an outcome; `why` only when there is one, so a decision without it writes
    exactly the statement it wrote before the column existed."""
    values = {
        "ts": now,
        "day": day_of(now),
        "outcome": o.outcome,
        "reason": o.reason,
        "flavor": o.flavor,
        "project": o.project,
        "num_instances": o.num_instances,
        "latency_ms": o.latency_ms,
        "business_type": o.business_type,
        "detail": o.detail,
    }
    if o.why is not None:
        values["why"] = o.why
    return values
