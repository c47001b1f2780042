"""Capacity: how many more instances of each flavor fit, per host and in total (A6, B8).

The per-host counts come from `FilterScheduler.capacity`, which uses the same NUMA-exact model
as placement, so "k fit" means k sequential placements succeed. Totals are plain sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from berth.core.engine import FilterScheduler
from berth.core.table import HostTable

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CapacityMatrix:
    flavors: tuple[str, ...]
    hosts: tuple[str, ...]
    counts: I64  # (flavors, hosts)

    def total(self) -> dict[str, int]:
        return {f: int(c) for f, c in zip(self.flavors, self.counts.sum(axis=1), strict=True)}

    def for_flavor(self, flavor: str) -> I64:
        return self.counts[self.flavors.index(flavor)]


def capacity_matrix(
    scheduler: FilterScheduler, table: HostTable, flavors: Sequence[str], now: float
) -> CapacityMatrix:
    counts = np.zeros((len(flavors), len(table)), dtype=np.int64)
    for i, flavor in enumerate(flavors):
        counts[i] = scheduler.capacity(table, flavor, now)
    return CapacityMatrix(tuple(flavors), tuple(table.names), counts)


def totals_by_zone(matrix: CapacityMatrix, table: HostTable) -> dict[str, dict[str, int]]:
    """{zone: {flavor: count}}."""
    zones = len(table.zones)
    out: dict[str, dict[str, int]] = {z: {} for z in table.zones.words}
    for flavor, row in zip(matrix.flavors, matrix.counts, strict=True):
        sums = np.bincount(table.zone, weights=row, minlength=zones)
        for z, name in enumerate(table.zones.words):
            out[name][flavor] = int(sums[z])
    return out


def totals_by_aggregate(matrix: CapacityMatrix, table: HostTable) -> dict[str, dict[str, int]]:
    """{aggregate: {flavor: count}}; a host in several aggregates counts in each."""
    names = sorted({a for aggs in table.aggregates_of for a in aggs})
    member = np.zeros((len(names), len(table)), dtype=np.int64)
    position = {n: i for i, n in enumerate(names)}
    for row, aggs in enumerate(table.aggregates_of):
        for agg in aggs:
            member[position[agg], row] = 1
    sums = member @ matrix.counts.T  # (aggregates, flavors)
    return {
        agg: {f: int(sums[a, i]) for i, f in enumerate(matrix.flavors)}
        for a, agg in enumerate(names)
    }
