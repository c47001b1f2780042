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


def _refused(data: dict[str, Any], tmp_path: Path, *needles: str) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(data))
    db = f"sqlite:///{tmp_path / 'berth.db'}"
    result = runner.invoke(app, ["db", "load-topology", "--topology", str(path), "--db", db])
    assert result.exit_code == 2, result.output
    for needle in needles:
        assert needle in result.output, result.output
    assert all(n == 0 for n in _row_counts(db).values()), _row_counts(db)


def test_a_set_over_its_max_size_is_refused(tmp_path: Path) -> None:
    data = _demo()
    size = sum(1 for i in _instances(data) if i.get("deployment_set") == "web-prod")
    for ds in data["deployment_sets"]:
        if ds["name"] == "web-prod":
            ds["max_size"] = size - 1
    _refused(data, tmp_path, "'web-prod'", f"max_size of {size - 1}")


def test_a_rack_scoped_set_with_two_members_in_a_rack_is_refused(tmp_path: Path) -> None:
    data = _demo()
    for ds in data["deployment_sets"]:
        if ds["name"] == "web-prod":
            ds["scope"] = "rack"
    first, second = [i for i in _instances(data) if i.get("deployment_set") == "web-prod"][:2]
    for region in data["regions"]:
        for idc in region["idcs"]:
            for cluster in idc["clusters"]:
                for host in cluster["hosts"]:
                    host.pop("rack", None)
                    if host["name"] in (first["host"], second["host"]):
                        host["rack"] = "r-07"
    _refused(data, tmp_path, "'web-prod'", "rack 'r-07'")
