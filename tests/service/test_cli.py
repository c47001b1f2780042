"""The service commands: db upgrade / load-demo / load-topology, admin create-token, serve, and
the `berth api ...` client against a real `berth serve` process (SQLite, loopback)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.cli.main import app
from tests.service.servers import BERTH, start, wait_ready

runner = CliRunner()


def berth(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BERTH, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_db_and_admin_commands(tmp_path: Path):
    data = str(tmp_path / "d")
    result = runner.invoke(app, ["db", "upgrade", "--data-dir", data])
    assert result.exit_code == 0, result.output
    assert "revision 0010" in result.output
    result = runner.invoke(app, ["db", "load-demo", "--data-dir", data])
    assert result.exit_code == 0, result.output
    assert "'hosts': 270" in result.output
    again = runner.invoke(app, ["db", "load-demo", "--data-dir", data])
    assert again.exit_code == 2  # not into a database that holds hosts
    token = runner.invoke(
        app, ["admin", "create-token", "--role", "tenant", "--project", "p1", "--data-dir", data]
    )
    assert token.exit_code == 0, token.output
    assert token.stdout.strip().splitlines()[0].startswith("berth_")
    bad = runner.invoke(app, ["admin", "create-token", "--role", "root", "--data-dir", data])
    assert bad.exit_code == 2
    topo = runner.invoke(app, ["db", "load-topology", "--data-dir", str(tmp_path / "t")])
    assert topo.exit_code == 0, topo.output
    assert "'hosts': 235" in topo.output


@pytest.mark.slow
def test_serve_and_the_api_client(tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'berth.db'}"
    server = start(db, "cli", tmp_path, "--load-demo", "--print-admin-token")
    try:
        wait_ready([server])
        log = server.log.read_text()
        assert "URL: http://localhost:" in log
        assert f"dashboard: http://localhost:{server.url.rsplit(':', 1)[1]}/dashboard/" in log
        token = next(line.split()[-1] for line in log.splitlines() if "admin token" in line)
        common = ["--url", server.url, "--token", token]
        placed = berth("api", "place", "--flavor", "c3.4xlarge.numa1", "-n", "2", "--json", *common)
        assert placed.returncode == 0, placed.stderr
        body = json.loads(placed.stdout)
        assert len(body["instances"]) == 2
        table = berth("api", "place", "--flavor", "c3.large", *common)
        assert table.returncode == 0
        assert "placement p-" in table.stdout
        nothing = berth("api", "place", "--flavor", "gn3.4xlarge", "-n", "90", *common)
        assert nothing.returncode == 1
        assert "no_valid_host" in nothing.stderr
        unknown = berth("api", "place", "--flavor", "nope", *common)
        assert unknown.returncode == 2
        cap = berth("api", "capacity", "--flavor", "c3.large", "--by", "region", "--json", *common)
        assert cap.returncode == 0, cap.stderr
        assert set(json.loads(cap.stdout)["counts"]) == {"idc-north", "idc-east"}
        assert "Remaining capacity" in berth("api", "capacity", *common).stdout
        hosts = berth("api", "hosts", "--cluster", "az1", "--json", *common)
        assert len(json.loads(hosts.stdout)) == 91
        assert "hosts" in berth("api", "hosts", *common).stdout
        insts = berth("api", "instances", "--json", "--limit", "5", *common)
        assert len(json.loads(insts.stdout)) == 5
        iid = body["instances"][0]["id"]
        assert berth("api", "delete", iid, *common).returncode == 0
        assert berth("api", "delete", iid, *common).returncode == 2
        denied = berth("api", "instances", "--url", server.url, "--token", "nope")
        assert denied.returncode == 2
        assert "unauthenticated" in denied.stderr
        down = berth("api", "hosts", "--url", "http://127.0.0.1:9", "--token", token)
        assert down.returncode == 3
    finally:
        server.stop()
