"""A new user's first steps through the real `berth` command: `make run`'s serve, a token from
`berth admin create-token` in the same directory, a second start, and tables an id can be copied
from."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.service.servers import BERTH, Server, free_port, wait_ready


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("BERTH_DATA_DIR", "BERTH_DB")}
    return subprocess.run(
        [BERTH, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "COLUMNS": "80"},
    )


def _serve(cwd: Path, port: int, name: str) -> Server:
    """`make run`'s command line (the default data dir) on a free port."""
    log = cwd / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if k not in ("BERTH_DATA_DIR", "BERTH_DB")}
    proc = subprocess.Popen(
        [BERTH, "serve", "--load-demo", "--print-admin-token", "--port", str(port)],
        cwd=cwd,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )
    return Server(proc, f"http://127.0.0.1:{port}", name, log)


def _printed_token(server: Server) -> str:
    found = re.search(r"admin token: (\S+)", server.log.read_text())
    assert found, server.log.read_text()
    return found.group(1)


def _whole_in_table(table: str, values: set[str]) -> None:
    assert "…" not in table, table
    cells = set(re.findall(r"[^\s│┃]+", table))
    missing = values - cells
    assert not missing, f"cut or missing: {sorted(missing)[:5]}\n{table}"


def _instances_table_shows_whole_ids(cwd: Path, url: str, token: str) -> None:
    """`berth api instances` at 80 columns and piped prints ids that can be passed back."""
    args = ("api", "instances", "--limit", "20", "--url", url, "--token", token)
    listed = json.loads(_run(cwd, *args, "--json").stdout)
    assert listed
    table = _run(cwd, *args)
    assert table.returncode == 0, table.stderr
    _whole_in_table(table.stdout, {i["id"] for i in listed} | {i["host"] for i in listed})


@pytest.mark.slow
def test_place_table_keeps_ids_and_host_names_whole_at_80_columns(tmp_path: Path) -> None:
    args = ("place", "--flavor", "c3.8xlarge.numa2", "--count", "3")
    decision = json.loads(_run(tmp_path, *args, "--json").stdout)
    table = _run(tmp_path, *args)
    assert table.returncode == 0, table.stderr
    names = {s["instance_id"] for s in decision["selections"]}
    names |= {s["host"] for s in decision["selections"]}
    _whole_in_table(table.stdout, names)


@pytest.mark.slow
def test_make_run_token_is_reused_admin_tokens_work_and_a_busy_port_fails_first(
    tmp_path: Path,
) -> None:
    port = free_port()
    first = _serve(tmp_path, port, "first")
    try:
        wait_ready([first])
        token = _printed_token(first)
        kept = tmp_path / "out" / "berth" / "admin-token"
        assert kept.read_text().strip() == token
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600

        # `berth admin create-token` defaults to the directory `make run` serves from
        created = _run(tmp_path, "admin", "create-token", "--role", "reader")
        assert created.returncode == 0, created.stderr
        secret = created.stdout.strip()
        got = httpx.get(
            first.url + "/v1/hosts", headers={"Authorization": f"Bearer {secret}"}, timeout=10
        )
        assert got.status_code == 200, got.text
        assert not (tmp_path / "berth-data").exists()
        _instances_table_shows_whole_ids(tmp_path, first.url, token)

        # a second start on the busy port: one line, exit 2, no token printed
        second = _run(tmp_path, "serve", "--print-admin-token", "--port", str(port))
        assert second.returncode == 2
        assert second.stdout == ""
        assert "token" not in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        assert f"--port: 127.0.0.1:{port} is not available" in second.stderr
    finally:
        first.stop()

    again = _serve(tmp_path, port, "again")
    try:
        wait_ready([again])
        assert _printed_token(again) == token
        tokens = httpx.get(
            again.url + "/v1/tokens", headers={"Authorization": f"Bearer {token}"}, timeout=10
        ).json()
        rows = tokens["tokens"] if isinstance(tokens, dict) else tokens
        assert [r["name"] for r in rows].count("serve-admin") == 1
    finally:
        again.stop()


@pytest.mark.parametrize(("target", "dev"), [("run", False), ("lint", True), ("unit", True)])
def test_make_run_installs_only_the_runtime_packages(
    tmp_path: Path, target: str, dev: bool
) -> None:
    """`make -n` on a fresh copy (no .venv, no node_modules): what each target would install."""
    root = Path(__file__).resolve().parents[2]
    for name in ("Makefile", "pyproject.toml", "package.json", "package-lock.json"):
        (tmp_path / name).write_text((root / name).read_text())
    planned = subprocess.run(
        ["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line]
    assert any(line.endswith("-e .") for line in installs), installs
    # the checks add the dev extra, and `ray` (plan-capacity --ray, whose test they run)
    assert any("[dev,ray]" in line for line in installs) is dev, installs
    # the dashboard's browser assets come with the targets that serve or test it
    assets = "ensure-dashboard-assets.sh" in planned.stdout
    assert assets is (target != "lint"), planned.stdout


HEAVY = ("scipy", "matplotlib", "numba", "fastapi", "sqlalchemy", "uvicorn", "httpx")

_HELP_PROBE = """
import sys
from berth.cli.main import app
try:
    app(["--help"])
except SystemExit as done:
    assert not done.code, done.code
print("loaded:" + ",".join(m for m in sys.argv[1:] if m in sys.modules))
"""


@pytest.mark.slow
def test_help_does_not_load_the_solvers_service_or_plots() -> None:
    """`berth --help` (and every command's start) does not pay for SciPy, numba, matplotlib,
    FastAPI or SQLAlchemy: each command imports what it runs (docs/architecture.md)."""
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _HELP_PROBE, *HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "loaded:"
