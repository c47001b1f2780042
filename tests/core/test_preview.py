"""Previews of a claim (`core.preview`: the fragmentation and slot-loss weighers, the defrag
planner's losses and landings) predict exactly the cells the claim takes, on hosts whose NUMA
distances differ from index distance, narrower hosts with a matrix in a wider table included."""

from __future__ import annotations

import numpy as np
import pytest

from berth.core import preview
from berth.core.config import profile
from berth.core.defrag import Budget, Target
from berth.core.defrag.objective import HostValue
from berth.core.defrag.planner import _Planner
from berth.core.engine import FilterScheduler
from berth.core.filters.base import Context
from berth.core.numa import vector
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.core.weighers.fragmentation import FragmentationParams, FragmentationWeigher
from berth.core.weighers.slots import SlotLossParams, SlotLossWeigher
from tests.builders import NOW, cell, flavor, fleet, host

SCHED = FilterScheduler.from_config(profile("berth"))
FLAVORS = [
    flavor("one", vcpus=2, mem=1024, pinned=True, numa=1),
    flavor("two", vcpus=4, mem=2048, pinned=True, numa=2),
    flavor("four", vcpus=8, mem=4096, pinned=True, numa=4),
    flavor(
        "split",
        vcpus=6,
        mem=3072,
        pinned=True,
        numa=2,
        numa_cpus=("0-3", "4-5"),
        numa_mem=(2048, 1024),
    ),
]


def _matrix(cells: int, seed: int) -> list[list[int]]:
    """A symmetric distance matrix far from index distance (10 on the diagonal)."""
    rng = np.random.default_rng(seed)
    m = rng.integers(11, 40, (cells, cells))
    m = np.minimum(m, m.T)
    np.fill_diagonal(m, 10)
    out: list[list[int]] = m.tolist()
    return out


def _table(seed: int) -> HostTable:
    """Eight-cell hosts with matrices, a four-cell one with a matrix (padded in the eight-wide
    table), one without; filled at random by the claim rule."""
    hosts = []
    for i, cells in enumerate([8, 8, 4, 8, 2]):
        h = host(f"h{i}", numa=[cell(pcpus=8, mem=16384) for _ in range(cells)])
        if i != 3 and cells > 2:
            h = h.model_copy(update={"numa_distances": _matrix(cells, seed + i)})
        hosts.append(h)
    table = HostTable.from_fleet(fleet(hosts, FLAVORS))
    rng = np.random.default_rng(seed)
    for k in range(30):
        name = FLAVORS[int(rng.integers(len(FLAVORS)))].name
        row = int(rng.integers(len(table)))
        if table.resource_counts(name)[row] > 0:
            table.claim(f"vm{k}", table.names[row], name)
    return table


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_preview_is_the_claim(seed: int) -> None:
    table = _table(seed)
    rows = np.arange(len(table))
    differs = 0
    for f in FLAVORS:
        d = table.demand(f.name)
        cell_use, host_use = preview.place_rows(table, d, rows)
        blind, _ = vector.place(d, table.cell_free, table.host_free)  # index distance
        fits = table.resource_counts(f.name) >= 1
        for r in np.flatnonzero(fits).tolist():
            want_cells, want_host = table.plan_for(f.name, r)
            assert np.array_equal(cell_use[r], want_cells), (f.name, r)
            assert np.array_equal(host_use[r], want_host)
            differs += not np.array_equal(blind[r], want_cells)
            work = table.copy()  # and the claim takes exactly that
            alloc = work.claim("new", table.names[r], f.name)
            assert np.array_equal(alloc.cell_use, cell_use[r])
    assert differs  # the distances steer some claim away from index distance's choice


@pytest.mark.parametrize("seed", [0, 1])
def test_weighers_and_planner_value_the_real_claim(seed: int) -> None:
    """The lost reference capacity the weighers score, and the objective the planner's loss
    array says one more instance costs, equal the figures after the real claim."""
    table = _table(seed)
    refs = ("four", "split")
    frag = FragmentationWeigher(FragmentationParams(reference_flavors=list(refs)))
    slots = SlotLossWeigher(SlotLossParams(reference_flavors=list(refs), unit="slots"))
    planner = _Planner(table, Target(flavors=refs), Budget(max_migrations=1), SCHED, NOW, 0)
    value = HostValue(table, Target(flavors=refs), SCHED, NOW)
    for f in FLAVORS:
        ctx = Context(table, RequestSpec(flavor=f.name), table.demand(f.name), NOW)
        rows = np.arange(len(table))
        frag_raw, slot_raw = frag.raw(ctx, rows), slots.raw(ctx, rows)
        loss = planner.loss(f.name)
        for r in np.flatnonzero(table.resource_counts(f.name) >= 1).tolist():
            work = table.copy()
            work.claim("new", table.names[r], f.name)
            lost = {g: int(table.resource_counts(g)[r] - work.resource_counts(g)[r]) for g in refs}
            vcpus = sum(table.flavors[g].vcpus * n for g, n in lost.items())
            assert frag_raw[r] == -vcpus, (f.name, r)
            assert slot_raw[r] == -sum(lost.values()), (f.name, r)
            one = np.array([r])
            after = value.of(one, work.cell_free[one], work.host_free[one], work.n_instances[one])
            assert loss[r] == pytest.approx(value.rows(table, one)[0] - after[0])
