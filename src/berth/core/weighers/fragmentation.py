"""Berth's fragmentation-aware weigher: keep room for the large flavors.

Measure (docs/scheduling.md): for each reference flavor f (the large flavors operators care
about), let cap_f(h) be how many instances of f fit on host h now (NUMA-exact, `numa.count`) and
cap'_f(h) the same after this instance is placed on h by the claim rule. The cost of h is the
large-flavor capacity the placement destroys, in vCPUs:

    cost(h) = sum_f vcpus_f * (cap_f(h) - cap'_f(h))

The raw value is -cost, so a positive weight prefers hosts where the new instance does not break
a slot any large flavor could use (a host already too full for them, or a remainder that was
going to waste). Hosts that tie are separated by the other weighers (pack by RAM in the default
profile).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from berth.core import numa
from berth.core.errors import SpecError
from berth.core.filters.base import Context
from berth.core.table import INT32_MAX
from berth.core.weighers.base import F64, I64, HostWeigher


class FragmentationParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    reference_flavors: list[str] = Field(
        default_factory=list,
        description="flavors whose capacity to protect; empty = the `largest` largest by vCPUs",
    )
    largest: Annotated[int, Field(ge=1, le=20)] = 3


class FragmentationWeigher(HostWeigher):
    name = "fragmentation"
    Params = FragmentationParams

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._largest_key: tuple[int, int] | None = None
        self._largest: list[str] = []

    def references(self, ctx: Context) -> list[str]:
        assert isinstance(self.params, FragmentationParams)
        names = self.params.reference_flavors
        if names:
            unknown = [n for n in names if n not in ctx.table.demands]
            if unknown:
                raise SpecError(f"fragmentation weigher: unknown reference flavor {unknown[0]!r}")
            return names
        catalogue = ctx.table.flavors
        key = (id(catalogue), ctx.table.flavor_epoch)
        if self._largest_key != key:  # sort the catalogue once, not on every decision
            specs = sorted(catalogue.values(), key=lambda s: (-s.vcpus, -s.memory_mb, s.name))
            self._largest = [s.name for s in specs[: self.params.largest]]
            self._largest_key = key
        return self._largest

    def raw(self, ctx: Context, rows: I64) -> F64:
        references = tuple(self.references(ctx))
        demand, table = ctx.demand, ctx.table
        refs = [table.demands[name] for name in references]

        def cost(subset: I64 | None) -> npt.NDArray[np.float32]:
            cf, hf = table.free_rows(subset)
            before = [np.minimum(numa.count(d, cf, hf), INT32_MAX).astype(np.int32) for d in refs]
            out = np.zeros(before[0].shape[0], dtype=np.float32)
            room = np.zeros(out.shape[0], dtype=bool)
            for counts in before:
                room |= counts > 0
            sub = np.flatnonzero(room)  # a host with no room for any reference loses nothing
            if sub.size == 0:
                return out
            cf, hf = table.free_rows(sub if subset is None else subset[sub])
            cell_use, host_use = numa.place(demand, cf, hf)
            cell_after, host_after = cf - cell_use, hf - host_use
            for d, counts in zip(refs, before, strict=True):
                out[sub] += d.spec.vcpus * (counts[sub] - numa.count(d, cell_after, host_after))
            return out

        # the cost depends only on each host's free columns: cache it per flavor (see derived)
        costs = table.derived(("fragmentation", demand.spec.name, references), cost)
        return -costs[rows].astype(np.float64)
