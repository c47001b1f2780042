"""Scheduler configuration: driver, filters in order, weighers with weights, and profiles.

Plugins never read this; the builder hands each its own validated parameters.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth.core.errors import SpecError
from berth.core.registry import filter_class, weigher_class

DEFAULT_FILTERS: tuple[str, ...] = (
    "compute",
    "retry",
    "availability_zone",
    "image_properties",
    "traits",
    "aggregate_instance_extra_specs",
    "compute_capabilities",
    "trusted",
    "ram",
    "vcpu",
    "disk",
    "max_unit",
    "pci_passthrough",
    "numa_topology",
    "pinned_memory",
    "server_group_affinity",
    "server_group_anti_affinity",
    "same_host",
    "different_host",
    "num_instances",
)


class WeigherConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    weight: float = 1.0
    params: dict[str, Any] = Field(default_factory=dict)


class SchedulerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    driver: Literal["chance", "filter", "caching"] = "filter"
    filters: list[str] = Field(default_factory=lambda: list(DEFAULT_FILTERS))
    filter_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    weighers: list[WeigherConfig] = Field(default_factory=list)
    host_subset_size: Annotated[int, Field(ge=1)] = 1
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 3


PROFILES: dict[str, list[WeigherConfig]] = {
    # Nova 34's default weighers with their default multipliers, computed as Nova computes them
    # (weighers/nova.py). Nova's other default weighers read what Berth does not hold and weigh
    # every host alike (hypervisor version, failed builds, metrics, cross-cell moves) or have a
    # multiplier of 0 (instance count, image properties): docs/scheduling.md.
    "nova": [
        WeigherConfig(name="nova_ram", weight=1.0),
        WeigherConfig(name="nova_cpu", weight=1.0),
        WeigherConfig(name="nova_disk", weight=1.0),
        WeigherConfig(name="nova_io_ops", weight=-1.0),
        WeigherConfig(name="pci", weight=1.0),
        WeigherConfig(name="soft_affinity", weight=1.0),
        WeigherConfig(name="soft_anti_affinity", weight=1.0),
    ],
    # Berth's default: protect large-flavor capacity first, then pack.
    "berth": [
        WeigherConfig(name="fragmentation", weight=2.0),
        WeigherConfig(name="ram", weight=-1.0),
        WeigherConfig(name="vcpu", weight=-0.5),
        WeigherConfig(name="soft_affinity", weight=1.0),
        WeigherConfig(name="soft_anti_affinity", weight=1.0),
    ],
    "spread": [WeigherConfig(name="ram", weight=1.0), WeigherConfig(name="vcpu", weight=1.0)],
    "pack": [WeigherConfig(name="ram", weight=-1.0), WeigherConfig(name="vcpu", weight=-1.0)],
    # The classic bin-packing policies (weighers/fit.py), for comparisons in the simulator.
    "first_fit": [WeigherConfig(name="first_fit", weight=1.0)],
    "best_fit": [WeigherConfig(name="leftover", weight=-1.0)],
    "worst_fit": [WeigherConfig(name="leftover", weight=1.0)],
}


def profile(name: str, **overrides: Any) -> SchedulerConfig:
    """A named weigher profile with the default filters."""
    try:
        weighers = PROFILES[name]
    except KeyError:
        raise SpecError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None
    return SchedulerConfig(weighers=list(weighers), **overrides)


def parse_params(kind: str, name: str, model: type[BaseModel], raw: dict[str, Any]) -> BaseModel:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise SpecError(f"{kind} {name!r} params.{loc}: {err['msg']}") from None


def check_names(config: SchedulerConfig) -> None:
    """Fail early on unknown plugin names or parameters for plugins that are not enabled."""
    for name in config.filters:
        filter_class(name)
    for w in config.weighers:
        weigher_class(w.name)
    stray = set(config.filter_params) - set(config.filters)
    if stray:
        raise SpecError(f"filter_params: {sorted(stray)[0]!r} is not an enabled filter")
