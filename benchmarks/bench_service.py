"""Service benchmark: placements per second and latency through HTTP, with persistence.

For each configuration it loads the demo topology (270 hosts, 500 instances) into a fresh
database, starts `berth serve` replica processes on loopback ports, and has concurrent clients
(threads, one keep-alive connection each) POST /v1/placements until `--requests` placements are
acknowledged; requests are spread round-robin over the replicas. It reports placements/s for the
whole run and per replica, and client-side p50/p99 latency, and checks afterwards (from the rows)
that nothing is over-committed. Configurations:

* `sqlite`: one replica on SQLite (WAL) in a temporary directory;
* `pg1`, `pg2`: one and two replicas on one PostgreSQL database (a fresh database per run on
  the server of `BERTH_BENCH_PG`, default postgresql://postgres@127.0.0.1:5432/postgres).

Before/after in one run: `git archive OLD src | tar -x -C BASELINE`, then `--baseline
BASELINE/src` runs every configuration's replicas on that tree too, right before this
checkout's (rows marked "(before)"; `--baseline-label` renames them).

Prints a table, then one JSON line, and writes `benchmarks/results/service.md`.

    .venv/bin/python benchmarks/bench_service.py [--requests 2000] [--clients 8]
                                                 [--configs sqlite,pg1,pg2] [--out PATH]
                                                 [--baseline SRC] [--repeat N]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import create_engine, text

from berth.service.demo import load_demo
from berth.store.audit import audit
from berth.store.db import normalise_url
from berth.store.repo import Store

ROOT = Path(__file__).resolve().parent.parent
BERTH = str(Path(sys.executable).with_name("berth"))
PG = os.environ.get("BERTH_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
FLAVORS = ["c3.large", "g3.large", "c3.xlarge", "c3.large.numa1", "g3.xlarge.numa1"]


@dataclass
class Result:
    config: str
    replicas: int
    placements: int
    failures: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    decision_ms: float = 0.0
    conflicts: int = 0
    audit: str = "ok"
    cpu_ms: float = 0.0
    """Replica CPU time (user + system, all replicas) per acknowledged placement."""
    reloads: int = 0
    """Full cache reloads of the replicas after their start (a lost race that repeats)."""
    client_cpu_ms: float = 0.0
    """CPU of the benchmark's client threads (this process) per acknowledged placement."""
    db_cpu_ms: float | None = None
    """CPU of the PostgreSQL backends serving the run's database per placement (None: SQLite,
    whose work runs inside the replica)."""

    @property
    def rate(self) -> float:
        return self.placements / self.seconds

    def row(self) -> dict[str, Any]:
        lat = np.array(self.latencies_ms)
        return {
            "config": self.config,
            "replicas": self.replicas,
            "placements": self.placements,
            "failures": self.failures,
            "seconds": round(self.seconds, 2),
            "placements_per_s": round(self.rate, 1),
            "per_replica_per_s": round(self.rate / self.replicas, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 2),
            "p99_ms": round(float(np.percentile(lat, 99)), 2),
            "decision_ms_mean": round(self.decision_ms, 3),
            "conflicts_retried": self.conflicts,
            "reloads": self.reloads,
            "client_cpu_ms": round(self.client_cpu_ms, 2),
            "db_cpu_ms": None if self.db_cpu_ms is None else round(self.db_cpu_ms, 2),
            "server_cpu_ms": round(self.cpu_ms, 2),
            "per_core_per_s": round(1e3 / self.cpu_ms, 1) if self.cpu_ms else None,
            "audit": self.audit,
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _database(config: str, workdir: Path) -> Iterator[str]:
    if config == "sqlite":
        yield f"sqlite:///{workdir / 'berth.db'}"
        return
    name = f"berth_bench_{os.getpid()}_{secrets.token_hex(3)}"
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


def _start(
    url: str, name: str, workdir: Path, subset: int, src: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start one `berth serve` replica; with `src`, the package comes from that source tree."""
    port = _free_port()
    log = (workdir / f"{name}.log").open("wb")
    command = [BERTH, "serve", "--db", url, "--port", str(port), "--replica-id", name]
    command += ["--service-down-time", "86400", "--log-level", "warning"]
    if subset > 0:
        command += ["--host-subset-size", str(subset)]
    else:  # the replica-spread weigher instead
        command += ["--replica-spread", os.environ.get("BERTH_BENCH_SPREAD", "2.0")]
    env = dict(os.environ)
    if src is not None:  # ahead of the editable install of this checkout
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited: see {workdir / (name + '.log')}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                return proc, base
        time.sleep(0.1)
    raise RuntimeError(f"{name} did not start")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _backend_cpu(url: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend connected to the run's database ({} on SQLite;
    the server runs on this machine, so its processes are readable in /proc)."""
    if url.startswith("sqlite"):
        return {}
    name = url.rsplit("/", 1)[1]
    engine = create_engine(normalise_url(PG))
    try:
        with engine.connect() as conn:
            pids = conn.execute(
                text("SELECT pid FROM pg_stat_activity WHERE datname = :n"), {"n": name}
            ).scalars()
            out = {}
            for pid in pids:
                with contextlib.suppress(OSError):
                    out[int(pid)] = _cpu_seconds(int(pid))
            return out
    finally:
        engine.dispose()


def _scrape(base: str) -> tuple[float, float, int, int]:
    """(decision seconds sum, decisions, conflicts retried, cache reloads after the first)."""
    text_ = httpx.get(base + "/metrics", timeout=5).text
    values: dict[str, float] = {}
    for line in text_.splitlines():
        if line.startswith(("berth_decision_seconds_sum", "berth_decision_seconds_count")):
            key, value = line.split()
            values[key] = float(value)
        if line.startswith("berth_placement_conflicts_total"):
            values["conflicts"] = float(line.split()[1])
        if line.startswith("berth_reloads{"):
            values["reloads"] = float(line.split()[-1])
    return (
        values.get("berth_decision_seconds_sum", 0.0),
        values.get("berth_decision_seconds_count", 0.0),
        int(values.get("conflicts", 0)),
        max(0, int(values.get("reloads", 1)) - 1),
    )


def run(
    config: str,
    replicas: int,
    requests: int,
    clients: int,
    subset: int = 1,
    src: Path | None = None,
) -> Result:
    with tempfile.TemporaryDirectory(prefix="berth-bench-") as tmp:
        workdir = Path(tmp)
        with _database(config, workdir) as url:
            store = Store.open(url, replica="bench")
            load_demo(store)
            _, token = store.create_token("bench", "admin")
            procs = [_start(url, f"r{i}", workdir, subset, src) for i in range(replicas)]
            try:
                lat: list[float] = []
                failures = [0]
                issued = [0]
                lock = threading.Lock()

                def client(n: int) -> None:
                    headers = {"Authorization": f"Bearer {token}"}
                    clients_ = [httpx.Client(base_url=b, headers=headers) for _, b in procs]
                    i = 0
                    while True:
                        with lock:
                            if issued[0] >= requests:
                                break
                            issued[0] += 1
                        http = clients_[(n + i) % len(clients_)]
                        body = {"flavor": FLAVORS[(n + i) % len(FLAVORS)], "seed": n * 100_000 + i}
                        t0 = time.perf_counter()
                        resp = http.post("/v1/placements", json=body)
                        ms = (time.perf_counter() - t0) * 1e3
                        with lock:
                            if resp.status_code == 201:
                                lat.append(ms)
                            else:
                                failures[0] += 1
                        i += 1
                    for c in clients_:
                        c.close()

                # warm-up: a few placements per replica (imports, caches, connections)
                with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as http:
                    for _, base in procs:
                        for k in range(5):
                            http.post(base + "/v1/placements", json={"flavor": FLAVORS[k]})
                threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
                cpu0 = sum(_cpu_seconds(proc.pid) for proc, _ in procs)
                db0 = _backend_cpu(url)
                client0 = time.process_time()
                started = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                seconds = time.perf_counter() - started
                cpu = sum(_cpu_seconds(proc.pid) for proc, _ in procs) - cpu0
                client_cpu = time.process_time() - client0
                db1 = _backend_cpu(url)
                db_cpu = sum(v - db0.get(pid, 0.0) for pid, v in db1.items()) if db1 else None
                sums = [_scrape(base) for _, base in procs]
                decision = sum(s[0] for s in sums) / max(1.0, sum(s[1] for s in sums)) * 1e3
                conflicts = sum(s[2] for s in sums)
                reloads = sum(s[3] for s in sums)
            finally:
                for proc, _ in procs:
                    proc.send_signal(signal.SIGTERM)
                for proc, _ in procs:
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            problems = audit(store)
            store.close()
    return Result(
        config,
        replicas,
        len(lat),
        failures[0],
        seconds,
        lat,
        decision,
        conflicts,
        "ok" if not problems else "; ".join(problems[:3]),
        cpu * 1e3 / max(1, len(lat)),
        reloads,
        client_cpu * 1e3 / max(1, len(lat)),
        None if db_cpu is None else db_cpu * 1e3 / max(1, len(lat)),
    )


def _machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, `nproc` = {os.cpu_count()}; {platform.platform()}"


def _pg_version() -> str:
    with contextlib.suppress(Exception):
        engine = create_engine(normalise_url(PG))
        with engine.connect() as conn:
            return str(conn.execute(text("SHOW server_version")).scalar())
    return "unavailable"


def _portable(argv: list[str]) -> list[str]:
    """The command line without this machine's paths: the baseline tree is named, not located."""
    out = []
    for i, arg in enumerate(argv):
        if i > 0 and argv[i - 1] == "--baseline":
            out.append("BASELINE/src")
        elif arg.startswith("--baseline="):
            out.append("--baseline=BASELINE/src")
        else:
            out.append(arg)
    return out


def write_report(path: Path, rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [
        "# Berth service benchmark",
        "",
        "Generated by `benchmarks/bench_service.py`; do not edit by hand.",
        "",
        f"- Date: {now}",
        f"- Command: `{shlex.join(['.venv/bin/python', *_portable(sys.argv)])}`",
        f"- Source: commit {commit}"
        + (
            f"; rows marked ({args.baseline_label}) ran the replicas from another source tree "
            "(`--baseline`), interleaved with this one's"
            if args.baseline is not None
            else ""
        ),
        f"- Machine: {_machine()}",
        f"- Python {platform.python_version()}; PostgreSQL {_pg_version()} on the same machine; "
        "SQLite WAL, synchronous=NORMAL",
        f"- Load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
        "(the machine may be shared; figures vary by about ±20% between runs)",
        f"- Workload: demo topology (270 hosts in 3 clusters, 500 instances); {args.requests} "
        f"placements of one instance each, flavors {', '.join(FLAVORS)} in turn; "
        f"{args.clients} client threads with keep-alive connections, round-robin over replicas.",
        "",
        "| config | replicas | placed | failed | s | placements/s | per replica | p50 ms | "
        "p99 ms | decision ms | server CPU ms | per core/s | client CPU ms | db CPU ms | "
        "conflicts retried | reloads | audit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['replicas']} | {r['placements']} | {r['failures']} | "
            f"{r['seconds']} | {r['placements_per_s']} | {r['per_replica_per_s']} | "
            f"{r['p50_ms']} | {r['p99_ms']} | {r['decision_ms_mean']} | "
            f"{r['server_cpu_ms']} | {r['per_core_per_s']} | {r['client_cpu_ms']} | "
            f"{'-' if r['db_cpu_ms'] is None else r['db_cpu_ms']} | "
            f"{r['conflicts_retried']} | {r['reloads']} | {r['audit']} |"
        )
    lines += [
        "",
        "## Reading it",
        "",
        "- *placements/s* counts acknowledged placements (HTTP 201) over the wall time of the "
        "run; *per replica* divides by the number of replicas. Latency is client-side, per "
        "request, including queueing behind the other clients.",
        "- *decision ms* is the server's own `berth_decision_seconds` mean (the core's filter, "
        "weigh and select, including ordering the candidate clusters); the rest of a request is "
        "HTTP, JSON, auth and the commit transaction (generation checks, re-verification, "
        "inserts, event append).",
        "- A replica decides under one lock and commits outside it (a host with a commit in "
        "flight is left out of its next decisions), so its own commits overlap. On PostgreSQL "
        "a claim is two round trips (`berth.store.pgclaim`: generation checks and the touched "
        "hosts' rows in one message; the inserts, events, NOTIFY and COMMIT in the second). "
        "Replicas on one PostgreSQL race only through generations (*conflicts retried*); a "
        "lost race that the event log explains is decided again at once, and *reloads* counts "
        "the full cache reloads after start (a loss the log does not explain).",
        "- The machine has 2 shared cores that the replicas, PostgreSQL and the client threads "
        "all share: with two replicas the client and the database compete with them for CPU, so "
        "the per-replica figure is a floor, not what a replica does on its own machine.",
        "- Two replicas with the packing profile converge on the same fullest hosts, so many "
        "placements lose their generation race and are decided again after catching up "
        "(*conflicts retried*); `--host-subset-size 4` (*pg2-subset4*) spreads the choice over "
        "the four best hosts, which here does not reduce the races much: the hot hosts are few. "
        "`--replica-spread 2` (*pg2-spread*) adds a fixed per-replica preference per host "
        "(rendezvous hashing, `berth.service.spread`) with weight 2, as strong as the "
        "fragmentation weigher: races almost vanish, at a cost in packing quality that this "
        "benchmark does not measure (it is off by default).",
        "- Every replica applies every other replica's events (a NOTIFY, a query, the claim "
        "in its table), so the CPU per placement summed over two replicas is higher than for "
        "one.",
        "- *server CPU ms*: CPU time (user + system) of the replica processes per acknowledged "
        "placement, read from /proc; *per core/s* = 1000 / that: the placements one replica "
        "could do per second on a core of its own (a replica is one Python process: it uses about "
        "one core). The client threads and PostgreSQL are not counted.",
        "- *client CPU ms* is the CPU of the benchmark's own client threads (httpx, one "
        "process) per placement; *db CPU ms* that of the PostgreSQL backends serving the run's "
        "database (SQLite's work is inside the replica). Replica + client + database CPU per "
        "placement is what the 2 cores must supply, so on this machine the placements per "
        "second cannot exceed 2000 / that sum, less what other processes take (the load "
        "average above).",
        "- *audit*: after each run, every host's recorded instances are summed against its "
        "capacity from the rows alone (`berth.store.audit`).",
        "- Rows marked *(before)*, when present, ran the replicas from the source tree given "
        "with `--baseline` (the code before a change), each run right before the same "
        "configuration on this checkout, so both see about the same machine load.",
        "",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--configs", default="sqlite,pg1,pg2,pg2-subset4,pg2-spread")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/service.md")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="the src/ directory of another source tree (e.g. `git archive OLD src`): every "
        "configuration runs on it first, then on this checkout, for a before/after in one run",
    )
    parser.add_argument("--baseline-label", default="before", help="names the baseline rows")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each configuration")
    args = parser.parse_args()
    plan = {
        "sqlite": ("sqlite", 1, 1),
        "pg1": ("pg", 1, 1),
        "pg2": ("pg", 2, 1),
        "pg2-subset4": ("pg", 2, 4),
        "pg2-spread": ("pg", 2, -1),
        "pg3": ("pg", 3, 1),
    }
    rows = []
    trees: list[tuple[str, Path | None]] = [("", None)]
    if args.baseline is not None:
        trees.insert(0, (f" ({args.baseline_label})", args.baseline.resolve()))
    runs = [
        (name, label, src)
        for name in args.configs.split(",")
        for _ in range(args.repeat)
        for label, src in trees  # interleaved: load drifts alike for both trees
    ]
    for name, label, src in runs:
        config, replicas, subset = plan[name]
        result = run(config, replicas, args.requests, args.clients, subset, src)
        row = result.row()
        row["config"] = name + label
        rows.append(row)
        print(
            f"{row['config']:20s} {row['placements_per_s']:7.1f}/s  "
            f"per replica {row['per_replica_per_s']:7.1f}"
            f"  p50 {row['p50_ms']:6.2f} ms  p99 {row['p99_ms']:7.2f} ms  "
            f"decision {row['decision_ms_mean']:.3f} ms  failed {row['failures']}  "
            f"conflicts {row['conflicts_retried']}  reloads {row['reloads']}  "
            f"cpu {row['server_cpu_ms']} ms (client {row['client_cpu_ms']}, "
            f"db {row['db_cpu_ms']})"
            f" ({row['per_core_per_s']}/s per core)  audit {row['audit']}",
            flush=True,
        )
    write_report(args.out, rows, args)
    print(json.dumps({"service": rows}))


if __name__ == "__main__":
    main()
