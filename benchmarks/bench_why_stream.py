"""The cost of `berth serve --why-all`: a compact why kept with every placement's outcome.

Loads the demo topology (270 hosts, 500 instances) into a fresh database (SQLite in a temporary
directory, and a fresh PostgreSQL database on `BERTH_BENCH_PG`, default
postgresql://postgres@127.0.0.1:5432/postgres), builds the service's replica in-process
(`create_app`, no HTTP: the HTTP stack's cost is the same either way and only adds noise), and
times whole placements, `placing.plain.place`: decide, commit with the outcome row, apply.

* **why-all**: placements alternate between the replica's `why_all` off and on (the order of
  the pair flips each round); the per-pair ratio's median is the cost, with the medians of each,
  the decision alone (`Placed.decision_ms`), the time to build the compact record
  (`placing.why_record.compact`) and the stored row's size.
* **off, against a base checkout** (`--base-src DIR`, that tree's `src`): the same placements
  with why off in separate processes of each checkout, alternated `--rounds` times on fresh
  databases; the best process of each. This is the "nothing changes when not asked" check for
  the commit path (the outcome statement is the same when the row has no why).

Writes the section "why-all" of `benchmarks/results/insight.md` (other sections stay).

    .venv/bin/python benchmarks/bench_why_stream.py [--placements 300] [--base-src DIR]
                                                    [--db sqlite,pg] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import machine

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "benchmarks" / "results" / "insight.md"
PG = os.environ.get("BERTH_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
FLAVORS = ["c3.large", "g3.large", "c3.xlarge", "c3.large.numa1", "g3.xlarge.numa1"]
WARM = 20


@contextlib.contextmanager
def _database(kind: str, workdir: Path) -> Iterator[str]:
    """A fresh database URL: a file under `workdir`, or a PostgreSQL database dropped after."""
    if kind == "sqlite":
        yield f"sqlite:///{workdir / 'berth.db'}"
        return
    from sqlalchemy import create_engine, text

    from berth.store.db import normalise_url

    name = f"berth_whystream_bench_{os.getpid()}_{secrets.token_hex(3)}"
    admin = create_engine(normalise_url(PG), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{PG.rsplit('/', 1)[0]}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname=:n"),
                {"n": name},
            )
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


def time_placements(kind: str, n: int, modes: Sequence[str]) -> dict[str, Any]:
    """`n` rounds of one placement per mode ("off", "on") on a fresh demo database."""
    from berth.fleet.demo import DEMO_NOW
    from berth.service.app import create_app
    from berth.service.config import ServiceConfig
    from berth.service.demo import load_demo
    from berth.service.placing.plain import PlaceArgs, place
    from berth.store.repo import Store

    with tempfile.TemporaryDirectory() as tmp, _database(kind, Path(tmp)) as url:
        store = Store.open(url, replica="bench")
        load_demo(store, now=DEMO_NOW)
        config = ServiceConfig(db_url=url, replica_id="bench", token_cache_ttl=0)
        app = create_app(config, store=store, clock=lambda: DEMO_NOW, background=False)
        replica = app.state.replica
        total: dict[str, list[float]] = {m: [] for m in modes}
        decide: dict[str, list[float]] = {m: [] for m in modes}
        commit: dict[str, list[float]] = {m: [] for m in modes}
        seen: list[float] = []
        told = replica.on_commit

        def on_commit(seconds: float, applied: bool) -> None:  # the store's commit alone
            seen.append(seconds * 1e3)
            if told is not None:
                told(seconds, applied)

        replica.on_commit = on_commit
        order = list(modes)
        for i in range(WARM + n):
            for mode in order if i % 2 else reversed(order):
                if mode == "on":
                    replica.config.why_all = True
                args = PlaceArgs(flavor=FLAVORS[i % len(FLAVORS)], count=1, project="bench", seed=i)
                gc.disable()
                t0 = time.perf_counter()
                placed = place(replica, args)
                ms = (time.perf_counter() - t0) * 1e3
                gc.enable()
                if mode == "on":
                    replica.config.why_all = False
                if i >= WARM:
                    total[mode].append(ms)
                    decide[mode].append(placed.decision_ms)
                    commit[mode].append(seen[-1])
        out: dict[str, Any] = {"total": total, "decide": decide, "commit": commit}
        if "on" in modes:
            out.update(_records(store))
        store.close()
    return out


def time_client_writes(repeats: int = 20_000) -> float:
    """Median µs (of 5 runs) of the client-side work the commit path changed: the outcome's
    row values and PostgreSQL's claim statement built from them (`pgclaim._writes`), why off.
    Runs on either checkout: the base has the same functions, without the `why` branch."""
    from berth.store import pgclaim
    from berth.store.outcomes import outcome_values
    from berth.store.repo import Outcome

    o = Outcome("success", "placed", "c3.large", "bench", 1, 1.0, "on-demand", "az1: h")
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            w = pgclaim.ClaimWrites(
                sets=[],
                hosts=[],
                verify_hosts=[],
                sized_sets=[],
                networks=[],
                instances=[],
                idempotency=None,
                outcome=outcome_values(o, 1.0),
                events=[],
                ts=1.0,
                replica="r1",
            )
            pgclaim._writes(w)
        runs.append((time.perf_counter() - t0) / repeats * 1e6)
    return statistics.median(runs)


def _records(store: Any) -> dict[str, Any]:
    """The kept rows' sizes, and the time to build one compact record from a fresh decision."""
    rows = [r for r in store.recent_outcomes(200) if r.why is not None]
    sizes = [len(json.dumps(r.why, separators=(",", ":"))) for r in rows]
    return {"row_bytes": statistics.median(sizes) if sizes else 0, "kept": len(rows)}


def time_compact(repeats: int = 300) -> float:
    """Median ms of `compact` over a fresh one-instance explanation on the demo's first
    cluster (top 3): the part of --why-all's cost that is not the recording itself."""
    from berth.core.config import profile
    from berth.core.engine import FilterScheduler
    from berth.core.request import RequestSpec
    from berth.core.table import HostTable
    from berth.core.why import explain_placement
    from berth.fleet.demo import DEMO_NOW, build_demo_fleet
    from berth.service.placing.why_record import compact

    fleet = build_demo_fleet()
    table = HostTable.from_fleet(fleet)
    scheduler = FilterScheduler.from_config(profile("berth"))
    times = []
    for i in range(repeats):
        request = RequestSpec(flavor=FLAVORS[i % len(FLAVORS)], seed=i)
        _, whys = explain_placement(scheduler, table, request, DEMO_NOW)
        t0 = time.perf_counter()
        compact(whys)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _pairs(on: list[float], off: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(on, off, strict=True)) - 1.0


def _shown(argv: Sequence[str]) -> str:
    """The arguments as the report shows them: no paths of this machine."""
    shown, hide = [], False
    for a in argv:
        shown.append("DIR" if hide else a)
        hide = a in ("--base-src", "--out")
    return " ".join(shown)


def _worker(src: Path, kind: str, n: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, __file__, "--worker", kind, "--placements", str(n)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "## why-all (the decision stream)",
        "",
        "Cost of `berth serve --why-all` (a compact why kept with every placement's outcome row, "
        "docs/why.md): whole placements through `placing.plain.place` (decide, commit with the "
        "outcome row, apply) on the demo topology (270 hosts), in-process, the replica's "
        "`why_all` off and on alternated placement by placement (the pair's order flips each "
        "round), garbage collector paused; medians, and the median of the per-pair ratios. "
        f"{report['placements']} placements per mode after {WARM} warm-up rounds.",
        "",
        f"- Date: {report['date']}; command: `{report['command']}`; commit {report['commit']}",
        f"- Machine: {m['processor']}, nproc {m['nproc']}, load average {m['load']} (shared "
        "with other work: compare the ratios measured in one run)",
        "",
        "| database | placement off (ms) | placement on (ms) | cost (medians) | median per-pair "
        "cost | decision off (ms) | decision on (ms) | commit off (ms) | commit on (ms) | row "
        "`why` (bytes, median) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in report["why_all"].items():
        off, on = r["total"]["off"], r["total"]["on"]
        med = {k: {m: statistics.median(v) for m, v in r[k].items()} for k in ("decide", "commit")}
        lines.append(
            f"| {kind} | {statistics.median(off):.3f} | {statistics.median(on):.3f} | "
            f"{statistics.median(on) / statistics.median(off) - 1:+.1%} | {_pairs(on, off):+.1%} "
            f"| {med['decide']['off']:.3f} | {med['decide']['on']:.3f} | "
            f"{med['commit']['off']:.3f} | {med['commit']['on']:.3f} | {r['row_bytes']:.0f} |"
        )
    lines += [
        "",
        f"Building the compact record (`why_record.compact`, one instance, top 3) from a "
        f"recorded decision: {report['compact_ms']:.3f} ms (median); it runs after the "
        "decision's lock is let go, before the commit.",
    ]
    base = report.get("base")
    if base:
        lines += [
            "",
            f"Not asked (why off): the same placements in separate processes of this checkout "
            f"and of {base['label']} (before the `why` column), alternated {base['rounds']} "
            "times on fresh databases; per process the median placement, the median commit "
            "(`Store.commit_placement` alone) and the client-side outcome statement (outcome "
            "values and PostgreSQL's claim statement, `pgclaim._writes`, the only commit code "
            "that changed), then the best process of each (the median process in brackets):",
            "",
            "| database | what | this checkout | base | difference |",
            "|---|---|---:|---:|---:|",
        ]
        for kind, m in base["medians"].items():
            for what, key, unit in (
                ("placement", "", "ms"),
                ("commit", "c_", "ms"),
                ("outcome statement (client)", "u_", "µs"),
            ):
                (this, this_med), (old, old_med) = m[key + "this"], m[key + "base"]
                lines.append(
                    f"| {kind} | {what} ({unit}) | {this:.3f} [{this_med:.3f}] | {old:.3f} "
                    f"[{old_med:.3f}] | {this / old - 1:+.1%} [{this_med / old_med - 1:+.1%}] |"
                )
    return "\n".join(lines) + "\n"


def write_section(path: Path, text: str) -> None:
    """Replace the '## why-all ...' section of `path` (others stay)."""
    old = path.read_text(encoding="utf-8") if path.exists() else "# Insight benchmarks\n\n"
    pattern = re.compile(r"^## why-all.*?(?=^## |\Z)", re.M | re.S)
    rest = pattern.sub("", old).rstrip() + "\n\n"
    path.write_text(rest + text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--placements", type=int, default=300)
    ap.add_argument("--db", default="sqlite,pg")
    ap.add_argument("--base-src", type=Path, help="another checkout's src, why off only")
    ap.add_argument("--base-label", default="base")
    ap.add_argument("--rounds", type=int, default=3, help="processes per checkout (base)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    if args.worker:  # why off only: the other checkout may not know `why_all`
        got = time_placements(args.worker, args.placements, ["off"])
        got["client_us"] = time_client_writes()
        print(json.dumps(got))
        return 0
    kinds = args.db.split(",")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True)
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/bench_why_stream.py " + _shown(argv or sys.argv[1:]),
        "commit": head.stdout.decode().strip(),
        "machine": machine(),
        "placements": args.placements,
        "why_all": {k: time_placements(k, args.placements, ["off", "on"]) for k in kinds},
        "compact_ms": time_compact(),
    }
    if args.base_src is not None:
        here = REPO / "src"
        medians = {}
        for kind in kinds:
            runs: dict[str, list[float]] = {
                k: [] for k in ("this", "base", "c_this", "c_base", "u_this", "u_base")
            }
            for _ in range(args.rounds):
                for who, src in (("base", args.base_src), ("this", here)):
                    got = _worker(src, kind, args.placements)
                    runs[who].append(statistics.median(got["total"]["off"]))
                    runs["c_" + who].append(statistics.median(got["commit"]["off"]))
                    runs["u_" + who].append(got["client_us"])
            medians[kind] = {k: (min(v), statistics.median(v)) for k, v in runs.items()}
        report["base"] = {"label": args.base_label, "rounds": args.rounds, "medians": medians}
    text = markdown(report)
    print(text)
    write_section(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
