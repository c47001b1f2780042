"""Name -> plugin class for filters and weighers.

Built-ins are registered here. A user adds a plugin without touching the core either by calling
`register_filter` / `register_weigher` before building a scheduler, or by naming the class by
import path (``"mypackage.module:MyFilter"``) in the scheduler configuration. Either way the
plugin must declare its traits (`filters.base.undeclared_traits`, a weigher's `applies`).
"""

from __future__ import annotations

import importlib
from typing import TypeVar

from berth.core.errors import SpecError
from berth.core.filters.aggregate_extra_specs import AggregateInstanceExtraSpecsFilter
from berth.core.filters.all_hosts import AllHostsFilter
from berth.core.filters.availability_zone import AvailabilityZoneFilter
from berth.core.filters.base import HostFilter, undeclared_traits
from berth.core.filters.compute import ComputeFilter
from berth.core.filters.compute_capabilities import ComputeCapabilitiesFilter
from berth.core.filters.disk import DiskFilter
from berth.core.filters.image_properties import ImagePropertiesFilter
from berth.core.filters.max_unit import MaxUnitFilter
from berth.core.filters.num_instances import NumInstancesFilter
from berth.core.filters.numa_topology import NumaTopologyFilter
from berth.core.filters.pci_passthrough import PciPassthroughFilter
from berth.core.filters.pinned_memory import PinnedMemoryFilter
from berth.core.filters.rack_anti_affinity import RackAntiAffinityFilter
from berth.core.filters.ram import RamFilter
from berth.core.filters.retry import RetryFilter
from berth.core.filters.same_host import DifferentHostFilter, SameHostFilter
from berth.core.filters.server_group import (
    ServerGroupAffinityFilter,
    ServerGroupAntiAffinityFilter,
)
from berth.core.filters.traits import TraitsFilter
from berth.core.filters.trusted import TrustedFilter
from berth.core.filters.vcpu import VcpuFilter
from berth.core.weighers.affinity import SoftAffinityWeigher, SoftAntiAffinityWeigher
from berth.core.weighers.base import HostWeigher
from berth.core.weighers.fit import FirstFitWeigher, LeftoverWeigher
from berth.core.weighers.fragmentation import FragmentationWeigher
from berth.core.weighers.load import IoOpsWeigher, NumInstancesWeigher
from berth.core.weighers.nova import (
    NovaCpuWeigher,
    NovaDiskWeigher,
    NovaIoOpsWeigher,
    NovaRamWeigher,
    PciWeigher,
)
from berth.core.weighers.resources import DiskWeigher, RamWeigher, VcpuWeigher
from berth.core.weighers.slots import SlotLossWeigher

FILTERS: dict[str, type[HostFilter]] = {}
WEIGHERS: dict[str, type[HostWeigher]] = {}

F = TypeVar("F", bound=type[HostFilter])
W = TypeVar("W", bound=type[HostWeigher])


def register_filter(cls: F) -> F:
    """Register a filter class under its `name` (usable as a decorator)."""
    _check_declared("filter", cls, undeclared_traits(cls))
    FILTERS[cls.name] = cls
    return cls


def register_weigher(cls: W) -> W:
    _check_declared("weigher", cls, sorted(getattr(cls, "__abstractmethods__", ())))
    WEIGHERS[cls.name] = cls
    return cls


def _check_declared(what: str, cls: type, missing: list[str]) -> None:
    if missing:
        raise SpecError(
            f"{what} {cls.__module__}:{cls.__qualname__} must declare "
            f"{', '.join(missing)} (docs/scheduling.md)"
        )


for _f in (
    AllHostsFilter,
    ComputeFilter,
    RamFilter,
    VcpuFilter,
    DiskFilter,
    AvailabilityZoneFilter,
    AggregateInstanceExtraSpecsFilter,
    ComputeCapabilitiesFilter,
    ImagePropertiesFilter,
    PciPassthroughFilter,
    NumaTopologyFilter,
    ServerGroupAffinityFilter,
    ServerGroupAntiAffinityFilter,
    SameHostFilter,
    DifferentHostFilter,
    RetryFilter,
    TrustedFilter,
    NumInstancesFilter,
    TraitsFilter,
    RackAntiAffinityFilter,
    MaxUnitFilter,
    PinnedMemoryFilter,
):
    register_filter(_f)

for _w in (
    RamWeigher,
    VcpuWeigher,
    DiskWeigher,
    IoOpsWeigher,
    NumInstancesWeigher,
    SoftAffinityWeigher,
    SoftAntiAffinityWeigher,
    FragmentationWeigher,
    NovaRamWeigher,
    NovaCpuWeigher,
    NovaDiskWeigher,
    NovaIoOpsWeigher,
    PciWeigher,
):
    register_weigher(_w)
register_weigher(FirstFitWeigher)
register_weigher(LeftoverWeigher)
register_weigher(SlotLossWeigher)


def _by_path(path: str, base: type) -> type:
    module, _, attr = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"cannot import plugin {path!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise SpecError(f"plugin {path!r} is not a {base.__name__}")
    return cls


def filter_class(name: str) -> type[HostFilter]:
    if ":" in name:
        cls: type[HostFilter] = _by_path(name, HostFilter)
        _check_declared("filter", cls, undeclared_traits(cls))
        return cls
    try:
        return FILTERS[name]
    except KeyError:
        known = ", ".join(sorted(FILTERS))
        raise SpecError(f"unknown filter {name!r} (known: {known})") from None


def weigher_class(name: str) -> type[HostWeigher]:
    if ":" in name:
        cls: type[HostWeigher] = _by_path(name, HostWeigher)
        _check_declared("weigher", cls, sorted(getattr(cls, "__abstractmethods__", ())))
        return cls
    try:
        return WEIGHERS[name]
    except KeyError:
        known = ", ".join(sorted(WEIGHERS))
        raise SpecError(f"unknown weigher {name!r} (known: {known})") from None
