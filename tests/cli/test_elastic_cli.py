"""`berth elastic ...` against the real app served on loopback (uvicorn in a thread)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.cli.main import app
from berth.elastic.model import VmState
from tests.elastic.pools import serving
from tests.service.elastic_env import ElasticEnv, htcondor_group, make_elastic_env
from tests.store.fleets import NOW

runner = CliRunner()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ElasticEnv, list[str]]]:
    env = make_elastic_env(tmp_path / "berth.db")
    with serving(env) as url:
        yield env, ["--url", url, "--token", env.tokens["admin"]]
    env.store.close()


def _run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_groups_vms_commands_and_accounting(served: tuple[ElasticEnv, list[str]]) -> None:
    env, conn = served
    out = _run(
        "elastic",
        "groups",
        "set",
        "juno",
        "--flavor",
        "p4",
        "--system",
        "htcondor",
        "--accounting-group",
        "group_juno",
        "--max-vms",
        "3",
        "--cores-per-vm",
        "4",
        *conn,
    )
    assert "group juno: 0-3 VMs of p4" in out
    groups = json.loads(_run("elastic", "groups", "list", "--json", *conn))
    assert [(g["name"], g["max_vms"], g["queue"]["accounting_group"]) for g in groups] == [
        ("juno", 3, "group_juno")
    ]
    assert "group_juno" in _run("elastic", "groups", "list", *conn)
    env.store.record_vm("juno-1", "juno", NOW)
    env.store.move_vm("juno-1", VmState.BOOTING, NOW)
    env.store.move_vm("juno-1", VmState.FAILED, NOW + 3600)
    vms = json.loads(_run("elastic", "vms", "--json", *conn))
    assert [(v["name"], v["state"]) for v in vms] == [("juno-1", "failed")]
    assert "juno-1" in _run("elastic", "vms", *conn)
    history = json.loads(_run("elastic", "history", "juno-1", "--json", *conn))
    assert [h["state"] for h in history] == ["requested", "booting", "failed"]
    csv = _run("elastic", "accounting", "--csv", "--until", str(NOW + 7200), *conn)
    assert csv.splitlines()[1].split(",")[1:6] == ["juno", "juno", "1", "1.0", "4.0"]
    limits = json.loads(_run("elastic", "limits", "--max-vms", "10", "--json", *conn))
    assert limits == {"max_vms": 10, "max_cores": None}
    assert json.loads(_run("elastic", "commands", "--json", *conn)) == []
    refused = runner.invoke(app, ["elastic", "command", "juno-1", "join", *conn])
    assert refused.exit_code == 2
    assert "vm_state" in refused.output
    missing = runner.invoke(app, ["elastic", "groups", "delete", "nope", *conn])
    assert missing.exit_code == 2
    assert "not_found" in missing.output
    _run("elastic", "groups", "delete", "juno", *conn)
    assert json.loads(_run("elastic", "groups", "list", "--json", *conn)) == []


def test_a_group_admin_token_from_the_cli(
    served: tuple[ElasticEnv, list[str]], tmp_path: Path
) -> None:
    env, conn = served
    env.store.put_elastic_group(htcondor_group("juno"))
    env.store.put_elastic_group(htcondor_group("bes"))
    db = str(env.store.engine.url)
    result = runner.invoke(
        app,
        [
            "admin",
            "create-token",
            "--role",
            "group-admin",
            "--elastic-group",
            "juno",
            "--name",
            "juno-admin",
            "--db",
            db,
        ],
    )
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    mine = json.loads(
        _run("elastic", "groups", "list", "--json", "--url", conn[1], "--token", token)
    )
    assert [g["name"] for g in mine] == ["juno"]
