"""The slot-loss weigher (units, reference choice) and the leftover weigher's `resources`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from berth.core.errors import SpecError
from berth.core.table import HostTable
from berth.core.weighers.fit import LeftoverParams, LeftoverWeigher
from berth.core.weighers.fragmentation import FragmentationWeigher
from berth.core.weighers.slots import SlotLossParams, SlotLossWeigher
from tests.builders import NOW, cell, context, flavor, host, scheduler, table_of
from tests.core.strategies import examples, tables

FLAVORS = [
    flavor("big", vcpus=4, mem=4096, pinned=True),
    flavor("mid", vcpus=2, mem=2048, pinned=True),
    flavor("small", vcpus=1, mem=1024, pinned=True),
]


def _table() -> HostTable:
    hosts = [
        host("exact", vcpus=0, pcpus=4, mem=4096),  # one whole big slot: small would break it
        host("spare", vcpus=0, pcpus=5, mem=5120),  # big slot plus one spare CPU
        host("no_big", vcpus=0, pcpus=2, mem=2048),  # too small for big already
        # two cells: the claim rule puts small in the tight cell, keeping the big slot whole
        host("cells", vcpus=0, numa=[cell(pcpus=4, mem=4096), cell(pcpus=1, mem=1024)]),
    ]
    return table_of(hosts, FLAVORS)


def raw(weigher: SlotLossWeigher | LeftoverWeigher, table: HostTable, name: str) -> list[float]:
    values = weigher.raw(context(table, name), np.arange(len(table), dtype=np.int64))
    assert values.dtype == np.float64
    return values.tolist()


def lost_slots(table: HostTable, flavor_name: str, ref: str) -> list[int]:
    """cap_f before - cap_f after claiming one `flavor_name`, per host, by the scheduler."""
    sched = scheduler()
    out = []
    for name in table.names:
        after = table.copy()
        after.claim("probe", name, flavor_name)
        row = table.index[name]
        out.append(
            int(sched.capacity(table, ref, NOW)[row]) - int(sched.capacity(after, ref, NOW)[row])
        )
    return out


# Placing 'small': slots lost per host (big, mid, small): exact (1, 1, 1), spare (0, 0, 1),
# no_big (0, 1, 1), cells (0, 0, 1). Host CPU/memory: exact 4/4096, spare 5/5120, no_big
# 2/2048, cells 5/5120; dominant shares of big, mid, small: exact 1, 1/2, 1/4; spare and cells
# 4/5, 2/5, 1/5; no_big -, 1, 1/2.
@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (SlotLossParams(), [7, 1, 3, 1]),
        (SlotLossParams(unit="memory"), [7168, 1024, 3072, 1024]),
        (SlotLossParams(unit="slots"), [3, 1, 2, 1]),
        (SlotLossParams(unit="dominant"), [1.75, 0.2, 1.5, 0.2]),
        (SlotLossParams(largest=1), [4, 0, 0, 0]),
        (SlotLossParams(reference_flavors=["mid"], unit="memory"), [2048, 0, 2048, 0]),
        (SlotLossParams(reference_weights={"small": 10.0}), [16, 10, 12, 10]),
        (SlotLossParams(reference_weights={"big": 0.0, "mid": 0.5}), [2, 1, 2, 1]),
    ],
)
def test_slot_loss_cost(params, expected):
    table = _table()
    assert raw(SlotLossWeigher(params), table, "small") == pytest.approx([-c for c in expected])


def test_slot_loss_in_vcpus_is_the_fragmentation_measure():
    table = _table()
    refs = ["big", "mid", "small"]
    by_formula = [
        sum(table.flavors[r].vcpus * lost for r, lost in zip(refs, per_host, strict=True))
        for per_host in zip(*(lost_slots(table, "small", r) for r in refs), strict=True)
    ]
    assert raw(SlotLossWeigher(), table, "small") == [-c for c in by_formula]
    frag = FragmentationWeigher().raw(context(table, "small"), np.arange(4, dtype=np.int64))
    assert raw(SlotLossWeigher(), table, "small") == frag.tolist()


@pytest.mark.parametrize(
    ("rank", "expected"),
    [("vcpus", ("d", "c", "a")), ("memory", ("c", "a", "b")), ("dominant", ("d", "c", "a"))],
)
def test_slot_loss_reference_ranking(rank, expected):
    flavors = [
        flavor("b", vcpus=4, mem=1024),
        flavor("a", vcpus=4, mem=1024),
        flavor("c", vcpus=4, mem=2048),
        flavor("d", vcpus=8, mem=512),
    ]
    # host 8 vCPUs / 4096 MB: dominant shares d 1, c 1/2, a and b 1/2 (ties: more vCPUs, name)
    table = table_of([host("h", vcpus=8, mem=4096)], flavors)
    assert SlotLossWeigher(SlotLossParams(rank=rank)).references(table) == expected


def test_with_room_skips_flavors_that_fit_nowhere():
    table = _table()
    weigher = SlotLossWeigher(SlotLossParams(largest=2, with_room=True))
    assert weigher.references(table) == ("big", "mid")
    for name in ("exact", "spare", "cells"):
        table.claim(f"big-{name}", name, "big")
    assert scheduler().capacity(table, "big", NOW).tolist() == [0, 0, 0, 0]
    assert weigher.references(table) == ("mid", "small")
    assert SlotLossWeigher(SlotLossParams(largest=2)).references(table) == ("big", "mid")
    # placing small (references mid, small): exact is full (no room, cost 0); spare and cells
    # lose their last small slot (1 CPU left); no_big loses its mid slot and one small slot
    assert raw(weigher, table, "small") == [-0.0, -1.0, -3.0, -1.0]
    table.release("big-spare")
    assert weigher.references(table) == ("big", "mid")


def test_slot_loss_unknown_reference_flavor():
    weigher = SlotLossWeigher(SlotLossParams(reference_flavors=["huge"]))
    with pytest.raises(SpecError, match="slot_loss weigher: unknown reference flavor 'huge'"):
        raw(weigher, _table(), "small")


@pytest.mark.slow
@settings(max_examples=examples(2), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables(max_hosts=5), data=st.data())
def test_slot_loss_follows_claims(table, data):
    """Invariant: after any claims, the cached cost equals the formula measured by capacity."""
    names = sorted(table.flavors)
    for i in range(data.draw(st.integers(0, 6))):
        name = data.draw(st.sampled_from(names))
        rows = np.flatnonzero(scheduler().capacity(table, name, NOW) > 0)
        if rows.size:
            table.claim(f"i{i}", table.names[int(data.draw(st.sampled_from(rows.tolist())))], name)
    unit = data.draw(st.sampled_from(["vcpus", "memory", "slots"]))
    weigher = SlotLossWeigher(SlotLossParams(unit=unit, largest=2))
    refs = weigher.references(table)
    for name in names:
        fits = scheduler().capacity(table, name, NOW) > 0
        expected = np.zeros(len(table))
        for ref in refs:
            spec = table.flavors[ref]
            value = {"vcpus": spec.vcpus, "memory": spec.memory_mb, "slots": 1}[unit]
            lost = np.asarray(lost_slots_where(table, name, ref, fits))
            expected += value * lost
        got = np.asarray(raw(weigher, table, name))
        assert got[fits].tolist() == pytest.approx((-expected[fits]).tolist())


def lost_slots_where(table: HostTable, flavor_name: str, ref: str, fits: np.ndarray) -> list[int]:
    """Resource capacity (`numa.vector.count`) of `ref` lost by a claim where `flavor_name` fits."""
    out = []
    for row, name in enumerate(table.names):
        if not fits[row]:
            out.append(0)
            continue
        after = table.copy()
        after.claim("probe", name, flavor_name)
        before_f = int(table.resource_counts(ref)[row])
        out.append(before_f - int(after.resource_counts(ref)[row]))
    return out


# ---------------------------------------------------------------------------- leftover resources


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        # hosts 8 vCPUs / 4096 MB and 4 vCPUs / 8192 MB, flavor 2 vCPUs / 1024 MB
        (["cpu", "memory"], [6 / 8 + 3072 / 4096, 2 / 4 + 7168 / 8192]),
        (["cpu"], [6 / 8, 2 / 4]),
        (["memory"], [3072 / 4096, 7168 / 8192]),
    ],
)
def test_leftover_resources(resources, expected):
    table = table_of(
        [host("a", vcpus=8, mem=4096), host("b", vcpus=4, mem=8192)],
        [flavor("f", vcpus=2, mem=1024)],
    )
    weigher = LeftoverWeigher(LeftoverParams(resources=resources))
    assert raw(weigher, table, "f") == pytest.approx(expected)


def test_leftover_resources_pinned_and_hugepages():
    table = table_of(
        [host("a", vcpus=0, pcpus=8, mem=4096, huge=4096), host("b", vcpus=0, pcpus=4, huge=8192)],
        [flavor("p", vcpus=2, mem=1024, pinned=True, page="large")],
    )
    both = raw(LeftoverWeigher(), table, "p")
    cpu = raw(LeftoverWeigher(LeftoverParams(resources=["cpu"])), table, "p")
    mem = raw(LeftoverWeigher(LeftoverParams(resources=["memory"])), table, "p")
    assert cpu == pytest.approx([6 / 8, 2 / 4])
    assert mem == pytest.approx([3072 / 4096, 7168 / 8192])
    assert both == pytest.approx([c + m for c, m in zip(cpu, mem, strict=True)])


def test_leftover_resources_must_not_be_empty():
    with pytest.raises(ValueError, match="resources"):
        LeftoverParams(resources=[])
