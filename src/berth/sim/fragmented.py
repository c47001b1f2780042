"""A fragmented NUMA fleet shaped like published VM-rescheduling snapshots (docs/defrag.md).

Two 44-vCPU NUMA cells per host, about seven VMs a host, a mix of one-cell guests (2, 4, 8 and
16 vCPUs) and two-cell guests (16 and 32 vCPUs, split evenly); single-cell guests land on a
random cell that fits, not the best one, which leaves the free CPU in pieces a 16-vCPU one-cell
guest cannot use. The shape (cell size, VMs per host, one- and two-cell flavors) follows the
description of ByteDance's VM rescheduling snapshots (280-1,264 hosts, 2,000-3,000 VMs); the
data itself is not bundled, so this generator stands in for it. Deterministic for a seed.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from berth.core.model import DiskInventory, Flavor, Fleet, Host, NumaCell
from berth.core.numa import vector
from berth.core.table import HostTable

NOW = 1_000_000.0
CELL_CPUS = 44
CELL_MEMORY_MB = 44 * 4096 + 16384
MIX: tuple[tuple[str, int, int, float], ...] = (
    ("n2", 2, 1, 0.10),
    ("n4", 4, 1, 0.20),
    ("n8", 8, 1, 0.30),
    ("n16", 16, 1, 0.20),
    ("w16", 16, 2, 0.12),
    ("w32", 32, 2, 0.08),
)
"""(name, vCPUs, NUMA cells, share of VMs)."""
REFERENCE = "n16"
"""The reference flavor of the fragment rate: 16 vCPUs on one cell."""


def flavors() -> list[Flavor]:
    return [
        Flavor(
            name=name,
            vcpus=vcpus,
            memory_mb=vcpus * 4096,
            extra_specs={"hw:numa_nodes": str(cells)},
        )
        for name, vcpus, cells, _ in MIX
    ]


def _empty(n_hosts: int) -> HostTable:
    cell = NumaCell(shared_cpus=CELL_CPUS, memory_mb=CELL_MEMORY_MB)
    hosts = [
        Host(
            name=f"h{i:05d}",
            numa_cells=[cell, cell],
            last_heartbeat=NOW,
            disk=DiskInventory(hdd_gb=0),
        )
        for i in range(n_hosts)
    ]
    return HostTable.from_fleet(Fleet(now=NOW, hosts=hosts, flavors=flavors()))


def fill_then_churn(
    table: HostTable,
    flavors: list[str],
    share: npt.NDArray[np.float64],
    rng: np.random.Generator,
    churn: float,
) -> HostTable:
    """Fill each host with flavors drawn by `share` (placed by the claim rule) until three draws
    miss, then remove a random `churn` of the VMs: the fragmented state a fleet reaches."""
    demands = [table.demand(n) for n in flavors]
    k = 0
    for row, host in enumerate(table.names):
        misses = 0
        while misses < 3:
            pick = int(rng.choice(len(flavors), p=share))
            cells, free = table.cell_free[row : row + 1], table.host_free[row : row + 1]
            if vector.fits(demands[pick], cells, free)[0]:
                table.claim(f"vm{k}", host, flavors[pick])
                k += 1
            else:
                misses += 1
    ids = list(table.allocations)
    for i in rng.permutation(len(ids))[: int(churn * len(ids))]:
        table.release(ids[i])
    return table


def _churned(n_hosts: int, seed: int, churn: float) -> HostTable:
    """Hosts filled by the claim rule until three misses, then `churn` of the VMs removed."""
    rng = np.random.default_rng(seed)
    table = _empty(n_hosts)
    share = np.array([m[3] for m in MIX], dtype=np.float64)
    return fill_then_churn(table, [m[0] for m in MIX], share, rng, churn)


def fragmented_fleet(
    n_hosts: int, seed: int = 0, vms_per_host: float = 7.0, churn: float = 0.0
) -> HostTable:
    """`n_hosts` two-cell hosts, each filled with about `vms_per_host` VMs of `MIX` (single-cell
    ones on a random fitting cell); a host stops at its count or after three misses.

    With `churn` > 0 the hosts are first filled by the claim rule (the tightest fitting cell,
    as a scheduler would) until three misses, then that share of the VMs, drawn at random,
    departs: holes left by departures instead of random placement."""
    if churn > 0:
        return _churned(n_hosts, seed, churn)
    rng = np.random.default_rng(seed)
    table = _empty(n_hosts)
    names = [m[0] for m in MIX]
    share = np.array([m[3] for m in MIX])
    demands = [table.demand(n) for n in names]
    k = 0
    for row, host in enumerate(table.names):
        want = int(rng.integers(int(vms_per_host) - 1, int(vms_per_host) + 2))
        placed = misses = 0
        while placed < want and misses < 3:
            pick = int(rng.choice(len(MIX), p=share))
            d = demands[pick]
            free = table.cell_free[row]
            if MIX[pick][2] == 1:
                cells = [c for c in (0, 1) if (free[c] >= d.cells[0]).all()]
                if not cells or (table.host_free[row] < d.host).any():
                    misses += 1
                    continue
                use = np.zeros_like(free)
                use[int(rng.choice(cells))] = d.cells[0]
                table.claim(f"vm{k}", host, names[pick], use, d.host.copy())
            elif vector.fits(d, table.cell_free[row : row + 1], table.host_free[row : row + 1])[0]:
                table.claim(f"vm{k}", host, names[pick])
            else:
                misses += 1
                continue
            k += 1
            placed += 1
    return table
