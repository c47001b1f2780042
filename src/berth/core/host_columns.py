"""A host's model (`model.Host`) as table columns: capacities, trait bits, merged metadata."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.errors import FleetError
from berth.core.model import Host
from berth.core.resources import (
    C_HUGE,
    C_MEM,
    C_PCPU,
    C_VCPU,
    CELL_BASE,
    CELLS,
    H_HDD,
    H_MEM,
    H_SSD,
    H_VCPU,
    HOST_RESOURCES,
)
from berth.core.vocabulary import Vocabulary

I64 = npt.NDArray[np.int64]


def cell_axis(hosts: list[Host]) -> int:
    """The cell axis of a table holding `hosts`: its widest host, at least two (today's
    layout: a fleet of two-cell hosts keeps its columns and formulas, docs/numa.md)."""
    return max([CELLS, *(len(h.numa_cells) for h in hosts)])


def widen(table: Any, cells: int) -> None:
    """Pad a table's cell axis (`HostTable`: capacities, free amounts, every allocation's
    footprint) with empty cells up to `cells`, when a wider host joins."""
    have = table.cell_cap.shape[1]
    if cells <= have:
        return

    def pad(a: I64) -> I64:
        extra = np.zeros((*a.shape[:-2], cells - have, a.shape[-1]), dtype=np.int64)
        return np.concatenate([a, extra], axis=-2)

    table.cell_cap = pad(table.cell_cap)
    table.cell_free = pad(table.cell_free)
    for key, alloc in table.allocations.items():
        table.allocations[key] = replace(alloc, cell_use=pad(alloc.cell_use))
    table._fixed_plans = {}


def distances(hosts: list[Host], first_row: int) -> dict[int, list[list[int]]]:
    """The NUMA distance matrices of the hosts that report one, by table row."""
    return {r: h.numa_distances for r, h in enumerate(hosts, first_row) if h.numa_distances}


def capacities(
    hosts: list[Host], device_types: list[str], width: int, beside: I64 | None = None
) -> tuple[I64, I64]:
    """(cell capacity (n, cells, width), host capacity (n, host columns)), ratios applied; the
    cell axis as wide as the widest host, or as `beside`'s (a table's cells) if wider."""
    n = len(hosts)
    cells = max(cell_axis(hosts), 0 if beside is None else beside.shape[1])
    cell_cap = np.zeros((n, cells, width), dtype=np.int64)
    host_cap = np.zeros((n, HOST_RESOURCES), dtype=np.int64)
    for r, host in enumerate(hosts):
        for c, cell in enumerate(host.numa_cells):
            cell_cap[r, c, C_VCPU] = int(cell.shared_cpus * host.cpu_allocation_ratio)
            cell_cap[r, c, C_PCPU] = cell.dedicated_cpus
            cell_cap[r, c, C_MEM] = int(cell.memory_mb * host.ram_allocation_ratio)
            cell_cap[r, c, C_HUGE] = cell.hugepages_mb
            for device, cnt in cell.pci.items():
                cell_cap[r, c, CELL_BASE + device_types.index(device)] = cnt
        shared = sum(c.shared_cpus for c in host.numa_cells)
        memory = sum(c.memory_mb for c in host.numa_cells)
        host_cap[r, H_VCPU] = int(shared * host.cpu_allocation_ratio)
        # Placement's capacity: (total - reserved) x allocation_ratio
        host_cap[r, H_MEM] = _placement(memory, host.reserved_memory_mb, host.ram_allocation_ratio)
        ratio = host.disk_allocation_ratio
        hdd, ssd = host.disk.hdd_gb, host.disk.ssd_gb
        # reserved disk comes out of HDD first, then SSD
        res_hdd = min(host.reserved_disk_gb, hdd)
        host_cap[r, H_HDD] = _placement(hdd, res_hdd, ratio)
        host_cap[r, H_SSD] = _placement(ssd, host.reserved_disk_gb - res_hdd, ratio)
    return cell_cap, host_cap


def _placement(total: int, reserved: int, ratio: float) -> int:
    """Placement's usable amount of an inventory: floor((total - reserved) x ratio), at least 0."""
    return max(0, int((total - reserved) * ratio))


def trait_bits(
    bits: npt.NDArray[np.uint64], traits: Vocabulary, hosts: list[Host]
) -> npt.NDArray[np.uint64]:
    """The table's trait bitmasks `bits` (one row per host, 64 traits a word) with `hosts`
    appended; their new traits are added to `traits`."""
    for host in hosts:
        for trait in host.traits:
            traits.code(trait)
    n0 = bits.shape[0]
    words = max(1, -(-len(traits) // 64))
    out = np.zeros((n0 + len(hosts), words), dtype=np.uint64)
    out[:n0, : bits.shape[1]] = bits
    for r, host in enumerate(hosts, start=n0):
        for trait in host.traits:
            code = traits.codes[trait]
            out[r, code // 64] |= np.uint64(1 << (code % 64))
    return out


def merged_metadata(
    hosts: list[Host], aggregate_meta: dict[str, dict[str, str]]
) -> list[dict[str, str]]:
    """Per host, its aggregates' metadata merged: each key's values, split at commas, as one
    sorted comma-separated string."""
    out: list[dict[str, str]] = []
    for i, host in enumerate(hosts):
        merged: dict[str, set[str]] = {}
        for agg in host.aggregates:
            if agg not in aggregate_meta:
                raise FleetError(f"hosts[{i}].aggregates: unknown aggregate {agg!r}")
            for key, value in aggregate_meta[agg].items():
                merged.setdefault(key, set()).update(v.strip() for v in value.split(","))
        out.append({k: ",".join(sorted(v)) for k, v in merged.items()})
    return out
