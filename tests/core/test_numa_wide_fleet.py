"""A mixed fleet (two-cell and eight-cell hosts) through the parts above the NUMA rule: the
fragmentation weigher's decisions, the capacity report, the defragmentation planner and the
simulator (docs/numa.md, "Hosts of up to eight cells")."""

from __future__ import annotations

import numpy as np
import pytest

from berth.core.capacity import capacity_matrix, totals_by_zone
from berth.core.config import profile
from berth.core.defrag import Budget, Target, check_plan, plan_defrag
from berth.core.engine import FilterScheduler, commit
from berth.core.explain import NoValidHost
from berth.core.model import Fleet, Host, NumaCell
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.sim.fleets import load_fleet_or_sizing
from berth.sim.policies import resolve
from berth.sim.replay import ReplayOptions, Simulation
from berth.sim.synthetic import SyntheticConfig, generate
from tests.builders import NOW, cell, flavor, fleet, host
from tests.core.test_properties import check_accounting

SCHED = FilterScheduler.from_config(profile("berth"))
FLAVORS = [
    flavor("one", vcpus=2, mem=2048, pinned=True, numa=1),
    flavor("two", vcpus=4, mem=4096, pinned=True, numa=2),
    flavor("four", vcpus=8, mem=8192, pinned=True, numa=4),
    flavor(
        "split",
        vcpus=6,
        mem=6144,
        pinned=True,
        numa=2,
        numa_cpus=("0-3", "4-5"),
        numa_mem=(4096, 2048),
    ),
    flavor("flex", vcpus=4, mem=4096, pinned=True, numa=2, split="flexible"),
    flavor("float", vcpus=2, mem=2048),
    flavor("gpu2", vcpus=4, mem=4096, pinned=True, numa=2, pci="gpu:1"),
]


def eight(c: NumaCell) -> list[NumaCell]:
    """One socket's cell as four cells (sub-NUMA clustering)."""
    return [
        NumaCell(
            shared_cpus=c.shared_cpus // 4,
            dedicated_cpus=c.dedicated_cpus // 4,
            memory_mb=c.memory_mb // 4,
            pci={k: v // 4 for k, v in c.pci.items() if v // 4},
        )
        for _ in range(4)
    ]


def mixed_table(n: int = 6) -> HostTable:
    hosts = []
    for i in range(n):
        socket = cell(vcpus=8, pcpus=16, mem=32768, pci={"gpu": 4} if i % 3 == 0 else None)
        cells = [socket, socket] if i % 2 == 0 else eight(socket) + eight(socket)
        hosts.append(host(f"h{i}", numa=cells, az="az1" if i < n // 2 else "az2"))
    return HostTable.from_fleet(fleet(hosts, FLAVORS, aliases={"gpu": "gpu"}))


def test_decisions_and_capacity_on_a_mixed_fleet() -> None:
    """The 'berth' profile (fragmentation weigher) places until nothing fits; every commit
    lowers the fleet's count of its flavor by exactly one."""
    table = mixed_table()
    names = [f.name for f in FLAVORS]
    assert table.cell_cap.shape[1] == 8
    fresh = SCHED.capacity(table, "flex", NOW)  # flexible splits on eight cells too:
    assert (fresh[table.n_cells > 2] == 8).all()  # 32 pinned CPUs / 4 a guest
    placed = 0
    for step in range(160):
        name = names[step % len(names)]
        before = SCHED.capacity(table, name, NOW)
        req = RequestSpec(flavor=name, num_instances=1, seed=step, instance_ids=(f"vm{step}",))
        try:
            decision = SCHED.select_destinations(table, req, NOW)
        except NoValidHost:
            assert before.sum() == 0
            continue
        commit(table, decision)
        placed += 1
        after = SCHED.capacity(table, name, NOW)
        assert after.sum() == before.sum() - 1
    assert placed > 60
    check_accounting(table)
    matrix = capacity_matrix(SCHED, table, names, NOW)
    assert set(totals_by_zone(matrix, table)) == {"az1", "az2"}


def test_defrag_planner_on_a_mixed_fleet() -> None:
    table = mixed_table(8)
    rng = np.random.default_rng(5)
    names = ["one", "two", "four", "split"]
    for k in range(300):  # a fragmented fill by the claim rule
        name = names[int(rng.integers(len(names)))]
        row = int(rng.integers(len(table)))
        if SCHED.capacity(table, name, NOW)[row] > 0:
            table.claim(f"vm{k}", table.names[row], name)
    for iid in list(table.allocations)[::3]:
        table.release(iid)
    target = Target(flavors=("four", "split"))
    plan = plan_defrag(table, target, Budget(max_migrations=6), scheduler=SCHED, now=NOW)
    check_plan(table, plan, scheduler=SCHED, now=NOW)
    assert sum(plan.after.capacity.values()) >= sum(plan.before.capacity.values())


@pytest.mark.slow
def test_simulator_replays_on_a_mixed_fleet() -> None:
    trace = generate(SyntheticConfig(seed=3, days=0.1, history_days=1.0))
    base, _ = load_fleet_or_sizing("4xstd-2s", trace)
    hosts: list[Host] = []
    for i, h in enumerate(base.hosts):
        cells = [c for socket in h.numa_cells for c in eight(socket)] if i % 2 else h.numa_cells
        hosts.append(h.model_copy(update={"numa_cells": cells}))
    mixed = Fleet(**{**base.__dict__, "hosts": hosts})
    run = Simulation(trace, mixed, ReplayOptions(seed=1, bound=False)).run(resolve("berth"))
    assert run.decisions == len(trace)


def test_floating_guests_take_their_devices_on_two_cell_hosts_of_a_wide_table() -> None:
    """A floating (non-NUMA) guest with a PCI device, on a two-cell host of a table eight cells
    wide, takes its device: the host's one GPU is claimed once, never again."""
    gpu_host = host("g", numa=[cell(vcpus=8, mem=16384, pci={"gpu": 1}), cell(vcpus=8, mem=16384)])
    wide_host = host("w", numa=[cell(vcpus=2, mem=4096)] * 8)
    fgpu = flavor("fgpu", vcpus=1, mem=1024, pci="gpu:1")
    table = HostTable.from_fleet(fleet([gpu_host, wide_host], [fgpu], aliases={"gpu": "gpu"}))
    assert table.cell_cap.shape[1] == 8
    assert SCHED.capacity(table, "fgpu", NOW).tolist() == [1, 0]
    req = RequestSpec(flavor="fgpu", num_instances=1, seed=0, instance_ids=("vm0",))
    commit(table, SCHED.select_destinations(table, req, NOW))
    assert SCHED.capacity(table, "fgpu", NOW).tolist() == [0, 0]
    assert int(table.cell_free[0, :, :].min()) >= 0
    again = RequestSpec(flavor="fgpu", num_instances=1, seed=1, instance_ids=("vm1",))
    with pytest.raises(NoValidHost):
        SCHED.select_destinations(table, again, NOW)
    check_accounting(table)
