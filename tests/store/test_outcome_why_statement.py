"""An outcome without a why writes the statement it wrote before the `why` column existed, on
both commit paths: the decision stream's why costs nothing when not recorded (docs/why.md)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import event

from berth.store import pgclaim
from berth.store.outcomes import outcome_values
from berth.store.repo import Outcome, Store

PLAIN = Outcome("success", "placed", "p4", "default", 1, 1.0, "on-demand", "c1: h-c1-0")
WHY = {"v": 1, "instances": [{"id": "i-1", "decided_by": "vcpu", "margin": 0.25}]}
BEFORE = (  # the outcome insert of the two-round-trip claim before migration 0010
    "INSERT INTO placement_outcomes (ts, day, outcome, reason, flavor, project, num_instances, "
    "latency_ms, business_type, detail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def _writes(outcome: Outcome) -> tuple[list[str], list[Any], str]:
    w = pgclaim.ClaimWrites(
        sets=[],
        hosts=[],
        verify_hosts=[],
        sized_sets=[],
        networks=[],
        instances=[],
        idempotency=None,
        outcome=outcome_values(outcome, 1.0),
        events=[],
        ts=1.0,
        replica="r1",
    )
    return pgclaim._writes(w)


def test_postgresql_claim_sends_the_old_statement_without_a_why() -> None:
    parts, params, _ = _writes(PLAIN)
    assert parts == [f"o AS ({BEFORE})"]
    assert len(params) == 10
    parts, params, _ = _writes(replace(PLAIN, why=WHY))
    assert "detail, why) VALUES" in parts[0]
    assert len(params) == 11
    assert params[-1].obj == WHY  # bound as JSONB


def test_sqlite_outcome_insert_names_why_only_when_there_is_one(
    migrated_sqlite: Path, tmp_path: Path
) -> None:
    db = tmp_path / "berth.db"
    shutil.copy(migrated_sqlite, db)
    store = Store.open(f"sqlite:///{db}", replica="r1")
    seen: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "placement_outcomes" in statement and statement.startswith("INSERT"):
            seen.append(statement)

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        store.record_outcome(PLAIN)
        store.record_outcome(replace(PLAIN, why=WHY))
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)
    assert len(seen) == 2
    assert "why" not in seen[0]
    assert "why" in seen[1]
    assert [r.why for r in store.recent_outcomes(2)] == [None, WHY]
    store.close()
