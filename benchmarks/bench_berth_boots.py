"""Boots per second through Berth on the real OpenStack stack (scripts/ensure-openstack.sh).

A Berth service (in process, SQLite, no background threads) joins one cluster of the stack;
each run places `--servers` servers in placements of `--batch` (Berth decides, claims, writes
the boot intents and boots each on its host through Nova's API, `--batch` at a time), then
follows the change feed until every server is ACTIVE; the servers are deleted between runs.
For comparison, the same number of servers is booted through Nova's own scheduler on the same
stack (one multi-create request, no host given) and timed to ACTIVE.

Prints medians over `--runs` and one JSON line (the last line of stdout).

    .venv/bin/python benchmarks/bench_berth_boots.py [--servers 40] [--batch 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from berth.service.app import create_app
from berth.service.config import ServiceConfig
from berth.store.repo import Store

ROOT = Path(__file__).resolve().parents[1]
TOKEN_VAR = "BERTH_BENCH_OPENSTACK_TOKEN"


def stack() -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(ROOT / "scripts" / "ensure-openstack.sh"), "up"],
        capture_output=True,
        text=True,
        check=True,
    )
    clusters: list[dict[str, Any]] = json.loads(
        Path(done.stdout.strip().splitlines()[-1]).read_text()
    )["clusters"]
    return clusters


@contextlib.contextmanager
def stack_turn() -> Iterator[None]:
    """The stack's test lock (tests/openstack/conftest.py): no test boots or disables hosts
    while the benchmark runs, and the benchmark's servers do not disturb a test."""
    home = Path(os.environ.get("BERTH_OPENSTACK_HOME", Path.home() / ".cache/berth-openstack"))
    with (home / "tests.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def wait_empty(driver: Any, app: Any) -> None:
    """Delete the benchmark's servers (Berth's and Nova's runs'; others' are left alone) and
    wait until they are gone; then Berth reconciles (releases their claims)."""
    ours = {r.server_id for r in app.state.store.list_servers(driver.cluster) if r.server_id}

    def mine() -> set[str]:
        # Nova names a multi-create's servers `<name>-<n>`
        return {s.id for s in driver.servers() if s.id in ours or s.name.startswith("nova-bench")}

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(driver.delete, sorted(mine())))
    deadline = time.monotonic() + 120
    while mine() and time.monotonic() < deadline:
        time.sleep(0.5)
    app.state.clouds.reconcile(driver.cluster)


def berth_run(client: TestClient, h: dict[str, str], app: Any, name: str, args: Any) -> float:
    """Seconds from the first placement to every server ACTIVE."""
    clouds = app.state.clouds
    started = time.perf_counter()
    for _ in range(args.servers // args.batch):
        clouds.poll(name)  # the feed thread's work between requests (heartbeats included)
        r = client.post(
            "/v1/placements",
            json={"flavor": args.flavor, "count": args.batch, "cluster": name},
            headers=h,
        )
        r.raise_for_status()
    while True:
        clouds.poll(name, 0.5)
        states = {s.state for s in app.state.store.list_servers(name) if s.state != "deleted"}
        if states == {"active"}:
            return time.perf_counter() - started


def nova_run(driver: Any, entry: dict[str, Any], args: Any) -> float:
    """Seconds from one multi-create (Nova's scheduler chooses) to every server ACTIVE."""
    conn = driver.conn
    flavor = conn.compute.find_flavor(args.flavor)
    name = f"nova-bench-{time.time_ns()}"
    started = time.perf_counter()
    conn.compute.create_server(
        name=name,
        flavor_id=flavor.id,
        image_id=entry["image_id"],
        networks="none",
        min_count=args.servers,
        max_count=args.servers,
    )
    while True:
        servers = list(conn.compute.servers(details=True, name=name))
        if len(servers) == args.servers and all(s.status == "ACTIVE" for s in servers):
            return time.perf_counter() - started
        if any(s.status == "ERROR" for s in servers):
            raise RuntimeError("a Nova-scheduled server went to ERROR")
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", type=int, default=40)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--flavor", default="m1.tiny")
    args = ap.parse_args()
    entry = stack()[0]
    os.environ[TOKEN_VAR] = entry["token"]
    with stack_turn(), tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/berth.db")
        store.add_region("r1")
        app = create_app(ServiceConfig(db_url=str(store.engine.url)), store=store, background=False)
        h = {"Authorization": f"Bearer {store.create_token('admin', 'admin')[1]}"}
        with TestClient(app) as client:
            config = {
                "compute": entry["compute"],
                "placement": entry["placement"],
                "image": entry.get("image"),
                "auth": {"endpoint": entry["compute"]},
                "credential_ref": f"env:{TOKEN_VAR}",
                "boot_image": entry["image_id"],
                "transport_url": entry["transport_url"],
            }
            body = {
                "name": entry["name"],
                "region": "r1",
                "driver": {"kind": "openstack", "config": config},
            }
            client.post("/v1/clusters", json=body, headers=h).raise_for_status()
            driver = app.state.clouds.registry.get(entry["name"])
            berth, nova = [], []
            wait_empty(driver, app)  # what an earlier, interrupted run left
            for run in range(args.runs):
                berth.append(berth_run(client, h, app, entry["name"], args))
                wait_empty(driver, app)
                nova.append(nova_run(driver, entry, args))
                wait_empty(driver, app)
                print(f"run {run}: Berth {berth[-1]:.1f} s, Nova {nova[-1]:.1f} s", flush=True)
        store.close()
    out = {
        "servers": args.servers,
        "batch": args.batch,
        "runs": args.runs,
        "berth_seconds": berth,
        "nova_seconds": nova,
        "berth_boots_per_s_median": args.servers / statistics.median(berth),
        "nova_boots_per_s_median": args.servers / statistics.median(nova),
    }
    print(
        f"{args.servers} servers to ACTIVE: through Berth (host chosen by Berth, "
        f"{args.batch} per placement) median {statistics.median(berth):.1f} s "
        f"({out['berth_boots_per_s_median']:.2f}/s); Nova's scheduler (one multi-create) "
        f"median {statistics.median(nova):.1f} s ({out['nova_boots_per_s_median']:.2f}/s)"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
