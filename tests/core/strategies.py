"""Hypothesis strategies: small random fleets and flavors of every NUMA mode."""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from berth.core.flavors import NumaMode
from berth.core.model import Flavor, Fleet, Host
from berth.core.table import HostTable
from tests.builders import cell, flavor, fleet, host


def examples(scale: float) -> int:
    """`scale` times the active profile's max_examples (100 in CI; more with the explore
    profile), so a test's share of the budget stays proportional whatever the profile."""
    active = settings.default
    assert active is not None
    return max(10, int(active.max_examples * scale))


MODES = [NumaMode.NONE, NumaMode.SINGLE, NumaMode.EVEN, NumaMode.FIXED, NumaMode.FLEX]
ALIASES = {"gpu": "gpu"}  # the PCI type exists even when no host has one


@functools.lru_cache(maxsize=None, typed=True)  # typed: pick(1) is not pick(1.0)
def pick(*values: Any) -> st.SearchStrategy[Any]:
    """`st.sampled_from(values)`, built once per distinct `values`.

    The composites below draw a dozen choices per host; a strategy built afresh for each draw is
    validated afresh too, which cost a third of the property tests' time. A reused strategy
    draws exactly the same examples (the same choices from the same elements).
    """
    return st.sampled_from(values)


@st.composite
def hosts(draw: st.DrawFn, name: str, sizes: tuple[int, ...] = (2, 1, 2)) -> Host:
    """A random host of one of `sizes` NUMA cells."""
    n_cells = draw(pick(*sizes))
    page_kb = draw(pick(2048, 0, 1048576, 0))
    cells = []
    for _ in range(n_cells):
        gpus = draw(pick(2, 0, 1, 0))
        cells.append(
            cell(
                vcpus=draw(pick(6, 2, 4, 8, 1, 0)),
                pcpus=draw(pick(8, 4, 12, 6, 2, 1, 0)),
                mem=(24 - draw(st.integers(0, 24))) * 512,
                huge=(6 - draw(st.integers(0, 6))) * 1024 if page_kb else 0,
                pci={"gpu": gpus} if gpus else {},
            )
        )
    return host(
        name,
        numa=cells,
        page_kb=page_kb,
        cpu_ratio=draw(pick(2.0, 1.0, 1.5, 1.0, 4.0)),
        ram_ratio=draw(pick(1.0, 1.0, 1.25, 1.5)),
        reserved_mem=draw(pick(0, 0, 256, 1024)),
        hdd=draw(pick(100, 30, 200, 0)),
        ssd=draw(pick(60, 0, 0)),
        reserved_disk=draw(pick(0, 0, 5)),
        disk_ratio=draw(pick(1.0, 1.5)),
        enabled=draw(pick(*[True] * 9, False)),
    )


@st.composite
def flavors(draw: st.DrawFn, name: str, mode: NumaMode | None = None, max_cells: int = 2) -> Flavor:
    """A random flavor (of `mode` when given); EVEN and FIXED guests of 2 to `max_cells`
    cells."""
    if mode is None:
        mode = draw(pick(*MODES))
    pinned = mode != NumaMode.NONE and draw(st.booleans())
    page = None
    if mode in (NumaMode.SINGLE, NumaMode.EVEN, NumaMode.FIXED):
        page = draw(pick(None, None, None, "2MB", "1GB", "large"))
    unit = draw(pick(512, 1024)) if page else 256
    pci = draw(pick(None, None, None, "gpu:1", "gpu:2"))
    common: dict[str, Any] = {
        "pinned": pinned,
        "page": page,
        "pci": pci,
        "pci_policy": draw(pick(None, "preferred")) if pci else None,
        "disk": draw(pick(0, 0, 0, 10, 20)),
        "ssd": draw(st.integers(0, 3)) == 0,
    }
    if mode == NumaMode.NONE:
        return flavor(
            name, vcpus=draw(st.integers(1, 4)), mem=draw(st.integers(1, 12)) * 256, **common
        )
    if mode == NumaMode.SINGLE:
        return flavor(
            name,
            vcpus=draw(st.integers(1, 4)),
            mem=draw(st.integers(1, 6)) * unit,
            numa=1,
            **common,
        )
    k = draw(st.integers(2, max_cells)) if max_cells > 2 else 2
    if mode == NumaMode.EVEN:
        return flavor(
            name,
            vcpus=k * draw(st.integers(1, 3)),
            mem=k * draw(st.integers(1, 4)) * unit,
            numa=k,
            **common,
        )
    if mode == NumaMode.FIXED and k > 2:
        sizes = [draw(st.integers(1, 3)) for _ in range(k - 1)]
        sizes.append(sizes[0] + draw(st.integers(1, 2)))  # unequal: the mode stays FIXED
        mems = [draw(st.integers(1, 4)) * unit for _ in range(k)]
        starts = [sum(sizes[:i]) for i in range(k + 1)]
        return flavor(
            name,
            vcpus=sum(sizes),
            mem=sum(mems),
            numa=k,
            numa_cpus=tuple(_cpus(starts[i], starts[i + 1]) for i in range(k)),
            numa_mem=tuple(mems),
            **common,
        )
    if mode == NumaMode.FIXED:
        a = draw(st.integers(1, 3))
        b = a + draw(st.integers(1, 2))  # unequal, so the mode stays FIXED
        mem0, mem1 = draw(st.integers(1, 4)) * unit, draw(st.integers(1, 4)) * unit
        return flavor(
            name,
            vcpus=a + b,
            mem=mem0 + mem1,
            numa=2,
            numa_cpus=(_cpus(0, a), _cpus(a, a + b)),
            numa_mem=(mem0, mem1),
            **common,
        )
    vcpus = draw(st.integers(2, 6))
    mem = draw(st.integers(2, 16)) * 256
    return flavor(
        name,
        vcpus=vcpus,
        mem=mem,
        numa=2,
        split="flexible",
        min_vcpus=draw(st.none() | st.integers(1, vcpus // 2)),
        min_mem=draw(st.none() | st.integers(1, mem // 2 // 128).map(lambda k: k * 128)),
        **common,
    )


def _cpus(lo: int, hi: int) -> str:
    """Guest CPUs lo..hi-1 as a Nova CPU list."""
    return f"{lo}-{hi - 1}" if hi - 1 > lo else str(lo)


@st.composite
def fleets(
    draw: st.DrawFn,
    *,
    min_hosts: int = 1,
    max_hosts: int = 6,
    target: NumaMode | None = None,
    extra_flavors: int = 3,
    cells: tuple[int, ...] = (2, 1, 2),
    max_guest_cells: int = 2,
) -> Fleet:
    """1-6 random hosts of one of `cells` cells and random flavors ('t' of mode `target` when
    given; guests of up to `max_guest_cells` cells), no instances."""
    n = draw(st.integers(min_hosts, max_hosts))
    host_list = [draw(hosts(f"h{i}", cells)) for i in range(n)]
    flavor_list = []
    if target is not None:
        flavor_list.append(draw(flavors("t", target, max_guest_cells)))
    for i in range(draw(st.integers(1 if target is None else 0, extra_flavors))):
        flavor_list.append(draw(flavors(f"f{i}", max_cells=max_guest_cells)))
    return fleet(host_list, flavor_list, aliases=ALIASES)


def tables(**kwargs: Any) -> st.SearchStrategy[HostTable]:
    """`fleets(**kwargs)` as a `HostTable`."""
    return fleets(**kwargs).map(HostTable.from_fleet)
