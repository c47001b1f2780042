"""Policy-layer benchmark: the multi-cloud pipeline over 16 IDCs x 2 clusters, 10,000 hosts.

Builds a seeded topology through the public API (`berth.policy.model.TopologySpec` ->
`PolicyEngine`) with the bundled demo policy (6 pools by traits, 18 base flavors, 5 variants,
special users), 16 IDCs in 5 regions, two clusters per IDC, hosts split over the pools; fills
every host to 35-75 % of its pinned CPUs with a mix of on-demand, auto-scaling and preemptible
instances (one region "hot": 90-100 %, mostly preemptible), then times:

* **plain requests**: `PolicyEngine.decide` (+ `commit`) for mixed requests (region, base
  flavor, 1-4 instances, the three business types, 10 % in deployment sets) that place without
  eviction;
* **preemption requests**: on-demand requests in the hot region that only fit after eviction
  (`decide` builds the least-damage plan; `commit` carries it out);
* **capacity report**: every (base flavor, variant) over every cluster, warm (between batches of
  committed requests, so the per-flavor caches are refreshed incrementally) and cold.

Prints a table, then one JSON line (the last line of stdout), and writes a Markdown report
(default `benchmarks/results/policy.md`; `--quick` writes `policy-quick.md`).

    .venv/bin/python benchmarks/bench_policy.py [--hosts 10000] [--requests N] [--quick]
                                                [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from berth.core.errors import ClaimError
from berth.core.model import DiskInventory, Host, NumaCell
from berth.policy import demo
from berth.policy.demo import build_demo_policy
from berth.policy.model import (
    Business,
    ClusterSpec,
    IdcSpec,
    Network,
    RegionSpec,
    TopologySpec,
)
from berth.policy.outcome import Failure, Placement, ScheduleRequest
from berth.policy.pipeline import PolicyEngine
from berth.policy.topology import InstanceMeta
from provenance import machine, source_state

SEED = 20_260_603
NOW = 1_780_000_000.0
REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path("benchmarks/results/policy.md")
QUICK_OUT = Path("benchmarks/results/policy-quick.md")
SOURCE_PATHS = ("src/berth/policy", "src/berth/core")
"""The code this benchmark measures (its uncommitted changes are named in the header)."""
REGIONS = {
    "north": 4,
    "east": 4,
    "south": 3,
    "west": 3,
    "hot": 2,  # filled almost full with preemptible instances: on-demand requests must evict
}
POOL_SHARE = {
    "shared": 0.55,
    "enterprise": 0.10,
    "local-hdd": 0.08,
    "local-ssd": 0.07,
    "dpdk": 0.12,
    "gpu": 0.08,
}
HARDWARE, TRAITS = demo.HARDWARE, demo.POOL_TRAITS

log = Console(stderr=True, highlight=False, width=140)


# ---------------------------------------------------------------------------------- topology
def build_spec(hosts: int, seed: int) -> TopologySpec:
    rng = random.Random(seed)
    idcs_total = sum(REGIONS.values())
    clusters = idcs_total * 2
    per_cluster = hosts // clusters
    extra = hosts - per_cluster * clusters
    regions = []
    k = 0
    for region, n_idcs in REGIONS.items():
        idcs = []
        for i in range(n_idcs):
            idc = f"{region}-{i + 1}"
            cluster_specs = []
            for c in range(2):
                name = f"{idc}-c{c + 1}"
                n = per_cluster + (1 if k < extra else 0)
                k += 1
                cluster_specs.append(
                    ClusterSpec(
                        name=name,
                        networks=[Network(name=f"{name}-net", free_ips=100_000)],
                        hosts=_hosts(name, idc, n, rng),
                    )
                )
            idcs.append(
                IdcSpec(name=idc, images=["centos-7.9", "ubuntu-22.04"], clusters=cluster_specs)
            )
        regions.append(RegionSpec(name=region, idcs=idcs))
    return TopologySpec(now=NOW, regions=regions)


def _hosts(cluster: str, idc: str, n: int, rng: random.Random) -> list[Host]:
    out = []
    pools = list(POOL_SHARE)
    counts = [int(n * POOL_SHARE[p]) for p in pools]
    counts[0] += n - sum(counts)
    i = 0
    for pool, count in zip(pools, counts, strict=True):
        shared, dedicated, mem_gb, huge_gb, pci, hdd, ssd = HARDWARE[pool]
        for j in range(count):
            out.append(
                Host(
                    name=f"{cluster}-{pool}-{j:04d}",
                    availability_zone=idc,
                    traits=list(TRAITS[pool]),
                    enabled=rng.random() > 0.01,
                    last_heartbeat=NOW - rng.randint(1, 30),
                    reserved_memory_mb=4096,
                    hugepage_size_kb=1048576 if huge_gb else 0,
                    disk=DiskInventory(hdd_gb=hdd, ssd_gb=ssd),
                    rack=f"{idc}-r{i // 20:03d}",
                    numa_cells=[
                        NumaCell(
                            shared_cpus=shared,
                            dedicated_cpus=dedicated,
                            memory_mb=mem_gb * 1024,
                            hugepages_mb=huge_gb * 1024,
                            pci=dict(pci),
                        )
                        for _ in range(2)
                    ],
                )
            )
            i += 1
    return out


def fill(engine: PolicyEngine, seed: int) -> dict[str, int]:
    """Claim instances directly into the tables (fast), with business types and ages."""
    rng = random.Random(seed)
    cat = engine.catalogue
    by_pool: dict[str, list[str]] = {}
    for (_, variant), cand in cat.concrete.items():
        if variant in ("numa1", "numa2", "dpdk-numa1", "dpdk-numa2"):
            by_pool.setdefault(cand.pool, []).append(cand.flavor)
    by_pool["enterprise"] = [c.flavor for c in cat.concrete.values() if c.pool == "shared"]
    small = {
        pool: [f for f in names if cat.flavors[f].vcpus <= 8] for pool, names in by_pool.items()
    }
    stats: Counter[str] = Counter()
    n = 0
    for cluster in engine.topology.clusters.values():
        table = cluster.table
        hot = cluster.region == "hot"
        pool_of: dict[int, str] = {}
        for pool in POOL_SHARE:
            for member in np.flatnonzero(cluster.pool_mask(tuple(TRAITS[pool][:1]))):
                pool_of[int(member)] = pool
        for row, name in enumerate(table.names):
            pool = pool_of[row]
            target = rng.uniform(0.9, 1.0) if hot else rng.uniform(0.35, 0.75)
            capacity = int(table.cell_cap[row, :, 1].sum())
            used = 0
            misses = 0
            while used < target * capacity and misses < 6:
                tiny = misses > 2 or (hot and rng.random() < 0.6)  # hot hosts: many small VMs
                flavor = rng.choice(small[pool] if tiny and small[pool] else by_pool[pool])
                iid = f"vm-{n:08d}"
                try:
                    table.claim(iid, name, flavor)
                except ClaimError:
                    misses += 1
                    continue
                used += cat.flavors[flavor].vcpus
                roll = rng.random()
                business = (
                    Business.PREEMPTIBLE
                    if roll < (0.8 if hot else 0.3)
                    else Business.AUTO_SCALING
                    if roll < (0.9 if hot else 0.45)
                    else Business.ON_DEMAND
                )
                meta = InstanceMeta(business, NOW - rng.uniform(60, 30 * 86400), "filler", None)
                cluster.note(iid, name, meta)
                stats[business.value] += 1
                n += 1
    stats["instances"] = n
    return dict(stats)


# ---------------------------------------------------------------------------------- timing
def percentiles(xs: Sequence[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0, "median_ms": float("nan"), "p99_ms": float("nan")}
    a = np.array(xs) * 1e3
    return {
        "n": len(xs),
        "median_ms": round(float(np.median(a)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "mean_ms": round(float(a.mean()), 3),
    }


def make_request(rng: random.Random, engine: PolicyEngine, n: int, hot: bool) -> ScheduleRequest:
    bases = list(engine.catalogue.bases)
    weights = [
        1 if engine.catalogue.bases[b].family.value == "gpu" else 3 if "large" in b else 2
        for b in bases
    ]
    if hot:
        return ScheduleRequest(
            region="hot",
            flavor=rng.choice(["v.g3.4xlarge", "v.m3.2xlarge", "v.c3.4xlarge", "v.m3.4xlarge"]),
            count=1,
            business=Business.ON_DEMAND,
            seed=n,
        )
    regions = [r for r in REGIONS if r != "hot"]
    business = rng.choices(list(Business), weights=[55, 15, 30])[0]
    ds = f"set-{rng.randrange(40)}" if rng.random() < 0.1 else None
    return ScheduleRequest(
        region=rng.choice(regions),
        flavor=rng.choices(bases, weights=weights)[0],
        count=rng.choices([1, 2, 3, 4], weights=[80, 10, 5, 5])[0],
        business=business,
        user=rng.choice(["default", "default", "bigdata", "fin-core", "web"]),
        deployment_set=ds,
        seed=n,
    )


def run(hosts: int, requests: int, preempt_requests: int, seed: int) -> dict[str, Any]:
    log.print(f"[bold]{hosts:,} hosts[/]: building topology ...")
    t0 = time.perf_counter()
    spec = build_spec(hosts, seed)
    policy = build_demo_policy()
    # the demo's per-IDC preemptible limits suit its small IDCs; these hold ~1,000 each
    limits = policy.preemptible_limits.model_copy(update={"default": 5_000, "idcs": {}})
    engine = PolicyEngine(policy.model_copy(update={"preemptible_limits": limits}), spec)
    built_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    stats = fill(engine, seed)
    fill_s = time.perf_counter() - t0
    n_clusters = len(engine.topology.clusters)
    log.print(
        f"  {n_clusters} clusters in {len(engine.topology.idcs)} IDCs, built in {built_s:.1f} s; "
        f"filled {stats['instances']:,} instances in {fill_s:.1f} s"
    )
    entries = sum(len(engine.catalogue.variants_of(b)) for b in engine.catalogue.bases)

    t0 = time.perf_counter()
    engine.capacity(NOW)
    cold_ms = (time.perf_counter() - t0) * 1e3

    rng = random.Random(seed + 1)
    decide_plain: list[float] = []
    commit_plain: list[float] = []
    decide_failed: list[float] = []
    report_warm: list[float] = []
    outcomes: Counter[str] = Counter()
    variants: Counter[str] = Counter()
    for n in range(requests):
        req = make_request(rng, engine, n, hot=False)
        t0 = time.perf_counter()
        out = engine.decide(req, NOW)
        t1 = time.perf_counter()
        if isinstance(out, Placement) and not out.evictions:
            engine.commit(out, NOW)
            t2 = time.perf_counter()
            decide_plain.append(t1 - t0)
            commit_plain.append(t2 - t1)
            outcomes["placed"] += 1
            variants[out.variant] += 1
        elif isinstance(out, Placement):
            outcomes["placed_with_eviction"] += 1
        else:
            assert isinstance(out, Failure)
            decide_failed.append(t1 - t0)
            outcomes[f"failed:{out.code}"] += 1
        if n % 25 == 24:
            t0 = time.perf_counter()
            engine.capacity(NOW)
            report_warm.append(time.perf_counter() - t0)

    decide_preempt: list[float] = []
    commit_preempt: list[float] = []
    victims: list[int] = []
    searches: Counter[str] = Counter()
    tries = 0
    while len(decide_preempt) < preempt_requests and tries < preempt_requests * 5:
        tries += 1
        req = make_request(rng, engine, 100_000 + tries, hot=True)
        t0 = time.perf_counter()
        out = engine.decide(req, NOW)
        t1 = time.perf_counter()
        if isinstance(out, Placement) and out.evictions:
            engine.commit(out, NOW)
            t2 = time.perf_counter()
            decide_preempt.append(t1 - t0)
            commit_preempt.append(t2 - t1)
            victims.append(len(out.evictions))
            assert out.plan is not None
            searches[out.plan.search] += 1
        elif isinstance(out, Placement):
            engine.commit(out, NOW)
            outcomes["hot_placed_without_eviction"] += 1
        else:
            outcomes[f"hot_failed:{out.code}"] += 1

    result: dict[str, Any] = {
        "hosts": hosts,
        "clusters": n_clusters,
        "idcs": len(engine.topology.idcs),
        "instances_filled": stats["instances"],
        "flavor_variants": entries,
        "plain_decide": percentiles(decide_plain),
        "plain_commit": percentiles(commit_plain),
        "failed_decide": percentiles(decide_failed),
        "preemption_decide": percentiles(decide_preempt),
        "preemption_commit": percentiles(commit_preempt),
        "victims_per_preemption": (round(float(np.mean(victims)), 2) if victims else None),
        "preemption_search": dict(searches),
        "capacity_report_warm": percentiles(report_warm),
        "capacity_report_cold_ms": round(cold_ms, 3),
        "outcomes": dict(outcomes),
        "variants_placed": dict(variants),
        "plain_success_rate": round(
            (outcomes["placed"] + outcomes["placed_with_eviction"]) / max(1, requests), 4
        ),
    }
    return result


# ---------------------------------------------------------------------------------- report
def render(result: dict[str, Any], command: str) -> str:
    m = machine()
    r = result

    def row(name: str, p: dict[str, Any], target: str = "") -> str:
        return f"| {name} | {p['n']} | {p['median_ms']} | {p['p99_ms']} | {target} |"

    lines = [
        "# Policy-layer benchmark",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {m['cpu_model'] or m['processor']}, {m['nproc']} CPUs; {m['platform']}",
        f"- python {m['python']}, numpy {m['numpy']}, pydantic {m['pydantic']}",
        f"- load average at the end: {m['load']} (a shared machine: other work skews p99)",
        f"- source: {source_state(SOURCE_PATHS, 'policy/core')}",
        f"- command: `{command}`",
        "",
        f"Topology: {r['hosts']:,} hosts in {r['clusters']} clusters, {r['idcs']} IDCs, "
        f"5 regions, 6 pools by traits; {r['instances_filled']:,} instances filled "
        f"(one region 90-100 % full, mostly preemptible); {r['flavor_variants']} "
        "(base flavor, variant) pairs in the catalogue.",
        "",
        "| measure | n | median ms | p99 ms | target |",
        "|---|---|---|---|---|",
        row("plain request: decide", r["plain_decide"], "≤ 2 ms median"),
        row("plain request: commit", r["plain_commit"]),
        row("failed request: decide (explained)", r["failed_decide"]),
        row("preemption request: decide (plan)", r["preemption_decide"]),
        row("preemption request: commit (evict + claim)", r["preemption_commit"]),
        row("capacity report, all flavors, warm", r["capacity_report_warm"], "≤ 50 ms"),
        "",
        f"Cold capacity report (first call, every per-flavor count computed): "
        f"{r['capacity_report_cold_ms']} ms.",
        f"Victims per preemption (mean): {r['victims_per_preemption']}; search used: "
        f"{r['preemption_search']}.",
        f"Outcomes: {r['outcomes']} (mixed requests placed: {r['plain_success_rate']:.1%}).",
        f"Variants placed (plain): {r['variants_placed']}.",
        "",
        "Plain requests are mixed: 5 regions x 18 base flavors, 1-4 instances, on-demand / "
        "auto-scaling / preemptible 55/15/30, 10 % in one of 40 deployment sets, special users; "
        "each success is committed so later requests see it. The warm capacity report runs "
        "after every 25 requests (its caches are refreshed for the hosts those requests changed).",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=2_000, help="plain requests")
    parser.add_argument("--preempt", type=int, default=200, help="preemption requests")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = min(args.requests, 300)
        args.preempt = min(args.preempt, 40)
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    command = shlex.join(["python", "benchmarks/bench_policy.py", *(argv or sys.argv[1:])])
    result = run(args.hosts, args.requests, args.preempt, args.seed)

    grid = Table(title=f"Policy pipeline, {result['hosts']:,} hosts")
    for col in ("measure", "n", "median ms", "p99 ms"):
        grid.add_column(col)
    for key in (
        "plain_decide",
        "plain_commit",
        "failed_decide",
        "preemption_decide",
        "preemption_commit",
        "capacity_report_warm",
    ):
        p = result[key]
        grid.add_row(key, str(p["n"]), str(p["median_ms"]), str(p["p99_ms"]))
    Console(width=140).print(grid)
    target = REPO / out if not out.is_absolute() else out
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(result, command), encoding="utf-8")
    log.print(f"wrote {target}")
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
