"""The README's local `berth` commands run on a fresh clone: every file they name is in the
repository, none needs data the repository does not ship, and the fleet-file ones succeed."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.service.servers import BERTH

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> list[list[str]]:
    """Each `.venv/bin/berth ...` line of the README's code blocks, without its comment."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    found = []
    for line in lines:
        if line.startswith(".venv/bin/berth "):
            found.append(shlex.split(line.split("  #", 1)[0], posix=True)[1:])
    return found


def test_readme_commands_name_only_shipped_files_and_data() -> None:
    commands = _commands()
    assert commands
    for args in commands:
        assert "azure" not in args, f"needs data a fresh clone lacks: {args}"
        for i, arg in enumerate(args):
            if arg.endswith((".yaml", ".yml", ".json")) and args[i - 1] != "--out":
                assert (ROOT / arg).is_file(), f"README names a missing file: {arg}"


@pytest.mark.slow
def test_readme_fleet_file_commands_succeed(tmp_path: Path) -> None:
    fleet_commands = [a for a in _commands() if "examples/fleet.yaml" in a]
    assert len(fleet_commands) >= 4
    for args in fleet_commands:
        done = subprocess.run(
            [BERTH, *args], cwd=ROOT, capture_output=True, text=True, timeout=180, env=os.environ
        )
        assert done.returncode == 0, f"{args}: {done.stderr}"
