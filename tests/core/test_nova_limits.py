"""Nova's limits a guest may not pass, whatever the ratios: Placement's `max_unit` and the NUMA
fit's no-self-over-commit rules (filters/max_unit.py, filters/pinned_memory.py). The cases are
the ones where Nova 34 answered NoValidHost and Berth used to place (docs/scheduling.md)."""

from __future__ import annotations

import pytest

from berth.core.config import profile
from berth.core.engine import FilterScheduler
from berth.core.explain import NoValidHost
from berth.core.filters.max_unit import MaxUnitFilter
from berth.core.filters.pinned_memory import PinnedMemoryFilter
from berth.core.model import Flavor, Host
from tests.builders import NOW, cell, context, flavor, host, passing, reasons, request, table_of


def decide(hosts: list[Host], flavors: list[Flavor], name: str) -> list[str]:
    table = table_of(hosts, flavors)
    sched = FilterScheduler.from_config(profile("nova"))
    return sched.select_destinations(table, request(name), NOW).hosts


TWO_BY_2 = [cell(vcpus=2, mem=8192), cell(vcpus=2, mem=8192)]
TWO_BY_4 = [cell(vcpus=4, mem=8192), cell(vcpus=4, mem=8192)]


@pytest.mark.parametrize(
    ("hosts", "flv", "placed"),
    [
        # 2 cells x 2 shared CPUs, ratio 4: 16 vCPUs of room, but 8 > 4 CPUs (VCPU max_unit)
        ([host("h", numa=TWO_BY_2, cpu_ratio=4.0)], flavor("f", vcpus=8), False),
        ([host("h", numa=TWO_BY_2, cpu_ratio=4.0)], flavor("f", vcpus=4), True),
        # 2 cells x 4, ratio 4, 6 vCPUs in one guest cell: more than the cell's 4 CPUs
        ([host("h", numa=TWO_BY_4, cpu_ratio=4.0)], flavor("f", vcpus=6, numa=1), False),
        ([host("h", numa=TWO_BY_4, cpu_ratio=4.0)], flavor("f", vcpus=4, numa=1), True),
        ([host("h", numa=TWO_BY_4, cpu_ratio=4.0)], flavor("f", vcpus=6, numa=2), True),
        # a 16,384 MB host, ratio 2: a 20,480 MB guest is above MEMORY_MB's max_unit
        ([host("h", mem=16384, ram_ratio=2.0)], flavor("f", mem=20480), False),
        ([host("h", mem=16384, ram_ratio=2.0)], flavor("f", mem=16384), True),
        # a guest cell's memory above its host cell's, whatever the ratio
        (
            [host("h", numa=TWO_BY_4, ram_ratio=2.0)],
            flavor("f", vcpus=2, mem=10240, numa=1),
            False,
        ),
        # disk above DISK_GB's max_unit
        ([host("h", hdd=100, disk_ratio=2.0)], flavor("f", disk=150), False),
        ([host("h", hdd=100, disk_ratio=2.0)], flavor("f", disk=100), True),
    ],
)
def test_a_guest_never_over_commits_against_itself(hosts, flv, placed):
    if placed:
        assert decide(hosts, [flv], "f") == ["h"]
    else:
        with pytest.raises(NoValidHost):
            decide(hosts, [flv], "f")


def test_max_unit_explains_which_limit():
    hosts = [
        host("cpu", numa=TWO_BY_2, cpu_ratio=4.0, mem=65536),
        host("ram", vcpus=16, mem=8192, ram_ratio=4.0),
        host("ok", vcpus=16, mem=65536),
    ]
    table = table_of(hosts, [flavor("f", vcpus=8, mem=16384)])
    assert passing(MaxUnitFilter(), table, "f") == ["ok"]
    assert reasons(MaxUnitFilter(), table, "f") == {
        "max_unit_vcpu": ["cpu"],
        "max_unit_ram": ["ram"],
    }


def test_unequal_cells_refuse_a_cell_the_guest_would_over_commit():
    # Berth's rule would put the guest in the small cell (fewer slots); Nova would use the big
    # one. Berth refuses the host rather than over-commit the guest against itself.
    numa = [cell(vcpus=2, mem=8192), cell(vcpus=8, mem=8192)]
    table = table_of([host("h", numa=numa, cpu_ratio=4.0)], [flavor("f", vcpus=6, numa=1)])
    assert passing(MaxUnitFilter(), table, "f") == []
    table = table_of([host("h", numa=numa, cpu_ratio=2.0)], [flavor("f", vcpus=6, numa=1)])
    assert passing(MaxUnitFilter(), table, "f") == ["h"]  # the small cell cannot hold it at all


PINNED = [cell(pcpus=8, mem=8192), cell(pcpus=8, mem=8192)]


def test_a_pinned_guest_does_not_over_commit_memory():
    # 8192 MB cells, RAM ratio 1.5: 12,288 MB of room per cell for shared guests, but a pinned
    # 10,240 MB guest exceeds the cell's memory (Nova: NoValidHost)
    p = flavor("p", vcpus=2, mem=10240, pinned=True)
    with pytest.raises(NoValidHost):
        decide([host("h", numa=PINNED, ram_ratio=1.5)], [p], "p")
    # Berth keeps pinned guests off hosts whose cell memory is over-committed at all: its cell
    # rule counts by the ratio'd memory (filters/pinned_memory.py)
    small = flavor("p", vcpus=2, mem=2048, pinned=True)
    hosts = [host("over", numa=PINNED, ram_ratio=1.5), host("plain", numa=PINNED)]
    table = table_of(hosts, [small, flavor("s", vcpus=1, mem=2048)])
    assert passing(PinnedMemoryFilter(), table, "p") == ["plain"]
    assert reasons(PinnedMemoryFilter(), table, "p") == {"pinned_memory": ["over"]}
    assert passing(PinnedMemoryFilter(), table, "s") == ["over", "plain"]


def test_the_kept_masks_follow_added_hosts_and_are_read_only():
    # Both filters keep their mask per table (it reads only stated sizes): a host added later
    # must be judged too, and no caller may write into the shared array.
    big, pinned = flavor("f", vcpus=8, mem=16384), flavor("p", vcpus=2, mem=2048, pinned=True)
    table = table_of([host("cpu", numa=TWO_BY_2, cpu_ratio=4.0, mem=65536)], [big, pinned])
    assert passing(MaxUnitFilter(), table, "f") == []
    assert passing(PinnedMemoryFilter(), table, "p") == ["cpu"]
    kept = MaxUnitFilter().mask(context(table, "f"))
    with pytest.raises(ValueError, match="read-only"):
        kept[0] = True
    table.add_hosts([host("ok", vcpus=16, mem=65536), host("over", numa=PINNED, ram_ratio=1.5)], {})
    assert passing(MaxUnitFilter(), table, "f") == ["ok", "over"]
    assert passing(PinnedMemoryFilter(), table, "p") == ["cpu", "ok"]
