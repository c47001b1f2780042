"""FLEX (the flexible two-cell split) on the mixed fleet's eight-cell hosts: what the exact
count (`numa.flex_wide`) costs, cold and warm, beside an even two-cell flavor of the same size.

The `bench_core` catalogue's flexible flavors (16 and 32 pinned vCPUs) fit no pair of the
mixed fleet's sub-NUMA cells (5 to 7 pinned CPUs each), so they never reach the search; this
adds two that do (8 pinned vCPUs, flexible and even) to the `bench_core` mixed fleet, filled
as it fills it, and times, median of interleaved rounds (process CPU time):

* the capacity column over every host: cold (a fresh demand, so an empty memo) and warm;
* one claim footprint on an eight-cell host (`vector.place` on one row), warm;
* the states seen: distinct canonical states, how many the greedy fill certifies, how many the
  search counts, how many are refused.

    .venv/bin/python benchmarks/bench_flex_wide.py [--hosts 1000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from bench_core import SEED, build_fleet, fill
from berth.core.demand import Demand, build_demand
from berth.core.flavors import parse_flavor
from berth.core.model import Flavor
from berth.core.numa import vector, wide
from berth.core.table import HostTable
from provenance import machine

PINNED = {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}
FLAVORS = [
    Flavor(
        name="b.2xlarge.flex",
        vcpus=8,
        memory_mb=16384,
        root_gb=40,
        extra_specs={**PINNED, "berth:numa_split": "flexible"},
    ),
    Flavor(name="b.2xlarge.numa2", vcpus=8, memory_mb=16384, root_gb=40, extra_specs=PINNED),
]


def _ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.process_time_ns()
        fn()
        times.append((time.process_time_ns() - t0) / 1e6)
    return statistics.median(times)


def _fresh(table: HostTable, flavor: Flavor) -> Demand:
    return build_demand(parse_flavor(flavor, {}), table.device_types)  # no PCI devices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    fleet = build_fleet(args.hosts, SEED, "mixed")
    fleet = fleet.model_copy(update={"flavors": [*fleet.flavors, *FLAVORS]})
    table = HostTable.from_fleet(fleet)
    fill(table, fleet, SEED)
    cf, hf = table.cell_free, table.host_free
    wide_row = int(np.flatnonzero(table.n_cells > 2)[0])
    out: dict[str, object] = {"machine": machine(), "hosts": args.hosts}
    one = (cf[wide_row : wide_row + 1], hf[wide_row : wide_row + 1])
    for flavor in FLAVORS:

        def cold_count(f: Flavor = flavor) -> object:
            return vector.count(_fresh(table, f), cf, hf)

        d = _fresh(table, flavor)

        def warm_count(d: Demand = d) -> object:
            return vector.count(d, cf, hf)

        def claim_one(d: Demand = d) -> object:
            return vector.place(d, *one)

        cold = _ms(cold_count, args.rounds)
        counts = vector.count(d, cf, hf)
        warm = _ms(warm_count, args.rounds)
        claim = _ms(claim_one, args.rounds * 10)
        row: dict[str, object] = {
            "capacity_cold_ms": round(cold, 3),
            "capacity_warm_ms": round(warm, 3),
            "claim_one_host_ms": round(claim, 3),
            "instances_on_8_cell_hosts": int(counts[table.n_cells > 2].sum()),
            "instances_on_2_cell_hosts": int(counts[table.n_cells <= 2].sum()),
        }
        if flavor.name.endswith(".flex"):
            search = wide.flex_search_of(d)
            states = list(search.memo)
            row["states"] = len(states)
            row["certified"] = sum(isinstance(search.memo[s][1], int) for s in states)
            row["refused"] = sum(search.refused(s) for s in states)
            row["searched"] = len(states) - row["certified"] - row["refused"]  # type: ignore[operator]
        out[flavor.name] = row
        print(flavor.name, row)
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
