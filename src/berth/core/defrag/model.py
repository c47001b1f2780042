"""The defragmentation planner's vocabulary: what to aim for, what it may spend, what it plans.

These are the shared types of the planner (`berth.core.defrag.planner`), its exact counterpart
(`berth.defrag.exact`), the simulator's periodic defragmentation, the CLI and the service's stored
plans. They are pydantic models so that the API and the CLI validate them at the edge and the
service can store a plan as JSON and read it back unchanged.

A plan is an ordered list of live migrations grouped into waves. Within a wave every move's
target is claimed first (a live migration holds the instance on both hosts), then every source is
released; so each wave's claims must fit on the state left by the previous waves with the wave's
sources still held. A plan is valid when every one of those intermediate states is.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from berth.core.model import Name

NonNeg = Annotated[int, Field(ge=0)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Objective(StrEnum):
    CAPACITY = "capacity"
    """Maximise the (weighted) number of instances of the target flavors that fit."""
    EMPTY_HOSTS = "empty-hosts"
    """Empty as many hosts as possible (consolidation; frees whole hosts)."""
    FRAGMENT_RATE = "fragment-rate"
    """Minimise the fragment rate of one reference flavor (e.g. 16 vCPUs on one NUMA cell):
    free CPU that the flavor cannot use, over all free CPU of the active hosts. Migrations
    between active hosts keep the free CPU, so this maximises the flavor's capacity."""


class Target(_Frozen):
    """What a plan aims for. Hosts listed in `drain` are emptied first, whatever the objective."""

    objective: Objective = Objective.CAPACITY
    flavors: tuple[Name, ...] = Field(
        (),
        description="flavors whose capacity to restore (objective capacity; large ones), or "
        "the one reference flavor (objective fragment-rate)",
    )
    weights: tuple[Annotated[float, Field(gt=0)], ...] | None = Field(
        None, description="one weight per flavor (default 1 each)"
    )
    drain: tuple[Name, ...] = Field(
        (), description="hosts to empty (maintenance); never chosen as migration targets"
    )
    keep_traits: tuple[Name, ...] = Field(
        (),
        description="traits a migration may neither gain nor lose: the target carries exactly "
        "the source's subset of them (resource-pool traits keep an instance in its pool)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Target:
        if self.objective is Objective.CAPACITY and not self.flavors and not self.drain:
            raise ValueError("flavors: the capacity objective needs at least one flavor")
        if self.objective is Objective.FRAGMENT_RATE:
            if len(self.flavors) != 1:
                raise ValueError("flavors: the fragment-rate objective takes one reference flavor")
            if self.weights is not None:
                raise ValueError("weights: the fragment-rate objective takes no weights")
        if self.weights is not None and len(self.weights) != len(self.flavors):
            raise ValueError("weights: give one weight per flavor")
        if len(set(self.flavors)) != len(self.flavors):
            raise ValueError("flavors: a flavor is listed twice")
        return self


class Budget(_Frozen):
    """What a plan may spend."""

    max_migrations: NonNeg = Field(description="moves in the whole plan")
    max_per_host: Annotated[int, Field(ge=1)] | None = Field(
        None, description="moves touching one host (as source or target); None = no limit"
    )
    max_concurrent: Annotated[int, Field(ge=1)] = Field(
        1, description="moves in flight at once (the size of a wave)"
    )


class Move(_Frozen):
    """One live migration: `instance_id` from `source` to `target` at exact target cells."""

    step: NonNeg = Field(description="position in the plan, from 0")
    wave: NonNeg = Field(description="moves of one wave run concurrently")
    instance_id: Name
    flavor: Name
    source: Name
    target: Name
    cell_use: tuple[tuple[int, ...], ...] = Field(
        description="the instance's footprint on the target, per cell (table cell columns)"
    )
    host_use: tuple[int, ...] = Field(description="host-level footprint on the target")


class Figures(_Frozen):
    """Fleet figures before or after a plan."""

    capacity: dict[Name, NonNeg] = Field(description="instances of each target flavor that fit")
    fragmentation: dict[Name, float] = Field(
        description="share of free CPU that cannot hold the flavor (sim.measures formula)"
    )
    empty_hosts: NonNeg
    drained_left: NonNeg = Field(0, description="instances still on hosts being drained")


class Plan(_Frozen):
    target: Target
    budget: Budget
    moves: tuple[Move, ...]
    before: Figures
    after: Figures
    generations: dict[Name, int] = Field(
        default_factory=dict,
        description="generation of every host the plan touches, as read when planning",
    )

    @property
    def migrations(self) -> int:
        return len(self.moves)
