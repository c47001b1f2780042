"""Flavor extra specs parsed into `FlavorSpec`: every NUMA mode and every error names its key."""

from __future__ import annotations

import re

import pytest

from berth.core.errors import SpecError
from berth.core.flavors import CellShape, NumaMode, PciPolicy, SpecMatch, parse_flavor
from berth.core.model import DiskKind, Flavor
from tests.builders import flavor

ALIASES = {"a100": "gpu-a100", "vf": "vf-dpdk"}


def parse(flv: Flavor):
    return parse_flavor(flv, ALIASES)


# ---------------------------------------------------------------------------- modes


@pytest.mark.parametrize(
    ("flv", "mode", "cells", "dedicated", "page"),
    [
        (flavor("plain", vcpus=4, mem=4096), NumaMode.NONE, (), False, 0),
        (flavor("any", vcpus=4, mem=4096, page="any"), NumaMode.NONE, (), False, 0),
        (flavor("small", vcpus=4, mem=4096, page="small"), NumaMode.NONE, (), False, 0),
        (
            flavor("pinned", vcpus=4, mem=4096, pinned=True),
            NumaMode.SINGLE,
            (CellShape(4, 4096),),
            True,
            0,
        ),
        (
            flavor("shared1", vcpus=3, mem=3000, numa=1),
            NumaMode.SINGLE,
            (CellShape(3, 3000),),
            False,
            0,
        ),
        (
            flavor("huge", vcpus=2, mem=2048, page="2MB"),
            NumaMode.SINGLE,
            (CellShape(2, 2048),),
            False,
            2048,
        ),
        (
            flavor("huge1g", vcpus=2, mem=2048, page="1GB", pinned=True),
            NumaMode.SINGLE,
            (CellShape(2, 2048),),
            True,
            1048576,
        ),
        (
            flavor("large", vcpus=2, mem=2048, page="large", numa=2),
            NumaMode.EVEN,
            (CellShape(1, 1024), CellShape(1, 1024)),
            False,
            -1,
        ),
        (
            flavor("even", vcpus=8, mem=8192, pinned=True, numa=2),
            NumaMode.EVEN,
            (CellShape(4, 4096), CellShape(4, 4096)),
            True,
            0,
        ),
        (
            flavor(
                "even_explicit",
                vcpus=4,
                mem=2048,
                numa=2,
                numa_cpus=("0,2", "1,3"),
                numa_mem=(1024, 1024),
            ),
            NumaMode.EVEN,
            (CellShape(2, 1024), CellShape(2, 1024)),
            False,
            0,
        ),
        (
            flavor(
                "fixed",
                vcpus=6,
                mem=6144,
                pinned=True,
                numa=2,
                numa_cpus=("0-1", "2-5"),
                numa_mem=(1024, 5120),
            ),
            NumaMode.FIXED,
            (CellShape(2, 1024), CellShape(4, 5120)),
            True,
            0,
        ),
        (
            flavor("fixed_odd", vcpus=3, mem=3, numa=2, numa_cpus=("2", "0,1"), numa_mem=(2, 1)),
            NumaMode.FIXED,
            (CellShape(1, 2), CellShape(2, 1)),
            False,
            0,
        ),
        (
            flavor("flex", vcpus=8, mem=8192, pinned=True, numa=2, split="flexible"),
            NumaMode.FLEX,
            (CellShape(2, 2048), CellShape(2, 2048)),
            True,
            0,
        ),
        (
            flavor("flex_small", vcpus=3, mem=3001, numa=2, split="flexible"),
            NumaMode.FLEX,
            (CellShape(1, 1000), CellShape(1, 1000)),
            False,
            0,
        ),
        (
            flavor(
                "flex_min", vcpus=9, mem=9000, numa=2, split="flexible", min_vcpus=4, min_mem=100
            ),
            NumaMode.FLEX,
            (CellShape(4, 100), CellShape(4, 100)),
            False,
            0,
        ),
        (
            flavor("odd_numa1", vcpus=3, mem=1001, numa=1, split="flexible"),
            NumaMode.SINGLE,  # one node: the split spec has nothing to split
            (CellShape(3, 1001),),
            False,
            0,
        ),
    ],
    ids=lambda v: v.name if isinstance(v, Flavor) else None,
)
def test_numa_modes(flv, mode, cells, dedicated, page):
    spec = parse(flv)
    assert spec.numa_mode == mode
    assert spec.cells == cells
    assert spec.dedicated_cpus is dedicated
    assert spec.page_size_kb == page
    assert spec.numa is (mode != NumaMode.NONE)
    assert spec.hugepages is (page != 0)
    assert (spec.vcpus, spec.memory_mb) == (flv.vcpus, flv.memory_mb)


@pytest.mark.parametrize(
    ("raw", "kb"),
    [
        ("small", 0),
        ("any", 0),
        ("large", -1),
        ("2MB", 2048),
        ("2048", 2048),
        ("2048KB", 2048),
        ("1GB", 1048576),
        ("1048576", 1048576),
        ("1048576kb", 1048576),
    ],
)
def test_page_sizes(raw, kb):
    assert parse(flavor("f", vcpus=2, mem=2048, page=raw)).page_size_kb == kb


def test_case_insensitive_values():
    spec = parse(
        flavor(
            "f",
            vcpus=4,
            mem=4096,
            numa=2,
            specs={"hw:cpu_policy": "DEDICATED", "berth:numa_split": "Flexible"},
        )
    )
    assert spec.dedicated_cpus
    assert spec.numa_mode == NumaMode.FLEX


def test_disk_kind_and_size():
    spec = parse(flavor("f", disk=10, ephemeral=5, swap=1025, ssd=True))
    assert spec.disk_gb == 10 + 5 + 2  # swap rounds up to whole GB
    assert spec.disk_kind == DiskKind.SSD
    assert parse(flavor("g", disk=10, swap=1024)).disk_gb == 11
    assert parse(flavor("h")).disk_kind == DiskKind.HDD


def test_pci_aliases_counts_and_policy():
    spec = parse(flavor("f", pci="a100:1, vf:4, a100:2, raw-type"))
    assert spec.pci == {"gpu-a100": 3, "vf-dpdk": 4, "raw-type": 1}
    assert spec.pci_policy == PciPolicy.REQUIRED
    for raw, policy in [
        ("required", PciPolicy.REQUIRED),
        ("legacy", PciPolicy.REQUIRED),
        ("preferred", PciPolicy.PREFERRED),
        ("socket", PciPolicy.PREFERRED),
    ]:
        assert parse(flavor("g", pci="a100", pci_policy=raw)).pci_policy == policy
    assert parse(flavor("h")).pci == {}


def test_traits_specs_and_trust():
    spec = parse(
        flavor(
            "f",
            required=["HW_A"],
            forbidden=["HW_B"],
            trusted=True,
            aggregate={"ssd": "true", "cores": ">= 8", "zone": "<or> a <or> b"},
            capabilities={"cpu_model": "s== Icelake"},
            specs={"trait:HW_C": "Required"},
        )
    )
    assert spec.required_traits == frozenset({"HW_A", "HW_C"})
    assert spec.forbidden_traits == frozenset({"HW_B"})
    assert spec.trusted
    assert spec.aggregate_specs == (
        SpecMatch("ssd", "s==", "true", "true"),
        SpecMatch("cores", ">=", "8", ">= 8"),
        SpecMatch("zone", "<or>", "a <or> b", "<or> a <or> b"),
    )
    assert spec.capability_specs == (
        SpecMatch("cpu_model", "s==", "Icelake", "s== Icelake", each_value=False),
    )
    assert not parse(flavor("g", specs={"trust:trusted_host": "untrusted"})).trusted


def test_yaml_scalars_become_strings():
    flv = Flavor.model_validate(
        {
            "name": "f",
            "vcpus": 4,
            "memory_mb": 4096,
            "extra_specs": {"hw:numa_nodes": 2, "berth:flag": True, "custom:x": 1.5},
        }
    )
    assert flv.extra_specs == {"hw:numa_nodes": "2", "berth:flag": "true", "custom:x": "1.5"}
    assert parse(flv).numa_mode == NumaMode.EVEN


@pytest.mark.parametrize(
    ("op_value", "actual", "matches"),
    [
        ("true", "true", True),
        ("true", "false,true", True),
        ("true", "True", False),
        ("s== 8", "8", True),
        ("s!= 8", "8", False),
        ("s>= b", "c", True),
        ("s< b", "a", True),
        ("s> b", "a", False),
        (">= 8", "16", True),
        (">= 8", "7.5", False),
        (">= 8", "abc", False),
        ("<= 8", "4,16", True),
        ("== 8", "8.0", True),
        ("!= 8", "9", True),
        ("<in> ab", "xaby", True),
        ("<in> ab", "a,b", False),
        ("<or> x <or> y", "y", True),
        ("<or> x <or> y", "z", False),
        ("<all-in> a b", "a,b,c", False),  # each aggregate value alone, as Nova
        ("<all-in> a b", "ab,c", True),
        ("<all-in> a d", "a,b,c", False),
        ("= 8", "8", True),
        ("= 8", "16,2", True),
        ("= 8", "7.9", False),
        ("= 8", "x", False),
        ("8", "8.0", False),  # a bare value is string equality
        ("=8", "8", False),
        ("=8", "=8", True),
        ("<or> x <or> y <or> z", "z", True),
    ],
)
def test_spec_operators(op_value, actual, matches):
    [match] = parse(flavor("f", aggregate={"k": op_value})).aggregate_specs
    assert match.matches(actual) is matches


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("hw:cpu_thread_policy", "require", "does not model SMT siblings"),
        ("hw:cpu_thread_policy", "isolate", "does not model SMT siblings"),
        ("hw:emulator_threads_policy", "isolate", "one more pinned CPU"),
        ("resources:CUSTOM_FPGA", "1", "resource-class requests"),
        ("resources:VCPU", "0", "resource-class requests"),
        ("resources1:PCPU", "2", "resource-class requests"),
        ("cores", "= 8", "unscoped spec"),
        ("capabilities:cpu_info:arch", "x86_64", "nested capabilities"),
        ("hw:mem_encryption", "true", "memory encryption"),
        ("hw:cpu_dedicated_mask", "^0", "mixed shared/pinned"),
    ],
)
def test_specs_that_would_change_placement_are_refused_by_name(key, value, why):
    with pytest.raises(SpecError) as err:
        parse(flavor("f", specs={key: value}))
    assert repr(key) in str(err.value)
    assert why in str(err.value)


def test_specs_that_change_nothing_are_accepted():
    specs = {"hw:cpu_thread_policy": "prefer", "hw:emulator_threads_policy": "share"}
    assert parse(flavor("f", specs=specs)).extra == specs


def test_image_hw_properties_are_refused_by_name():
    from pydantic import ValidationError

    from berth.core.request import RequestSpec

    with pytest.raises(ValidationError, match="hw_cpu_policy"):
        RequestSpec.model_validate({"flavor": "f", "image": {"hw_cpu_policy": "dedicated"}})


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "key", "why"),
    [
        ({"specs": {"hw:cpu_policy": "mixed"}}, "hw:cpu_policy", "must be 'shared' or 'dedicated'"),
        ({"page": "4MB"}, "hw:mem_page_size", "unknown page size '4mb'"),
        ({"numa": 9}, "hw:numa_nodes", "must be 1 to 8, got '9'"),
        ({"numa": 0}, "hw:numa_nodes", "must be 1 to 8, got '0'"),
        ({"specs": {"hw:numa_nodes": "two"}}, "hw:numa_nodes", "must be 1 to 8"),
        ({"numa": 3}, "hw:numa_nodes", "an even 3-cell split needs vcpus and memory_mb"),
        ({"numa": 4, "vcpus": 2}, "hw:numa_nodes", "divisible by 4"),
        ({"numa": 2, "split": "odd"}, "berth:numa_split", "must be 'even' or 'flexible'"),
        (
            {"numa": 2, "vcpus": 3},
            "hw:numa_nodes",
            "even 2-cell split needs vcpus and memory_mb divisible by 2",
        ),
        (
            {"numa": 2, "mem": 4095},
            "hw:numa_nodes",
            "even 2-cell split needs vcpus and memory_mb divisible by 2",
        ),
        (
            {"numa": 2, "split": "flexible", "numa_cpus": ("0-1", "2-3")},
            "hw:numa_cpus.0",
            "cannot be combined with berth:numa_split=flexible",
        ),
        (
            {"numa": 2, "split": "flexible", "specs": {"hw:numa_mem.1": "2048"}},
            "hw:numa_mem.1",
            "cannot be combined",
        ),
        ({"numa": 2, "split": "flexible", "vcpus": 1}, "berth:numa_split", "at least 2 vcpus"),
        (
            {"numa": 2, "split": "flexible", "specs": {"berth:numa_min_vcpus": "two"}},
            "berth:numa_min_vcpus",
            "must be a whole number, got 'two'",
        ),
        (
            {"numa": 2, "split": "flexible", "min_vcpus": 0},
            "berth:numa_min_vcpus",
            "must be between 1 and 2",
        ),
        (
            {"numa": 2, "split": "flexible", "min_vcpus": 3},
            "berth:numa_min_vcpus",
            "must be between 1 and 2",
        ),
        (
            {"numa": 2, "split": "flexible", "specs": {"berth:numa_min_memory_mb": "1.5"}},
            "berth:numa_min_memory_mb",
            "must be a whole number",
        ),
        (
            {"numa": 2, "split": "flexible", "min_mem": 0},
            "berth:numa_min_memory_mb",
            "must be between 1 and 2048",
        ),
        (
            {"numa": 2, "split": "flexible", "min_mem": 2049},
            "berth:numa_min_memory_mb",
            "must be between 1 and 2048",
        ),
        (
            {"numa": 2, "specs": {"hw:numa_cpus.0": "0-1", "hw:numa_cpus.1": "2-3"}},
            "hw:numa_mem.0",
            "explicit split needs numa_cpus and numa_mem for every cell",
        ),
        (
            {
                "numa": 2,
                "specs": {"hw:numa_cpus.0": "0-1", "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2"},
            },
            "hw:numa_cpus.1",
            "explicit split needs",
        ),
        (
            {"numa": 2, "numa_cpus": ("0-x", "2-3"), "numa_mem": (2048, 2048)},
            "hw:numa_cpus.0",
            "bad CPU list '0-x'",
        ),
        (
            {"numa": 2, "numa_cpus": ("0-1", "3-2"), "numa_mem": (2048, 2048)},
            "hw:numa_cpus.1",
            "bad CPU list '3-2'",
        ),
        (
            {"numa": 2, "numa_cpus": ("0-2", "2-3"), "numa_mem": (2048, 2048)},
            "hw:numa_cpus.1",
            "overlaps the other cell's CPUs",
        ),
        (
            {"numa": 2, "numa_cpus": ("0", "1-2"), "numa_mem": (2048, 2048)},
            "hw:numa_cpus.0",
            "cells must cover guest CPUs 0-3 exactly",
        ),
        (
            {"numa": 2, "numa_cpus": ("0-1", "2-4"), "numa_mem": (2048, 2048)},
            "hw:numa_cpus.0",
            "cells must cover guest CPUs 0-3 exactly",
        ),
        (
            {"numa": 2, "numa_cpus": ("0-1", "2-3"), "numa_mem": (1024, 2048)},
            "hw:numa_mem.0",
            "cell memory must add up to 4096",
        ),
        (
            {"numa": 2, "numa_cpus": ("0-1", "2-3"), "numa_mem": (0, 4096)},
            "hw:numa_mem.0",
            "each cell needs memory",
        ),
        (
            {"numa": 2, "numa_cpus": ("0-1", "2-3"), "specs": {"hw:numa_mem.0": "x"}},
            "hw:numa_mem.0",
            "must be a whole number, got 'x'",
        ),
        (
            {
                "numa": 2,
                "numa_cpus": ("0-1", "2-3"),
                "specs": {"hw:numa_mem.0": "2048", "hw:numa_mem.1": "lots"},
            },
            "hw:numa_mem.1",
            "must be a whole number, got 'lots'",
        ),
        ({"pci": "a100:x"}, "pci_passthrough:alias", "bad count in 'a100:x'"),
        ({"pci": "a100:0"}, "pci_passthrough:alias", "count must be positive in 'a100:0'"),
        ({"pci": "vf:2,a100:-1"}, "pci_passthrough:alias", "count must be positive"),
        ({"pci": "a100", "pci_policy": "strict"}, "hw:pci_numa_affinity_policy", "unknown policy"),
        ({"specs": {"trait:HW_X": "maybe"}}, "trait:HW_X", "must be 'required' or 'forbidden'"),
        ({"specs": {"trust:trusted_host": "yes"}}, "trust:trusted_host", "must be 'trusted'"),
    ],
)
def test_errors_name_the_key(kwargs, key, why):
    kwargs = {"vcpus": 4, "mem": 4096, **kwargs}
    with pytest.raises(SpecError) as err:
        parse(flavor("bad", **kwargs))
    message = str(err.value)
    assert message.startswith(f"flavor 'bad': extra_specs[{key!r}]: "), message
    assert why in message


def test_errors_name_the_flavor():
    with pytest.raises(
        SpecError, match=re.escape("flavor 'm1.weird': extra_specs['hw:cpu_policy']")
    ):
        parse(flavor("m1.weird", specs={"hw:cpu_policy": "isolate"}))
