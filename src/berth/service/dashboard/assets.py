"""The dashboard's browser assets: its own (`static/`, in the package) and Chart.js from npm.

Third-party code is not kept in the repository: `package.json` and `package-lock.json` at the
repository's root pin it and `make run` / `make test` install it (`npm ci`) into `node_modules`.
The service serves the few files it needs from there under `/dashboard/vendor/`. Where they are:
`BERTH_DASHBOARD_ASSETS` (a `node_modules` directory), else the `node_modules` beside the
nearest `package.json` above this package (a checkout, installed editable), else the working
directory's. When they are missing, pages still render and say how to install them.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
TEMPLATES_DIR = HERE / "templates"

VENDOR = {"chart.umd.min.js": Path("chart.js/dist/chart.umd.min.js")}
"""URL name under /dashboard/vendor/ -> path inside node_modules."""

INSTALL_HINT = "run `make run` (or `npm ci` in the repository's root) to install them"


@cache
def node_modules() -> Path | None:
    """The node_modules directory holding every VENDOR file, or None."""
    candidates: list[Path] = []
    env = os.environ.get("BERTH_DASHBOARD_ASSETS")
    if env:
        candidates.append(Path(env))
    candidates += [p / "node_modules" for p in HERE.parents if (p / "package.json").is_file()]
    candidates.append(Path.cwd() / "node_modules")
    for c in candidates:
        if all((c / rel).is_file() for rel in VENDOR.values()):
            return c
    return None


def vendor_file(name: str) -> Path | None:
    """The installed file behind /dashboard/vendor/<name>, or None (unknown or missing)."""
    rel = VENDOR.get(name)
    root = node_modules()
    if rel is None or root is None:
        return None
    return root / rel
