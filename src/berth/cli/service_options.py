"""Options and output shared by the service commands (`berth serve`, `db`, `admin`, `api`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

out = Console()
err = Console(stderr=True)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="BERTH_DB",
        help="Database URL (sqlite:///FILE or postgresql://...). Default: SQLite in --data-dir.",
    ),
]
DataDirOpt = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="BERTH_DATA_DIR",
        help="Where the SQLite file (berth.db) and the serve admin token live.",
    ),
]
DEFAULT_DATA_DIR = Path("out/berth")
"""One default for `serve`, `db` and `admin`, the directory `make run` uses (docs/service.md):
a token created with `berth admin create-token` is valid for the service `make run` started."""


def fail(message: str, code: int = 2) -> NoReturn:
    """Print the error on stderr and exit with `code` (2: bad input, 3: unreachable)."""
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def db_url(db: str | None, data_dir: Path) -> str:
    from berth.store.db import sqlite_url  # lazy: keeps `berth --help` fast

    return db if db else sqlite_url(data_dir)
