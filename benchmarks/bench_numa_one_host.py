"""One host's claim footprint: `numa.scalar` (plain integers) against the compiled rule.

The question of docs/numa.md ("why `scalar` stays"): can one numba call on one host replace the
plain-integer copy of the claim rule? On the `bench_core` fleet (filled as it fills it), for
every flavor whose footprint depends on the host, the footprint on random hosts both ways, in
interleaved rounds; the two must agree exactly (asserted). Prints the medians, then one JSON
line.

    .venv/bin/python benchmarks/bench_numa_one_host.py [--hosts 1000] [--rows 2000] [--rounds 7]
                                                      [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from bench_core import SEED, build_fleet, fill
from berth.core import jit
from berth.core.demand import Demand
from berth.core.flavors import NumaMode
from berth.core.numa import compiled, scalar
from berth.core.table import HostTable
from provenance import machine

I64 = npt.NDArray[np.int64]


def _place_one(
    cell_free: I64,
    row: int,
    mode: int,
    cells: I64,
    units: I64,
    fixed: I64,
    pci: I64,
    flex: I64,
    use0: I64,
    use1: I64,
) -> None:
    compiled._place1(
        cell_free[row, 0], cell_free[row, 1], mode, cells, units, fixed, pci, flex, use0, use1
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="200 hosts, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.rounds = 200, 3

    jit.prepare()  # compiles `compiled._place1` among the helpers
    place_one = jit.compile_kernel(_place_one, globals())
    fleet = build_fleet(args.hosts, SEED)
    table = HostTable.from_fleet(fleet)
    fill(table, fleet, SEED)
    host_dependent = [
        d
        for d in table.demands.values()
        if d.mode != NumaMode.NONE and (d.mode != NumaMode.EVEN or d.pci.any())
    ]
    rows = np.random.default_rng(0).integers(0, len(table), args.rows).tolist()
    width = table.width

    def via_scalar(d: Demand, row: int) -> I64:
        return np.array(scalar.place(d.rows, table.cell_free[row].tolist()), dtype=np.int64)

    def via_compiled(d: Demand, row: int) -> I64:
        p = d.packed
        out = np.empty((2, width), dtype=np.int64)
        place_one(table.cell_free, row, p.mode, p.cells, p.units, p.fixed, p.pci, p.flex, *out)
        return out

    for d in host_dependent:
        for row in rows:
            assert via_scalar(d, row).tolist() == via_compiled(d, row).tolist(), d.spec.name
    ways: dict[str, Callable[[Demand, int], I64]] = {
        "scalar": via_scalar,
        "compiled": via_compiled,
    }
    runs: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            started = time.perf_counter()
            for d in host_dependent:
                for row in rows:
                    way(d, row)
            per_call = (time.perf_counter() - started) / (len(host_dependent) * len(rows))
            runs[name].append(per_call * 1e6)
    medians = {name: statistics.median(us) for name, us in runs.items()}
    for name, us in medians.items():
        print(f"{name}: {us:.2f} µs per one-host footprint (median of {args.rounds} rounds)")
    report: dict[str, Any] = {
        "flavors": len(host_dependent),
        "rows": len(rows),
        "median_us": medians,
        "runs_us": runs,
        "machine": machine(),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
