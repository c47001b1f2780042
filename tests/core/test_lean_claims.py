"""`HostTable.claim_planned` (the engine's lean claim) is `claim` of the claim rule's footprint.

Random fleets, random sequences of lean claims, general claims and releases on two twin
tables: every column, allocation and error must stay the same.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.errors import BerthError, ClaimError
from berth.core.table import Allocation, HostTable
from tests.builders import flavor, host, table_of
from tests.core.strategies import examples, tables
from tests.core.test_engine_place_one import same_state


def _outcome(call: Callable[[], Allocation]) -> str:
    try:
        alloc = call()
    except BerthError as exc:
        return f"{type(exc).__name__}: {exc}"
    return f"{alloc.host} {alloc.cell_use.tolist()} {alloc.host_use.tolist()}"


@settings(max_examples=examples(0.6), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=5), data=st.data())
def test_claim_planned_equals_claim_of_the_plan(table: HostTable, data: st.DataObject) -> None:
    twin = table.copy()
    flavors = sorted(table.flavors)
    for step in range(16):
        if table.allocations and data.draw(st.integers(0, 3)) == 0:
            victim = data.draw(st.sampled_from(sorted(table.allocations)))
            table.release(victim)
            twin.release(victim)
            continue
        name = data.draw(st.sampled_from(flavors))
        row = data.draw(st.integers(0, len(table) - 1))
        iid = data.draw(st.sampled_from([f"i{step}", "i0"]))  # sometimes a duplicate id

        want = _outcome(lambda: twin.claim(iid, twin.names[row], name, *twin.plan_for(name, row)))  # noqa: B023
        got = _outcome(lambda: table.claim_planned(iid, row, name))  # noqa: B023
        assert got == want
        same_state(table, twin)


def test_shared_footprints_are_read_only_and_released_exactly() -> None:
    table = table_of([host("a", vcpus=8, mem=4096)], [flavor("f", vcpus=2, mem=1024)])
    before = table.host_free.copy()
    one = table.claim_planned("x", 0, "f")
    two = table.claim_planned("y", 0, "f")
    assert one.host_use is two.host_use  # one shared array per flavor
    with pytest.raises(ValueError, match="read-only"):
        one.host_use[0] = 0
    table.release("x")
    table.release("y")
    assert np.array_equal(table.host_free, before)


def test_claim_planned_refuses_what_claim_refuses() -> None:
    table = table_of([host("a", vcpus=2, mem=1024)], [flavor("f", vcpus=2, mem=1024)])
    table.claim_planned("x", 0, "f")
    with pytest.raises(ClaimError, match="already has an allocation"):
        table.claim_planned("x", 0, "f")
    with pytest.raises(ClaimError, match="would be"):
        table.claim_planned("y", 0, "f")
    with pytest.raises(ClaimError, match="unknown server group"):
        table.claim_planned("z", 0, "f", server_group="nope")
