"""Random fleets and request sequences for the differential test (Hypothesis strategies).

Hosts have symmetric cells (real sockets; `filters/max_unit.py` says why unequal cells are
refused more often than Nova), hosts with pinned CPUs a RAM ratio of 1 (the same for
`filters/pinned_memory.py`), no huge pages and no PCI devices (Nova's accounting of both differs
from Berth's model, docs/scheduling.md), and every host is up and enabled.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from berth.core.model import Flavor, Host, ServerGroup
from tests.builders import cell, flavor, group, host

AGGREGATES = {
    "big": {"cores": "32", "ssd": "true"},
    "small": {"cores": "8", "ssd": "false"},
    "gpu": {"gpu": "a100,v100", "cores": "16"},
}
CORES_SPECS = ["= 8", "= 16", "= 20", ">= 16", "<= 16", "== 32", "!= 8", "32", "8.0", "s== 16"]
SSD_SPECS = ["true", "s== false", "s!= true", "<or> true <or> maybe", "<in> ru"]
GPU_SPECS = ["a100", "<all-in> a100", "<all-in> a100 v100", "<in> 100", "<or> h100 <or> v100"]
CAP_SPECS = {
    "cpu_model": ["Icelake", "s!= Icelake", "<or> Icelake <or> Sapphire", "<in> lake"],
    "cpu_cores": ["= 24", ">= 32", "== 24", "24"],
}
TRAITS = ["HW_A", "HW_B"]
GROUPS = [
    group("g-aff", "affinity"),
    group("g-anti", "anti-affinity", max_per_host=2),
    group("g-soft", "soft-affinity"),
    group("g-softanti", "soft-anti-affinity"),
]


@st.composite
def hosts(draw: st.DrawFn, n: int) -> list[Host]:
    out = []
    for i in range(n):
        cells = draw(st.sampled_from([1, 2]))
        shared = draw(st.sampled_from([0, 2, 4, 8]))
        pinned = draw(st.sampled_from([0, 0, 2, 4]))
        if shared + pinned == 0:
            shared = 4
        mem = draw(st.sampled_from([4096, 8192, 16384]))
        caps = {}
        if draw(st.booleans()):
            caps["cpu_model"] = draw(st.sampled_from(["Icelake", "Cascadelake", "Sapphire"]))
        if draw(st.booleans()):
            caps["cpu_cores"] = draw(st.sampled_from(["16", "24", "32"]))
        out.append(
            host(
                f"h{i}",
                numa=[cell(vcpus=shared, pcpus=pinned, mem=mem)] * cells,
                cpu_ratio=draw(st.sampled_from([1.0, 2.0, 4.0, 16.0])),
                # pinned CPUs: RAM ratio 1 (filters/pinned_memory.py: Berth keeps pinned guests
                # off hosts with a RAM ratio above 1, where Nova may still place them)
                ram_ratio=draw(st.sampled_from([1.0, 1.0, 1.5, 2.0])) if not pinned else 1.0,
                disk_ratio=draw(st.sampled_from([1.0, 2.0])),
                reserved_mem=draw(st.sampled_from([0, 512, 2048])),
                reserved_disk=draw(st.sampled_from([0, 0, 10])),
                hdd=draw(st.sampled_from([0, 100, 100, 500])),
                io_ops=draw(st.integers(0, 4)),
                aggregates=draw(st.lists(st.sampled_from(sorted(AGGREGATES)), unique=True)),
                capabilities=caps,
                traits=draw(st.lists(st.sampled_from(TRAITS), unique=True)),
            )
        )
    return out


@st.composite
def flavors(draw: st.DrawFn, n: int) -> list[Flavor]:
    out = []
    for i in range(n):
        pinned = draw(st.booleans()) and draw(st.booleans())
        numa = draw(st.sampled_from([None, None, 1, 2]))
        vcpus = draw(st.sampled_from([1, 2, 4, 6, 8]))
        if numa == 2 and vcpus % 2:
            vcpus += 1
        aggregate: dict[str, str] = {}
        capabilities: dict[str, str] = {}
        if draw(st.integers(0, 3)) == 0:
            key, specs = draw(
                st.sampled_from([("cores", CORES_SPECS), ("ssd", SSD_SPECS), ("gpu", GPU_SPECS)])
            )
            aggregate[key] = draw(st.sampled_from(specs))
        if draw(st.integers(0, 4)) == 0:
            key = draw(st.sampled_from(sorted(CAP_SPECS)))
            capabilities[key] = draw(st.sampled_from(CAP_SPECS[key]))
        traits = draw(st.lists(st.sampled_from(TRAITS), max_size=1))
        required = traits if draw(st.booleans()) else []
        out.append(
            flavor(
                f"f{i}",
                vcpus=vcpus,
                mem=draw(st.sampled_from([512, 1024, 2048, 4096, 8192, 12288])),
                disk=draw(st.sampled_from([0, 10, 40])),
                ephemeral=draw(st.sampled_from([0, 0, 10])),
                pinned=pinned,
                numa=numa,
                aggregate=aggregate,
                capabilities=capabilities,
                required=required,
                forbidden=[t for t in traits if t not in required],
            )
        )
    return out


@dataclass(frozen=True)
class Ask:
    """One request of a sequence: flavor, instances, group, hints (indexes resolved later)."""

    flavor: int
    count: int
    group: int | None
    same_host: bool
    different_host: bool


@st.composite
def asks(draw: st.DrawFn, n_flavors: int, length: int) -> list[Ask]:
    return [
        Ask(
            flavor=draw(st.integers(0, n_flavors - 1)),
            count=draw(st.sampled_from([1, 1, 1, 2, 3])),
            group=draw(st.one_of(st.none(), st.none(), st.integers(0, len(GROUPS) - 1))),
            same_host=draw(st.integers(0, 9)) == 0,
            different_host=draw(st.integers(0, 9)) == 0,
        )
        for _ in range(length)
    ]


def server_groups() -> list[ServerGroup]:
    return list(GROUPS)
