"""The OpenStack driver on the real stack of scripts/ensure-openstack.sh.

Results: benchmarks/results/openstack.md.

Measures: import time of a cluster (`inventory()`), notification lag (Nova's publish time ->
the driver's log, and a delete call -> `ServerGone` heard), boots per second through the
driver (each on a chosen host) against Nova's own scheduler (no host) on the same cluster,
and, with `--providers N`, import time of a Placement with N resource providers created
through its API (a separate Placement on SQLite, started here from the stack's venv).

    python benchmarks/bench_openstack.py [--boots 10] [--providers 1000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from berth.cloud.driver import BootRequest, ServerGone
from berth.cloud.openstack import OpenStackCloud, from_stack
from berth.cloud.openstack.config import PLACEMENT_MICROVERSION
from berth.cloud.openstack.feed import ChangeLog, NotificationListener
from berth.cloud.openstack.fleet import FleetParts, Provider, build_fleet
from berth.cloud.openstack.reading import placement_get, providers

ROOT = Path(__file__).resolve().parents[1]


def stack() -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(ROOT / "scripts" / "ensure-openstack.sh"), "up"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(Path(out.stdout.strip().splitlines()[-1]).read_text())["clusters"]


def import_seconds(entry: dict[str, Any], repeats: int = 5) -> tuple[float, float]:
    """Median seconds of `inventory()`: cold (a new driver each time) and warm (the same
    driver again: providers whose generation did not move are not read again)."""
    cold, warm = [], []
    for _ in range(repeats):
        cloud = from_stack(entry, notifications=False)
        t0 = time.perf_counter()
        cloud.inventory()
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        cloud.inventory()
        warm.append(time.perf_counter() - t0)
        cloud.close()
    return statistics.median(cold), statistics.median(warm)


def boot_rate(cloud: OpenStackCloud, n: int, *, chosen: bool, flavor: str = "m1.tiny") -> float:
    """Boots per second: n boots sent one after another, until all are ACTIVE, then deleted.

    `chosen`: through the driver, each on a host picked round-robin (what Berth does);
    otherwise straight through the SDK without a host, so that Nova's scheduler picks.
    """
    hosts = sorted(h.name for h in cloud.inventory().hosts if h.enabled)
    ids = []
    t0 = time.perf_counter()
    for i in range(n):
        name = f"bench-{uuid.uuid4().hex[:8]}"
        if chosen:
            ids.append(cloud.boot(BootRequest(name, flavor, hosts[i % len(hosts)])).id)
        else:
            flv = cloud.conn.compute.find_flavor(flavor, ignore_missing=False)
            created = cloud.conn.compute.create_server(
                name=name, flavor_id=flv.id, image_id=cloud.config.boot_image, networks="none"
            )
            ids.append(created.id)
    for sid in ids:
        cloud.wait_for(sid, timeout=300)
    rate = n / (time.perf_counter() - t0)
    for sid in ids:
        cloud.delete(sid)
    return rate


def notification_lags(entry: dict[str, Any], n: int) -> tuple[float, float]:
    """(median publish -> driver log, median delete call -> ServerGone heard), in seconds."""
    lags: list[float] = []

    def on_message(note: dict[str, Any]) -> None:
        sent = dt.datetime.strptime(note["timestamp"], "%Y-%m-%d %H:%M:%S.%f")
        lags.append(time.time() - sent.replace(tzinfo=dt.UTC).timestamp())

    log = ChangeLog()
    listener = NotificationListener(
        entry["transport_url"], "nova", "versioned_notifications", "lag.", log, on_message
    )
    listener.start()
    listener.ready.wait(10)
    cloud = from_stack(entry)
    cloud.wait_listening(10)
    gone: list[float] = []
    try:
        for _ in range(n):
            s = cloud.boot(BootRequest(f"lag-{uuid.uuid4().hex[:8]}", "m1.tiny", cloud_host(cloud)))
            cloud.wait_for(s.id)
            cursor = cloud.changes(None).cursor
            t0 = time.perf_counter()
            cloud.delete(s.id)
            heard = False
            while not heard:
                batch = cloud.changes(cursor, timeout=5)
                cursor = batch.cursor
                heard = any(
                    isinstance(c, ServerGone) and c.server_id == s.id for c in batch.changes
                )
            gone.append(time.perf_counter() - t0)
    finally:
        listener.stop()
        cloud.close()
    return statistics.median(lags), statistics.median(gone)


def cloud_host(cloud: OpenStackCloud) -> str:
    return sorted(h.name for h in cloud.inventory().hosts if h.enabled)[0]


def per_provider(conn: Any, threads: int = 8) -> list[Provider]:
    """The reading before `reading.providers` listed traits and aggregates in bulk: four GETs
    per provider (inventories, traits, aggregates, allocations) on `threads` threads; kept
    here as the reference the benchmark compares with."""
    listed = placement_get(conn, "/resource_providers")["resource_providers"]

    def one(rp: dict[str, Any]) -> Provider:
        base = f"/resource_providers/{rp['uuid']}"
        allocations = placement_get(conn, f"{base}/allocations")["allocations"]
        return Provider(
            uuid=rp["uuid"],
            name=rp["name"],
            root=rp.get("root_provider_uuid") or rp["uuid"],
            parent=rp.get("parent_provider_uuid"),
            inventories=placement_get(conn, f"{base}/inventories")["inventories"],
            traits=sorted(placement_get(conn, f"{base}/traits")["traits"]),
            aggregates=sorted(placement_get(conn, f"{base}/aggregates")["aggregates"]),
            allocations={c: dict(a["resources"]) for c, a in allocations.items()},
        )

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, listed))


def populate(conn: Any, count: int, aggregates: list[str], threads: int = 4) -> None:
    """`count` compute-like providers through Placement's API: inventories, two traits of 20
    custom ones plus a standard one, one of `aggregates`, and an allocation on every fifth."""
    mv = {"microversion": PLACEMENT_MICROVERSION}
    for t in range(20):
        conn.placement.put(f"/traits/CUSTOM_BENCH_{t}", **mv).raise_for_status()

    def one(i: int) -> None:
        rp = str(uuid.uuid4())
        body: dict[str, Any] = {"name": f"rp{i:05d}", "uuid": rp}
        conn.placement.post("/resource_providers", json=body, **mv).raise_for_status()
        inv = {
            "inventories": {
                "VCPU": {"total": 64, "allocation_ratio": 4.0},
                "MEMORY_MB": {"total": 262144, "reserved": 4096},
                "DISK_GB": {"total": 2000},
            },
            "resource_provider_generation": 0,
        }
        put = conn.placement.put
        put(f"/resource_providers/{rp}/inventories", json=inv, **mv).raise_for_status()
        traits = [
            f"CUSTOM_BENCH_{i % 20}",
            f"CUSTOM_BENCH_{(i * 7) % 20}",
            "COMPUTE_NET_VIF_MODEL_VIRTIO",
        ]
        body = {"traits": sorted(set(traits)), "resource_provider_generation": 1}
        put(f"/resource_providers/{rp}/traits", json=body, **mv).raise_for_status()
        body = {"aggregates": [aggregates[i % len(aggregates)]], "resource_provider_generation": 2}
        put(f"/resource_providers/{rp}/aggregates", json=body, **mv).raise_for_status()
        if i % 5 == 0:
            alloc = {
                "allocations": {rp: {"resources": {"VCPU": 4, "MEMORY_MB": 8192}}},
                "project_id": "bench",
                "user_id": "bench",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            }
            put(f"/allocations/{uuid.uuid4()}", json=alloc, **mv).raise_for_status()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))


def placement_only(count: int, workers: int, repeats: int = 3) -> dict[str, float]:
    """A Placement (gunicorn, `workers` processes, SQLite) with `count` providers made through
    its API; time to create them and median import times, four GETs per provider against
    `reading.providers`, with one and eight client threads."""
    home = Path(os.environ.get("BERTH_OPENSTACK_HOME", Path.home() / ".cache" / "berth-openstack"))
    venv = home / "venv" / "bin"
    port = 28790
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp)
        (conf / "placement.conf").write_text(
            f"[api]\nauth_strategy = noauth2\n[placement_database]\n"
            f"connection = sqlite:///{tmp}/placement.db\n"
        )
        (conf / "gunicorn.conf.py").write_text(
            f'wsgi_app = "placement.wsgi.api:application"\nbind = "127.0.0.1:{port}"\n'
            f"workers = {workers}\n"
        )
        subprocess.run(
            [venv / "placement-manage", "--config-file", conf / "placement.conf", "db", "sync"],
            check=True,
            capture_output=True,
        )
        env = {**os.environ, "OS_PLACEMENT_CONFIG_DIR": tmp}
        env.pop("PYTHONPATH", None)
        proc = subprocess.Popen(
            [venv / "gunicorn"],
            cwd=tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            import openstack

            conn = openstack.connect(
                auth_type="admin_token",
                auth={"endpoint": f"http://127.0.0.1:{port}", "token": "admin"},
                placement_endpoint_override=f"http://127.0.0.1:{port}",
            )
            for _ in range(200):
                try:
                    conn.placement.get("/", microversion="1.39").raise_for_status()
                    break
                except Exception:
                    time.sleep(0.2)
            aggregates = [str(uuid.uuid4()) for _ in range(10)]
            t0 = time.perf_counter()
            populate(conn, count, aggregates, threads=1)  # SQLite: one writer at a time
            out = {"create": time.perf_counter() - t0}
            want = None
            known: dict[str, Provider] = {}
            readers: list[tuple[str, Callable[[], list[Provider]]]] = [
                ("per_provider_1", lambda: per_provider(conn, threads=1)),
                ("per_provider_8", lambda: per_provider(conn, threads=8)),
                ("bulk_1", lambda: providers(conn, aggregates, threads=1)),
                ("bulk_8", lambda: providers(conn, aggregates, threads=8)),
                ("bulk_8_warm", lambda: providers(conn, aggregates, threads=8, known=known)),
            ]
            for label, read in readers:
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    got = read()
                    times.append(time.perf_counter() - t0)
                fleet = build_fleet(FleetParts(prefix="p.", providers=got))
                assert len(fleet.hosts) == count
                shape = sorted(
                    (p.name, tuple(p.traits), tuple(p.aggregates), len(p.allocations)) for p in got
                )
                assert want is None or shape == want, f"{label} read other providers"
                want = shape
                known = {p.uuid: p for p in got}  # the warm read's: nothing moved since
                out[label] = statistics.median(times)
            return out
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boots", type=int, default=10)
    ap.add_argument("--lags", type=int, default=5)
    ap.add_argument("--providers", type=int, default=0)
    ap.add_argument("--placement-workers", type=int, default=2)
    ap.add_argument("--only-providers", action="store_true", help="skip the stack's measures")
    args = ap.parse_args()
    if args.only_providers:
        report_providers(args.providers, args.placement_workers)
        return
    clusters = stack()
    for entry in clusters:
        cold, warm = import_seconds(entry)
        print(
            f"{entry['name']}: import median cold {cold * 1000:.0f} ms, warm {warm * 1000:.0f} ms "
            f"({len(entry['hosts'])} hosts)"
        )
    entry = clusters[0]
    cloud = from_stack(entry, notifications=False)
    driver = boot_rate(cloud, args.boots, chosen=True)
    nova = boot_rate(cloud, args.boots, chosen=False)
    print(
        f"boots/s {args.boots} boots: driver (chosen host) {driver:.2f}, "
        f"Nova's scheduler {nova:.2f}"
    )
    cloud.close()
    publish, gone = notification_lags(entry, args.lags)
    print(
        f"notification lag median: publish->driver {publish * 1000:.1f} ms, "
        f"delete call->ServerGone {gone * 1000:.0f} ms"
    )
    if args.providers:
        report_providers(args.providers, args.placement_workers)


def report_providers(count: int, workers: int) -> None:
    got = placement_only(count, workers)
    print(f"placement-only, {count} providers, {workers} Placement workers: " + json.dumps(got))


if __name__ == "__main__":
    main()
