"""Berth's fragmentation-aware weigher: keep room for the large flavors.

Measure (docs/scheduling.md): for each reference flavor f (the large flavors operators care
about), let cap_f(h) be how many instances of f fit on host h now (NUMA-exact, `vector.count`) and
cap'_f(h) the same after this instance is placed on h by the claim rule. The cost of h is the
large-flavor capacity the placement destroys, in vCPUs:

    cost(h) = sum_f vcpus_f * (cap_f(h) - cap'_f(h))

The raw value is -cost, so a positive weight prefers hosts where the new instance does not break
a slot any large flavor could use (a host already too full for them, or a remainder that was
going to waste). Hosts that tie are separated by the other weighers (pack by RAM in the default
profile).

The cost is cached per host (`HostTable.derived`) and recomputed only on the hosts changed since
the last decision for this flavor (tens of hosts when many flavors share the fleet), in one
compiled pass with `numa.scalar`'s integer arithmetic (`compiled.lost_capacity`); a refresh
of more hosts than `dispatch.KERNEL_ROWS` (a cold cache) goes through `numa`'s vectorised
functions. Floating flavors with floating references keep every flavor's cost current instead
(`host_only_costs`).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from berth.core import preview
from berth.core.demand import Demand, PackedReferences
from berth.core.errors import SpecError
from berth.core.filters.base import Context, Workload
from berth.core.host_only_costs import HostOnlyCosts
from berth.core.numa import compiled, dispatch, vector
from berth.core.table import INT32_MAX, HostTable
from berth.core.table_changes import RowFunction
from berth.core.weighers.base import F64, I64, HostWeigher

_STORE = "fragmentation host-only"
"""`HostTable.state` key of the kept costs (`host_only_costs.HostOnlyCosts`), with references."""


def reference_counts(table: HostTable, references: tuple[str, ...]) -> npt.NDArray[np.int32]:
    """cap_f per host and reference flavor, shape (hosts, references), int32 as
    `HostTable.resource_counts`: one cache for all references (`HostTable.derived`), brought up
    to date on every decision whatever flavor is placed, so that it stays within a host or two of
    the table. Shared by the weighers that measure lost reference slots (this one, `slot_loss`).
    The returned array is shared: read it, never write to it."""
    refs = [table.demands[name] for name in references]
    return table.derived(("fragmentation caps", references), _caps(table, refs))


def _caps(table: HostTable, refs: list[Demand]) -> RowFunction:
    def caps(rows: I64 | None) -> npt.NDArray[np.int32]:
        cf, hf = table.cell_free, table.host_free
        counts = np.stack([dispatch.count_on(d, cf, hf, rows) for d in refs], axis=1)
        return np.minimum(counts, INT32_MAX).astype(np.int32)

    return caps


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
        self._names: list[str] | None = None
        self._store_key: tuple[str, tuple[str, ...]] = (_STORE, ())

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

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

    def _kept(self, ctx: Context) -> F64 | None:
        """-cost on every host from the kept costs of floating flavors (`host_only_costs`), or None
        (a flavor or reference with NUMA, PCI, pinned CPUs or huge pages; a full store)."""
        names = self.references(ctx)
        if names is not self._names:  # one key per list of references, not per decision
            self._names, self._store_key = names, (_STORE, tuple(names))
        references = self._store_key[1]
        table = ctx.table
        store = table.state(
            self._store_key,
            lambda: HostOnlyCosts.build(table, [table.demands[name] for name in references]),
        )
        return None if store is None else store.row(table, ctx.demand)

    def column(self, ctx: Context) -> F64 | None:
        return self._kept(ctx)

    def raw(self, ctx: Context, rows: I64) -> F64:
        kept = self._kept(ctx)
        if kept is not None:
            return kept.take(rows)
        references = self._store_key[1]
        demand, table = ctx.demand, ctx.table
        refs = [table.demands[name] for name in references]
        packed = table.state(
            ("fragmentation references", references),
            lambda: PackedReferences.of([d.packed for d in refs], [d.spec.vcpus for d in refs]),
        )
        caps = reference_counts(table, references)  # cap_f; `cost` only adds cap'_f

        def cost(subset: I64 | None) -> npt.NDArray[np.float32]:
            if (
                subset is not None
                and subset.size <= dispatch.KERNEL_ROWS
                and all(vector.two_cells(d, table.cell_free) for d in (demand, *refs))
            ):  # compiled (the two-cell rule only)
                out = np.empty(subset.size, dtype=np.float32)
                cf, hf, before = table.cell_free, table.host_free, caps[subset]
                compiled.lost_capacity(cf, hf, subset, before, demand.packed, packed, out)
                return out
            before = caps if subset is None else caps[subset]  # many hosts: vectorised
            out = np.zeros(before.shape[0], dtype=np.float32)
            sub = np.flatnonzero(before.any(axis=1))  # no room for any reference: nothing to lose
            if sub.size == 0:
                return out
            hosts = sub if subset is None else subset[sub]
            cf, hf = table.free_rows(hosts)
            cell_use, host_use = preview.place_rows(table, demand, hosts, (cf, hf))
            cell_after, host_after = cf - cell_use, hf - host_use
            for j, d in enumerate(refs):
                counts = before[sub, j]
                out[sub] += d.spec.vcpus * (counts - vector.count(d, cell_after, host_after))
            return out

        # the cost depends only on each host's free columns: cache it per flavor (see derived)
        costs = table.derived(("fragmentation", demand.spec.name, references), cost)
        return np.negative(costs[rows], dtype=np.float64)  # one pass: cast and negate
