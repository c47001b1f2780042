"""The cost of `--why` on a 10,000-host decision, under the 'berth' and 'nova' profiles, measured
two ways in one run:

* **wall clock, interleaved**: `bench_insight`'s seeded 10,000-host fleet and 'mixed' requests;
  each repetition decides every request once plain (`select_destinations`) and once with
  `core.why.WhyRecorder`, for both profiles, the order of the four batches rotating from one
  repetition to the next; garbage collector paused. Reported: the median batch time of each,
  the ratio of the medians and the median of the per-repetition ratios (each repetition pairs
  a plain and a why batch run moments apart, so load that drifts cancels).
* **instructions** (`--callgrind`): the same batch under `valgrind --tool=callgrind`, once
  plain and once with why, one process per profile (the table read from a pickle this run
  writes, hash seed fixed, warm-up batches first); only the two counted batches are counted
  (plain inside `math.fsum`, with why inside `math.prod`; callgrind collects only inside
  those two and reports each one's inclusive count).
  Instruction counts do not depend on the machine's load.

    .venv/bin/python benchmarks/bench_why_cost.py [--hosts 10000] [--decisions 200]
        [--reps 30] [--fastest 15] [--callgrind] [--cg-decisions 100]

Prints Markdown tables (the numbers of benchmarks/results/insight.md's section "why: cost
re-measured (interleaved)"). `--fastest N` adds `bench_insight.time_why` (per request the
fastest of N plain, hook-only and with-why decisions, interleaved) and the recorder's own time
per instance.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import NOW
from bench_insight import _decide, _requests, _table, time_why
from berth.core.config import profile
from berth.core.engine import FilterScheduler, Scored
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.core.why import WhyRecorder

PROFILES = ("berth", "nova")


def _batch(sched: FilterScheduler, table: HostTable, reqs: list[RequestSpec], why: bool) -> int:
    """Decide every request once; nanoseconds (the recorder is made outside the clock)."""
    total = 0
    for r in reqs:
        hook = WhyRecorder(sched, r) if why else None
        t = time.perf_counter_ns()
        sched.select_destinations(table, r, NOW, why=hook)
        total += time.perf_counter_ns() - t
    return total


def _setup(
    table: HostTable, decisions: int
) -> dict[str, tuple[FilterScheduler, list[RequestSpec]]]:
    out = {}
    for prof in PROFILES:
        sched = FilterScheduler.from_config(profile(prof))
        out[prof] = (sched, [r for r in _requests(table, decisions) if _decide(sched, table, r)])
    return out


def wall(table: HostTable, decisions: int, reps: int) -> dict[str, dict[str, Any]]:
    setups = _setup(table, decisions)
    runs = [(prof, why) for prof in PROFILES for why in (False, True)]
    times: dict[tuple[str, bool], list[int]] = {k: [] for k in runs}
    for prof, why in runs:  # warm: caches, compiled kernels
        _batch(setups[prof][0], table, setups[prof][1], why)
    gc.disable()
    try:
        for rep in range(reps):
            for k in range(len(runs)):
                prof, why = runs[(rep + k) % len(runs)]
                sched, reqs = setups[prof]
                times[prof, why].append(_batch(sched, table, reqs, why))
    finally:
        gc.enable()
    out = {}
    for prof in PROFILES:
        off, on = times[prof, False], times[prof, True]
        out[prof] = {
            "requests": len(setups[prof][1]),
            "off_ms": statistics.median(off) / 1e6 / len(setups[prof][1]),
            "on_ms": statistics.median(on) / 1e6 / len(setups[prof][1]),
            "ratio_of_medians": statistics.median(on) / statistics.median(off),
            "median_ratio": statistics.median(b / a for a, b in zip(off, on, strict=True)),
        }
    return out


def fastest(table: HostTable, decisions: int, repeats: int) -> None:
    """`bench_insight.time_why` (per request the fastest of `repeats` plain, hook-only and
    with-why decisions, interleaved), both profiles; and the recorder alone per instance."""
    load = os.getloadavg()[0]
    print(f"\nper request the fastest of {repeats}, interleaved (load {load:.1f}):\n")
    print("| profile | requests | decision (ms) | hook only (ms) | with why (ms) |", end="")
    print(" ratio of medians | median per-request ratio | recorder per instance (us) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for prof in PROFILES:
        t = time_why(table, decisions, prof, repeats)
        row = f"| {prof} | {t['n']} | {t['plain_ms']:.3f} | {t['hook_ms']:.3f} | "
        row += f"{t['why_ms']:.3f} | {t['overhead_pct']:+.1f}% | {t['ratio_pct']:+.1f}% | "
        print(row + f"{_recorder_us(table, decisions, prof, repeats):.1f} |", flush=True)


def _recorder_us(table: HostTable, decisions: int, prof: str, repeats: int) -> float:
    """`WhyRecorder`'s own work per instance: the fastest of `repeats` per instance, averaged."""
    sched = FilterScheduler.from_config(profile(prof))
    caught: list[tuple[WhyRecorder, Scored]] = []
    for r in _requests(table, decisions):
        if _decide(sched, table, r):
            rec = WhyRecorder(sched, r)

            def keep(s: Scored, rec: WhyRecorder = rec) -> None:
                caught.append((rec, s))

            sched.select_destinations(table, r, NOW, why=keep)
    total = 0
    gc.disable()
    try:
        for rec, s in caught:
            best = 1 << 62
            for _ in range(repeats):
                t = time.perf_counter_ns()
                rec(s)
                best = min(best, time.perf_counter_ns() - t)
            total += best
    finally:
        gc.enable()
    return total / len(caught) / 1e3


def _child(pickled: str, prof: str, decisions: int) -> None:
    """Under callgrind: warm up, then the plain batch inside `math.fsum` and the batch with why
    inside `math.prod` (their inclusive counts are the two batches')."""
    table = pickle.loads(Path(pickled).read_bytes())
    sched = FilterScheduler.from_config(profile(prof))
    reqs = [r for r in _requests(table, decisions) if _decide(sched, table, r)]
    for why in (False, True, False, True):
        _batch(sched, table, reqs, why)
    gc.disable()
    math.fsum(float(_batch(sched, table, reqs, False) * 0) for _ in range(1))
    math.prod(float(_batch(sched, table, reqs, True) * 0) for _ in range(1))
    print(f"requests={len(reqs)}")


def callgrind(table: HostTable, decisions: int) -> dict[str, dict[str, Any]]:
    """One process per profile, both at once (the numba kernels load once per process, which
    is slow under valgrind)."""
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="why-cg-") as tmp:
        pickled = Path(tmp) / "table.pkl"
        pickled.write_bytes(pickle.dumps(table))
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        procs: dict[str, subprocess.Popen[str]] = {}
        for prof in PROFILES:
            command = ["valgrind", "--tool=callgrind", "--toggle-collect=math_fsum"]
            command += ["--toggle-collect=math_prod", f"--callgrind-out-file={tmp}/{prof}.out"]
            command += [sys.executable, __file__, "--child", str(pickled), prof, str(decisions)]
            procs[prof] = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        for prof, proc in procs.items():
            stdout, stderr = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"callgrind failed ({proc.returncode}):\n{stderr[-2000:]}")
            off, on = _inclusive(Path(tmp) / f"{prof}.out", ("math_fsum", "math_prod"))
            requests = int(stdout.strip().rpartition("=")[2])
            out[prof] = {"off": off, "on": on, "ratio": on / off, "requests": requests}
    return out


def _inclusive(path: Path, functions: tuple[str, ...]) -> tuple[int, ...]:
    """Each function's inclusive instruction count (`callgrind_annotate --inclusive=yes`)."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts = []
    for name in functions:
        found = re.search(rf"^\s*([\d,]+)\s.*[:\s]{name}[\s\[(']", text, re.MULTILINE)
        if found is None:
            raise RuntimeError(f"{name} not in {path}")
        counts.append(int(found.group(1).replace(",", "")))
    return tuple(counts)


def _pct(x: float) -> str:
    return f"{100 * (x - 1):+.1f}%"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--decisions", type=int, default=200)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--fastest", type=int, default=15, help="repeats per request (0: skip)")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--cg-decisions", type=int, default=100)
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        pickled, prof, decisions = args.child
        _child(pickled, prof, int(decisions))
        return
    started = time.perf_counter()
    table = _table(args.hosts)
    load = os.getloadavg()
    timed = wall(table, args.decisions, args.reps) if args.reps else {}
    print(f"hosts {args.hosts}, reps {args.reps}, load {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    print("\n| profile | requests | decision (ms) | with why (ms) | ratio of medians |", end="")
    print(" median paired ratio |\n|---|---:|---:|---:|---:|---:|")
    for prof in timed:
        t = timed[prof]
        row = f"| {prof} | {t['requests']} | {t['off_ms']:.3f} | {t['on_ms']:.3f} | "
        print(row + f"{_pct(t['ratio_of_medians'])} | {_pct(t['median_ratio'])} |", flush=True)
    if args.fastest:
        fastest(table, args.decisions, args.fastest)
    if args.callgrind:  # after the wall clock: valgrind loads the machine for minutes
        counted = callgrind(table, args.cg_decisions)
        print("\n| profile | requests | instructions plain | with why | cost of why |")
        print("|---|---:|---:|---:|---:|")
        for prof in PROFILES:
            c = counted[prof]
            print(f"| {prof} | {c['requests']} | {c['off']:,} | {c['on']:,} | {_pct(c['ratio'])} |")
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
