"""The shortcuts plugins offer the engine's compiled path say exactly what their masks and raw
values say, for every registered filter and weigher, on random fleets and states.

* `HostFilter.host_minimum` ``(column, minimum)``: the mask is ``host_free[:, column] >=
  minimum``.
* `HostWeigher.column`: ``raw(ctx, rows)`` is ``column[rows]`` cast to float64.
* `HostWeigher.constant`: ``raw(ctx, rows)`` is the same value on every host.
"""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core.errors import BerthError
from berth.core.filters.base import Context
from berth.core.registry import FILTERS, WEIGHERS
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from tests.builders import NOW
from tests.core.strategies import examples, tables


def _context(table: HostTable, data: st.DataObject) -> Context:
    for k in range(data.draw(st.integers(0, 6))):  # some hosts in use
        name = data.draw(st.sampled_from(sorted(table.flavors)))
        with contextlib.suppress(BerthError):  # does not fit: leave the host as it is
            table.claim(f"c{k}", data.draw(st.sampled_from(table.names)), name)
    flavor = data.draw(st.sampled_from(sorted(table.flavors)))
    return Context(table, RequestSpec(flavor=flavor), table.demand(flavor), NOW)


@settings(max_examples=examples(0.5), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=8), data=st.data())
def test_host_minimum_is_the_mask(table: HostTable, data: st.DataObject) -> None:
    ctx = _context(table, data)
    for name, klass in sorted(FILTERS.items()):
        flt = klass()
        bound = flt.host_minimum(ctx)
        if bound is None:
            continue
        column, minimum = bound
        assert np.array_equal(flt.mask(ctx), ctx.host_free[:, column] >= minimum), name


@settings(max_examples=examples(0.5), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=8), data=st.data())
def test_column_gathers_to_raw(table: HostTable, data: st.DataObject) -> None:
    ctx = _context(table, data)
    keep = data.draw(st.lists(st.booleans(), min_size=len(table), max_size=len(table)))
    rows = np.flatnonzero(keep) if any(keep) else np.arange(len(table))
    for name, klass in sorted(WEIGHERS.items()):
        weigher = klass()
        column = weigher.column(ctx)
        if column is None:
            continue
        assert column.shape == (len(table),), name
        assert column.dtype in (np.float64, np.int64), name
        assert np.array_equal(column[rows].astype(np.float64), weigher.raw(ctx, rows)), name


@settings(max_examples=examples(0.3), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=8), data=st.data())
def test_constant_means_equal_raw_values(table: HostTable, data: st.DataObject) -> None:
    ctx = _context(table, data)
    rows = np.arange(len(table))
    for name, klass in sorted(WEIGHERS.items()):
        weigher = klass()
        if weigher.constant(ctx):
            raw = weigher.raw(ctx, rows)
            assert np.all(raw == raw[0]), name


def test_the_group_weighers_are_constant_outside_their_group() -> None:
    from tests.builders import flavor, group, host, table_of

    groups = [group("soft", "soft-anti-affinity"), group("hard", "anti-affinity")]
    table = table_of([host("a"), host("b")], [flavor("f")], groups=groups)
    table.claim("x", "a", "f", server_group="soft")
    constant = {}
    for gid in (None, "soft", "hard"):
        ctx = Context(table, RequestSpec(flavor="f", server_group=gid), table.demand("f"), NOW)
        constant[gid] = [
            WEIGHERS[n]().constant(ctx) for n in ("soft_affinity", "soft_anti_affinity")
        ]
    assert constant == {None: [True, True], "soft": [True, False], "hard": [True, True]}
    ctx = Context(table, RequestSpec(flavor="f", server_group="soft"), table.demand("f"), NOW)
    assert WEIGHERS["soft_anti_affinity"]().raw(ctx, np.arange(2)).tolist() == [-1.0, 0.0]


def test_the_resource_plugins_offer_their_shortcuts() -> None:
    """Otherwise the tests above would pass by skipping everything."""
    from tests.builders import flavor, host, table_of

    table = table_of([host("h0", vcpus=8, mem=8192)], [flavor("f", vcpus=2, mem=1024, disk=10)])
    ctx = Context(table, RequestSpec(flavor="f"), table.demand("f"), NOW)
    assert {n for n, k in FILTERS.items() if k().host_minimum(ctx) is not None} == {
        "disk",
        "ram",
        "vcpu",
    }
    columns = {n for n, k in WEIGHERS.items() if k().column(ctx) is not None}
    assert {"ram", "vcpu", "fragmentation", "leftover"} <= columns
