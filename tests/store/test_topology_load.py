"""`berth db load-topology` writes all or nothing: a topology that breaks a rule (here a
deployment set's anti-affinity) is refused before any row is written, so a corrected retry on
the same database succeeds. Runs on SQLite and on real PostgreSQL (`db_url`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import func, select
from typer.testing import CliRunner

from berth.cli.main import app
from berth.policy.demo import shipped_path
from berth.store import schema as t
from berth.store.db import make_engine

runner = CliRunner()


def _demo() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(Path(shipped_path("demo-topology.yaml")).read_text())
    return data


def _instances(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        i
        for r in data["regions"]
        for idc in r["idcs"]
        for c in idc["clusters"]
        for i in c.get("instances", [])
    ]


def _row_counts(url: str) -> dict[str, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {
                table.name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
                for table in t.metadata.sorted_tables
            }
    finally:
        engine.dispose()


def test_failed_load_writes_nothing_and_a_retry_succeeds(db_url: str, tmp_path: Path) -> None:
    data = _demo()
    members = [i for i in _instances(data) if i.get("deployment_set") == "web-prod"]
    moved = members[1]
    good_host = moved["host"]
    moved["host"] = members[0]["host"]  # two members of an anti-affinity set on one host
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    failed = runner.invoke(app, ["db", "load-topology", "--topology", str(bad), "--db", db_url])
    assert failed.exit_code == 2, failed.output
    assert "web-prod" in failed.output
    assert len(failed.output.strip().splitlines()) == 1
    assert all(n == 0 for n in _row_counts(db_url).values()), _row_counts(db_url)

    moved["host"] = good_host
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(yaml.safe_dump(data))
    retry = runner.invoke(app, ["db", "load-topology", "--topology", str(fixed), "--db", db_url])
    assert retry.exit_code == 0, retry.output
    assert "'hosts': 235" in retry.output
