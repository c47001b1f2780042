"""Berth's `nova` profile against Nova 34's own scheduler code at 100, 1,000 and 10,000 hosts.

One run: for each size and workload (plain: shared floating guests; NUMA: pinned one- and
two-cell guests; mixed: both) a fleet is filled to about half by Berth, then a sequence of
requests is decided by Berth (and committed) while Nova's code (scripts/nova/runner.py, in the
venv of scripts/ensure-nova-venv.sh) decides each on the same state. Reported: the share of
requests where both chose the same host (or hosts Nova weighs exactly alike), where the
feasible sets agreed, and the time per decision of each (Berth's `select_destinations`; Nova's
filter, weigher and claim loop, without building its HostState objects).

    python benchmarks/bench_nova.py [--out benchmarks/results/nova.md]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.nova.runner import NovaRunner, nova_hosts  # noqa: E402

from berth.core.config import SchedulerConfig, profile  # noqa: E402
from berth.core.engine import FilterScheduler, commit  # noqa: E402
from berth.core.explain import NoValidHost  # noqa: E402
from berth.core.filters.base import Context  # noqa: E402
from berth.core.model import DiskInventory, Flavor, Fleet, Host, NumaCell  # noqa: E402
from berth.core.request import RequestSpec  # noqa: E402
from berth.core.table import HostTable  # noqa: E402
from provenance import machine  # noqa: E402

SIZES = {100: 20, 1000: 6, 10000: 2}
"""Hosts -> requests decided (Nova's code takes seconds per decision at 10,000 hosts)."""
NOW = 1_000_000.0


def fleet_of(n: int, kind: str, rng: random.Random) -> Fleet:
    hosts = []
    for i in range(n):
        pinned = 0 if kind == "plain" else 16
        shared = 24 if kind != "numa" else 8
        mem = rng.choice([131072, 196608, 262144])
        hosts.append(
            Host(
                name=f"h{i:05d}",
                numa_cells=[NumaCell(shared_cpus=shared, dedicated_cpus=pinned, memory_mb=mem)] * 2,
                cpu_allocation_ratio=rng.choice([1.0, 2.0, 4.0]),
                reserved_memory_mb=4096,
                disk=DiskInventory(hdd_gb=rng.choice([1000, 2000])),
                io_ops=rng.randint(0, 3),
                last_heartbeat=NOW,
            )
        )
    floating = [
        Flavor(name=f"s{v}", vcpus=v, memory_mb=v * 4096, root_gb=20) for v in (1, 2, 4, 8, 16)
    ]
    numa = [
        Flavor(
            name=f"p{v}n{c}",
            vcpus=v,
            memory_mb=v * 4096,
            root_gb=40,
            extra_specs={"hw:cpu_policy": "dedicated", "hw:numa_nodes": str(c)},
        )
        for v, c in ((2, 1), (4, 1), (8, 2), (16, 2))
    ]
    flavors = {"plain": floating, "numa": numa, "mixed": floating + numa}[kind]
    return Fleet(now=NOW, hosts=hosts, flavors=flavors)


def fill(fleet: Fleet, rng: random.Random) -> HostTable:
    """About half the fleet's CPUs used, placed by Berth's chance driver."""
    table = HostTable.from_fleet(fleet)
    chance = FilterScheduler.from_config(SchedulerConfig(driver="chance"))
    names = [f.name for f in fleet.flavors]
    for k in range(len(fleet.hosts) * 4):
        req = RequestSpec(flavor=rng.choice(names))
        try:
            chance.place_one(table, req, NOW, instance_id=f"fill-{k}", seed=k)
        except NoValidHost:
            continue
    return table


def run(nova: NovaRunner, n: int, kind: str, requests: int) -> dict[str, Any]:
    rng = random.Random(n * 7 + len(kind))
    fleet = fleet_of(n, kind, rng)
    table = fill(fleet, rng)
    sched = FilterScheduler.from_config(profile("nova"))
    names = [f.name for f in fleet.flavors]
    same = feasible = 0
    berth_s: list[float] = []
    nova_s: list[float] = []
    for k in range(requests):
        req = RequestSpec(flavor=rng.choice(names), instance_ids=(str(uuid.UUID(int=k + 1)),))
        now = fleet.model_copy(update={"instances": table.snapshot_instances()})
        cells = {
            a.instance_id: table.demand(a.flavor).cells_used(a.cell_use)
            for a in table.allocations.values()
        }
        f = next(x for x in fleet.flavors if x.name == req.flavor)
        case = {
            "hosts": nova_hosts(now, cells),
            "explain": False,
            "request": {
                "flavor": {
                    "name": f.name,
                    "vcpus": f.vcpus,
                    "memory_mb": f.memory_mb,
                    "root_gb": f.root_gb,
                    "ephemeral_gb": f.ephemeral_gb,
                    "swap_mb": f.swap_mb,
                    "extra_specs": dict(f.extra_specs),
                },
                "instance_ids": list(req.ids()),
            },
        }
        [result] = nova.run([case])
        t0 = time.perf_counter()
        try:
            decision = sched.select_destinations(table, req, NOW)
        except NoValidHost:
            decision = None
        berth_s.append(time.perf_counter() - t0)
        nova_s.append(result["seconds"])
        step = result["steps"][0]
        ctx = Context(table, req, table.demand(req.flavor), NOW)
        mask = ctx.table.everyone().copy()
        for flt in sched.filters:
            mask &= flt.mask(ctx)
        passed = sorted(table.names[r] for r in mask.nonzero()[0])
        feasible += passed == step["passed"]
        if decision is None:
            same += step["chosen"] is None
            continue
        host, w = decision.hosts[0], step["weights"]
        tie = host in w and step["chosen"] in w and w[host] == w[step["chosen"]]
        same += host == step["chosen"] or tie
        commit(table, decision)
    return {
        "hosts": n,
        "kind": kind,
        "requests": requests,
        "same": same,
        "feasible": feasible,
        "berth_ms": statistics.median(berth_s) * 1000,
        "nova_ms": statistics.median(nova_s) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "nova.md"))
    args = parser.parse_args()
    nova = NovaRunner()
    rows = []
    for n, requests in SIZES.items():
        for kind in ("plain", "numa", "mixed"):
            row = run(nova, n, kind, requests)
            print(row, flush=True)
            rows.append(row)
    nova.close()
    write(Path(args.out), rows, nova.version)


def write(path: Path, rows: list[dict[str, Any]], version: str) -> None:
    m = machine()
    lines = [
        "# The `nova` profile against Nova's own scheduler code",
        "",
        f"Machine: 2-core shared VM ({m['cpu_model']}, load {m['load']} at the end), "
        "2026-12-01, one "
        f"run of `python benchmarks/bench_nova.py`; Nova {version} from PyPI "
        "(scripts/ensure-nova-venv.sh). Times are medians per decision. Berth: "
        "`select_destinations` with the `nova` profile; Nova: its filter handler, weigher "
        "handler and claim loop on HostState objects built beforehand "
        "(scripts/nova/runner.py). Same host: Berth chose Nova's host or one Nova weighs "
        "exactly alike (or both answered NoValidHost).",
        "",
        "| hosts | workload | requests | same host | same feasible set | Berth ms | Nova ms "
        "| Nova / Berth |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r["nova_ms"] / r["berth_ms"] if r["berth_ms"] else float("nan")
        lines.append(
            f"| {r['hosts']:,} | {r['kind']} | {r['requests']} | {r['same']}/{r['requests']} "
            f"| {r['feasible']}/{r['requests']} | {r['berth_ms']:.2f} | {r['nova_ms']:.0f} "
            f"| {ratio:,.0f}× |"
        )
    lines.append("")
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    main()
