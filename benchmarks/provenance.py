"""Where a benchmark ran: the machine and the source state, for the header of its results file.

Shared by the benchmark scripts (run as `python benchmarks/bench_*.py`, so this directory is on
the import path).
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np
import pydantic

REPO = Path(__file__).resolve().parent.parent


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def machine() -> dict[str, str]:
    """Platform, CPU model (from lscpu when present), core count, versions and load average."""
    info = {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpu_model": "",
        "nproc": str(os.cpu_count()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": _version("numba"),
        "pydantic": pydantic.VERSION,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "",
    }
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                info["cpu_model"] = value.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


def source_state(paths: Sequence[str], label: str) -> str:
    """The commit benchmarked, and how many of `paths` (the code measured) are uncommitted."""

    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True)
        return out.stdout.splitlines()

    try:
        head = git("rev-parse", "--short", "HEAD")[0]
        dirty = git("status", "--porcelain", "--", *paths)
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown (not a git checkout)"
    return head + (f"; {len(dirty)} uncommitted {label} path(s)" if dirty else f"; {label} clean")
