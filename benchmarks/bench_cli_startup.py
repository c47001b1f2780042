"""Wall time of `berth --help` and `berth place --help` (median of N fresh interpreters) and
which heavy modules each loads. Usage: python benchmarks/bench_cli_startup.py [--runs N]
[--src DIR] (DIR: the `src` folder of the checkout to measure; default: this one's)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("numpy", "pydantic", "sqlalchemy", "fastapi", "scipy", "yaml")
RUN = "from berth.cli.main import app; app(prog_name='berth')"
PROBE = (
    "import sys, json\n"
    "from berth.cli.main import app\n"
    "try:\n    app(sys.argv[1:], prog_name='berth', standalone_mode=False)\n"
    "except SystemExit:\n    pass\n"
    f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--src", type=Path, default=Path(__file__).parent.parent / "src")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.src.resolve())}
    for argv in (["--help"], ["place", "--help"]):
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", RUN, *argv], env=env, capture_output=True)
            times.append(time.perf_counter() - started)
        probe = subprocess.run(
            [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True
        )
        loaded = json.loads(probe.stdout.strip().splitlines()[-1])
        print(
            f"berth {' '.join(argv)}: median {statistics.median(times):.3f} s "
            f"(min {min(times):.3f}, max {max(times):.3f}, {args.runs} runs); loads {loaded}"
        )


if __name__ == "__main__":
    main()
