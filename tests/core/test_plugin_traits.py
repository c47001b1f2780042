"""Every registered filter and weigher declares its traits, the registry refuses one that does
not, and the simulator's lean replay follows `applies` (a filter it does not know of is kept).

The traits (docs/scheduling.md) replace lists of filter classes kept elsewhere: the preemption
search reads `relaxable_by_eviction`, the defragmenter `implied_by_count`, capacity counts
`per_host_limit` and `static_part`, the simulator `applies`.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import get_args

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from berth.core import registry
from berth.core.config import DEFAULT_FILTERS
from berth.core.errors import BerthError, SpecError
from berth.core.filters.base import (
    FILTER_TRAITS,
    Context,
    FilterKind,
    HostFilter,
    Mask,
    Workload,
    undeclared_traits,
)
from berth.core.filters.ram import RamFilter
from berth.core.model import Fleet
from berth.core.registry import FILTERS, WEIGHERS, filter_class, register_filter, weigher_class
from berth.core.request import RequestSpec
from berth.core.table import HostTable
from berth.core.weighers.base import F64, I64, HostWeigher
from berth.sim import policies
from berth.sim.policies import lean_config, resolve
from berth.sim.replay import ReplayOptions, Simulation
from berth.sim.synthetic import SyntheticConfig, generate
from tests.builders import NOW, flavor, host, table_of
from tests.core.strategies import examples, tables


def _workload(table: HostTable, **flags: bool) -> Workload:
    options = {"zones": False, "images": False, "hints": False, "instance_caps": True} | flags
    return Workload(table, list(table.flavors.values()), NOW, **options)


def test_every_filter_declares_its_traits() -> None:
    table = table_of([host("h0"), host("h1")], [flavor("f")])
    ctx = Context(table, RequestSpec(flavor="f"), table.demand("f"), NOW)
    for name, klass in sorted(FILTERS.items()):
        assert undeclared_traits(klass) == [], name
        assert klass.kind in get_args(FilterKind), name
        if klass.implied_by_count:  # room the count sees is room evictions free
            assert klass.kind == "resource", name
            assert klass.relaxable_by_eviction, name
        assert isinstance(klass.applies(_workload(table)), bool), name
        flt = klass()
        limit = flt.per_host_limit()
        if limit is not None:
            assert np.array_equal(flt.mask(ctx), table.n_instances < limit), name
        if flt.static:
            assert flt.static_part(ctx) is None, name


def test_every_weigher_declares_when_it_applies() -> None:
    table = table_of([host("h0")], [flavor("f")])
    for name, klass in sorted(WEIGHERS.items()):
        assert not inspect.isabstract(klass), name
        assert isinstance(klass.applies(_workload(table)), bool), name


BUILT_IN = [
    "all_hosts",
    "compute",
    "ram",
    "vcpu",
    "disk",
    "availability_zone",
    "aggregate_instance_extra_specs",
    "compute_capabilities",
    "image_properties",
    "pci_passthrough",
    "numa_topology",
    "server_group_affinity",
    "server_group_anti_affinity",
    "same_host",
    "different_host",
    "retry",
    "trusted",
    "num_instances",
    "traits",
    "rack_anti_affinity",
]
"""The filters registered when the traits replaced the lists of classes kept elsewhere."""


def test_the_traits_say_what_the_old_lists_said() -> None:
    """The classes the preemption search, the defragmenter and the capacity counts named."""
    built_in = {n: FILTERS[n] for n in BUILT_IN}
    resource = {"ram", "vcpu", "disk", "pci_passthrough", "numa_topology"}
    assert {n for n, k in built_in.items() if k.implied_by_count} == resource
    relaxable = {n for n, k in built_in.items() if k.relaxable_by_eviction}
    assert relaxable == resource | {"num_instances"}
    limits = {n for n, k in built_in.items() if k().per_host_limit() is not None}
    assert limits == {"num_instances"}
    live = {n for n, k in built_in.items() if k.static and k.kind == "host_state"}
    assert live == {"compute"}  # the capacity report's compute filter


class _Bare(HostFilter):
    name = "bare"

    def mask(self, ctx: Context) -> Mask:
        return ctx.table.everyone()


class _StricterRam(RamFilter):
    """Inherits the methods but states none of the traits about its own mask."""

    name = "stricter_ram"


class _BareWeigher(HostWeigher):
    name = "bare_weigher"

    def raw(self, ctx: Context, rows: I64) -> F64:
        return np.zeros(rows.size)


def test_the_registry_refuses_a_plugin_without_traits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "FILTERS", dict(FILTERS))
    monkeypatch.setattr(registry, "WEIGHERS", dict(WEIGHERS))
    with pytest.raises(SpecError, match=r"must declare kind, relaxable_by_eviction, .*applies"):
        register_filter(_Bare)
    with pytest.raises(SpecError, match="_StricterRam must declare kind"):
        register_filter(_StricterRam)
    with pytest.raises(SpecError, match="must declare applies"):
        registry.register_weigher(_BareWeigher)
    assert "bare" not in registry.FILTERS
    assert "stricter_ram" not in registry.FILTERS
    assert "bare_weigher" not in registry.WEIGHERS
    with pytest.raises(SpecError, match="must declare kind"):
        filter_class(f"{__name__}:_Bare")
    with pytest.raises(SpecError, match="must declare applies"):
        weigher_class(f"{__name__}:_BareWeigher")
    assert set(FILTER_TRAITS) <= set(undeclared_traits(_Bare))


@settings(max_examples=examples(0.3), deadline=None)
@given(table=tables(min_hosts=1, max_hosts=6), data=st.data())
def test_a_filter_that_does_not_apply_passes_every_host(
    table: HostTable, data: st.DataObject
) -> None:
    """`applies` False is a promise: every request the workload allows passes every host, in
    any state the run may reach (here: random claims)."""
    for k in range(data.draw(st.integers(0, 6))):
        name = data.draw(st.sampled_from(sorted(table.flavors)))
        with contextlib.suppress(BerthError):  # does not fit: leave the host as it is
            table.claim(f"c{k}", data.draw(st.sampled_from(table.names)), name)
    work = _workload(table)
    for name, klass in sorted(FILTERS.items()):
        if klass.applies(work):
            continue
        flt = klass()
        for spec in work.flavors:
            ctx = Context(table, RequestSpec(flavor=spec.name), table.demand(spec.name), NOW)
            assert flt.mask(ctx).all(), (name, spec.name)


class _FirstHostOnly(HostFilter):
    """A filter the simulator has never heard of: only the fleet's first host passes."""

    name = "first_host_only"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    def per_host_limit(self) -> int | None:
        return None

    def mask(self, ctx: Context) -> Mask:
        out = np.zeros(len(ctx.table), dtype=bool)
        out[0] = True
        return out


def test_a_new_default_filter_is_honoured_by_the_lean_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A filter added to the default list is kept by the lean replay because it says it
    applies, not because the simulator lists it (the old list dropped it silently)."""
    monkeypatch.setattr(registry, "FILTERS", dict(FILTERS))
    register_filter(_FirstHostOnly)
    monkeypatch.setattr(policies, "DEFAULT_FILTERS", (*DEFAULT_FILTERS, "first_host_only"))
    trace = generate(SyntheticConfig(seed=1, days=0.05, history_days=0.5))
    fleet_hosts = [host(f"h{i}", cells=2, vcpus=48, mem=262144, az="bj-a") for i in range(3)]
    sim = Simulation(trace, Fleet(hosts=fleet_hosts, now=0.0), ReplayOptions(bound=False))
    policy = resolve("nova")
    config = lean_config(policy, sim.base, sim.flavors_used, sim.zoned, sim.now)
    assert config.filters[-1] == "first_host_only"
    run = sim.run(policy)
    placed = run.host[run.host >= 0]
    assert placed.size > 0
    assert set(placed.tolist()) == {0}
