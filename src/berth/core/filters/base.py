"""The host filter interface, the traits every filter declares, and the context it reads.

A filter returns a boolean mask over all hosts (True = passes). It never loops over hosts in
Python, never reads global state, and takes its parameters explicitly (`Params`). `explain` is
called only after a request failed, to split the hosts it rejected by reason.

A filter also says what kind of filter it is (`kind`, `relaxable_by_eviction`,
`implied_by_count`, `applies`, `per_host_limit`): the preemption search, the defragmenter, the
capacity counts and the simulator read these instead of keeping lists of filter classes. The
registry refuses a filter that does not declare them (docs/scheduling.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, get_args

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from berth.core.demand import Demand
from berth.core.flavors import FlavorSpec
from berth.core.request import RequestSpec
from berth.core.table import HostTable

Mask = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

FilterKind = Literal["resource", "placement", "host_state"]
"""What a filter judges: ``resource``, room for the demand in the free columns (claims change
it); ``placement``, where the request may go by its own terms (zone, image, traits, groups,
hints); ``host_state``, the host's own condition apart from room (enabled, heartbeat, instances
running). A static ``host_state`` filter may change with time alone (the heartbeat), so the
capacity report evaluates it afresh on every call."""

FILTER_TRAITS = ("kind", "relaxable_by_eviction", "implied_by_count")
"""Class attributes every filter class states in its own body: they are statements about its
`mask`, so a subclass that changes the mask restates them (never inherited silently)."""


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class Context:
    """One step of one request: the table as it is now, the request and the flavor's demand.

    Free capacities are the table's live columns: read-only for filters and weighers.
    """

    table: HostTable
    request: RequestSpec
    demand: Demand
    now: float

    @property
    def cell_free(self) -> I64:
        return self.table.cell_free

    @property
    def host_free(self) -> I64:
        return self.table.host_free


@dataclass(frozen=True)
class Workload:
    """What a whole run of requests may ask of a table (the simulator's replay of a trace).

    The requests name only flavors of `flavors`, server groups of the table, and what the flags
    allow; `now` is the run's start.
    """

    table: HostTable
    flavors: Sequence[FlavorSpec]
    now: float
    zones: bool
    """Requests may name an availability zone."""
    images: bool
    """Requests may carry an image (architecture, hypervisor, image traits)."""
    hints: bool
    """Requests may name instances to share or avoid hosts with, or hosts to skip."""
    instance_caps: bool
    """Operational caps on instances per host count; False judges hosts on resources alone."""


@dataclass(frozen=True)
class Rejection:
    """Why hosts failed: a stable code, a human message and, for resources, the numbers."""

    code: str
    message: str
    resource: str | None = None
    requested: float | None = None
    free: F64 | None = field(default=None, compare=False)  # per-host free amount, for "best free"


class HostFilter(ABC):
    """Base class of all host filters. Subclasses set `name` and the traits of
    `FILTER_TRAITS`, and implement `mask`, `applies` and `per_host_limit`."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    static: ClassVar[bool] = True
    """True when the mask depends only on the request and on host attributes that claims do not
    change; the engine then computes it once per request instead of once per instance."""

    kind: ClassVar[FilterKind]
    relaxable_by_eviction: ClassVar[bool]
    """True when evicting instances from a host can turn a rejection into a pass as the
    preemption search's resource model sees it (NUMA-exact count, instances per host): the
    search then judges the host by that model and verifies its choice with the real scheduler.
    False: the search keeps only the hosts the mask passes as it is."""
    implied_by_count: ClassVar[bool]
    """True when the mask passes every host where the NUMA-exact count of the demand is at least
    one and the huge-page size suits (`HostTable.page_size_ok`): the defragmenter's migration
    rules and its admission by migration then skip the mask."""

    def __init__(self, params: BaseModel | None = None) -> None:
        self.params = params if params is not None else self.Params()

    @abstractmethod
    def mask(self, ctx: Context) -> Mask: ...

    @classmethod
    @abstractmethod
    def applies(cls, work: Workload) -> bool:
        """False only when the mask (with default parameters) passes every host for every
        request of `work`: the simulator's lean replay then drops the filter. True when unsure."""

    @abstractmethod
    def per_host_limit(self) -> int | None:
        """The most instances a host may hold when the mask is exactly ``table.n_instances <
        limit``: capacity counts are capped by it. None for every other filter."""

    def static_part(self, ctx: Context) -> Mask | None:
        """For a filter that is not `static`: a mask that claims never change and that every
        host the filter passes also passes (the NUMA filter's huge-page size), applied where
        only the request-independent part of the filters is wanted (capacity eligibility, the
        preemption screen). None (the default): there is none, or the filter is static."""
        return None

    def host_minimum(self, ctx: Context) -> tuple[int, int] | None:
        """``(column, minimum)`` when `mask` is exactly ``ctx.host_free[:, column] >= minimum``:
        then the engine's lean path selects the candidates in one compiled pass over the
        table (`kernels.select_rows`) instead of building this mask. None (the default):
        the engine calls `mask`."""
        return None

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        """Split `failed` (hosts this filter rejected) into reasons. Default: one reason."""
        return [(Rejection(self.name, self.describe(ctx)), failed)]

    def describe(self, ctx: Context) -> str:
        return f"rejected by {self.name}"


def undeclared_traits(cls: type) -> list[str]:
    """The traits `cls` fails to declare: attributes of `FILTER_TRAITS` missing from its own
    body or with a value of the wrong kind, then the abstract methods it leaves unimplemented."""
    own = vars(cls)
    missing = [t for t in FILTER_TRAITS if t not in own]
    if "kind" in own and own["kind"] not in get_args(FilterKind):
        missing.append("kind")
    missing += [t for t in FILTER_TRAITS[1:] if t in own and not isinstance(own[t], bool)]
    return missing + sorted(getattr(cls, "__abstractmethods__", ()))
