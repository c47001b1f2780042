"""`berth --help`, and every subcommand's `--help`, load none of the heavy modules (numpy,
pydantic, SQLAlchemy, FastAPI, ...): the CLI imports them inside its commands
(docs/architecture.md). Checked in a fresh interpreter, since this test session has them all
loaded already. One exception: Typer itself (0.29) builds a subcommand's parameters through
pydantic's `TypeAdapter` (`typer._adapters`), so a subcommand's --help loads pydantic whatever
Berth imports; `berth --help` loads it not."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from berth.cli import names
from berth.core.config import PROFILES
from berth.core.defrag.admit import MAX_ADMISSION
from berth.policy.model import Business
from berth.sim.synthetic import DEFAULT_SIZING

HEAVY = ("numpy", "pydantic", "sqlalchemy", "fastapi", "scipy", "numba", "uvicorn", "httpx", "yaml")
TYPER_LOADS = {"pydantic"}
"""What Typer loads itself to build a subcommand (see above)."""

PROBE = f"""
import json, sys
import typer
from berth.cli.main import app

def paths(cmd, prefix=()):
    yield prefix
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from paths(sub, (*prefix, name))

def loaded():
    return [m for m in {HEAVY!r} if m in sys.modules]

try:
    app(["--help"], prog_name="berth", standalone_mode=False)
except SystemExit:
    pass
top = loaded()
seen = []
for path in paths(typer.main.get_command(app)):
    try:
        app([*path, "--help"], prog_name="berth", standalone_mode=False)
    except SystemExit:
        pass
    seen.append(" ".join(path))
print(json.dumps({{"top": top, "commands": seen, "loaded": loaded()}}))
"""


@pytest.mark.slow
def test_help_of_every_command_loads_no_heavy_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"", "place", "serve", "schedule", "simulate", "defrag plan", "db load-demo"} <= set(
        result["commands"]
    ), result["commands"]
    assert result["top"] == [], result
    assert set(result["loaded"]) <= TYPER_LOADS, result


def test_help_constants_equal_their_originals() -> None:
    assert tuple(PROFILES) == names.PROFILES
    assert names.MAX_ADMISSION == MAX_ADMISSION
    assert names.DEFAULT_SIZING == DEFAULT_SIZING
    assert [b.value for b in names.BusinessChoice] == [b.value for b in Business]
