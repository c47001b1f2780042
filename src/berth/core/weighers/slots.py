"""Slot-loss weigher: the fragmentation measure with a choice of unit and of reference flavors.

The `fragmentation` weigher values a destroyed large-flavor slot in vCPUs and protects the
largest flavors by vCPUs. On a fleet where memory binds (the Azure sample: hosts offer 2.1
vCPUs per memory unit, the load asks 1.7) a slot of a CPU-heavy flavor is not what runs out.
This weigher keeps the same NUMA-exact measure (docs/scheduling.md)::

    cost(h) = sum_f value_f(h) * (cap_f(h) - cap'_f(h))

with `value_f(h)` chosen by `unit`:

* ``vcpus``: vcpus_f (the `fragmentation` weigher's measure);
* ``memory``: memory_mb_f (the capacity lost in the resource that usually binds);
* ``dominant``: max(vcpus_f / cpu_cap(h), memory_mb_f / mem_cap(h)), the slot's dominant
  share of that host (CPU: shared vCPUs plus pinnable CPUs; Ghodsi et al., "Dominant
  Resource Fairness", NSDI 2011);
* ``slots``: 1 (every lost slot counts the same).

and the reference flavors, unless named, the `largest` of the catalogue ranked by `rank`
(``vcpus``, ``memory`` or ``dominant``, the share of the largest host). Each value is multiplied
by the flavor's entry in `reference_weights` when given (for example its request frequency in
the operator's workload: a profile parameter, not a fact of the core). The raw value is -cost.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from berth.core import preview
from berth.core.errors import SpecError
from berth.core.filters.base import Context, Workload
from berth.core.flavors import FlavorSpec
from berth.core.numa import vector
from berth.core.resources import C_PCPU, H_MEM, H_VCPU
from berth.core.table import INT32_MAX, HostTable
from berth.core.weighers.base import F64, I64, HostWeigher
from berth.core.weighers.fragmentation import reference_counts

Unit = Literal["vcpus", "memory", "dominant", "slots"]
Rank = Literal["vcpus", "memory", "dominant"]


class SlotLossParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    reference_flavors: list[str] = Field(
        default_factory=list,
        description="flavors whose capacity to protect; empty = the `largest` ranked by `rank`",
    )
    largest: Annotated[int, Field(ge=1, le=20)] = 3
    rank: Rank = "vcpus"
    unit: Unit = "vcpus"
    reference_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    with_room: bool = Field(
        default=False,
        description="rank only flavors that still fit on some host (a full fleet has no slot "
        "of the largest left to protect, so protect the largest that still have one)",
    )


def _rank_key(spec: FlavorSpec, rank: Rank, vcpu_cap: float, mem_cap: float) -> float:
    if rank == "vcpus":
        return float(spec.vcpus)
    if rank == "memory":
        return float(spec.memory_mb)
    return max(spec.vcpus / vcpu_cap, spec.memory_mb / mem_cap)


class SlotLossWeigher(HostWeigher):
    """Minus the reference-flavor capacity a placement destroys, in the configured unit."""

    name = "slot_loss"
    Params = SlotLossParams

    def __init__(self, params: BaseModel | None = None) -> None:
        super().__init__(params)
        self._key: tuple[int, int, int] | None = None
        self._refs: tuple[str, ...] = ()
        self._ranked: tuple[str, ...] = ()

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return True

    @property
    def p(self) -> SlotLossParams:
        assert isinstance(self.params, SlotLossParams)
        return self.params

    def references(self, table: HostTable) -> tuple[str, ...]:
        names = self.p.reference_flavors
        if names:
            unknown = [n for n in names if n not in table.demands]
            if unknown:
                raise SpecError(f"slot_loss weigher: unknown reference flavor {unknown[0]!r}")
            return tuple(names)
        key = (id(table.flavors), table.flavor_epoch, id(table.host_cap))
        if self._key != key:  # rank the catalogue once per catalogue and fleet
            cap = table.host_cap
            cpu = cap[:, H_VCPU] + table.cell_cap[:, :, C_PCPU].sum(axis=1)
            vcap = float(max(int(cpu.max(initial=1)), 1))
            mcap = float(max(int(cap[:, H_MEM].max(initial=1)), 1))
            specs = sorted(
                table.flavors.values(),
                key=lambda s: (
                    -_rank_key(s, self.p.rank, vcap, mcap),
                    -s.vcpus,
                    -s.memory_mb,
                    s.name,
                ),
            )
            self._ranked = tuple(s.name for s in specs)
            self._refs = self._ranked[: self.p.largest]
            self._key = key
        if not self.p.with_room:
            return self._refs
        out: list[str] = []
        for name in self._ranked:  # largest first; counts are cached per flavor (derived)
            if table.resource_counts(name).any():
                out.append(name)
                if len(out) == self.p.largest:
                    break
        return tuple(out) if out else self._refs

    def _values(self, table: HostTable, spec: FlavorSpec, rows: I64 | None) -> F64 | float:
        """value_f per host of `rows` (None = all), or one number when it is host-independent."""
        weight = self.p.reference_weights.get(spec.name, 1.0)
        unit = self.p.unit
        if unit == "vcpus":
            return weight * spec.vcpus
        if unit == "memory":
            return weight * spec.memory_mb
        if unit == "slots":
            return weight
        cap = table.host_cap if rows is None else table.host_cap[rows]
        cells = table.cell_cap if rows is None else table.cell_cap[rows]
        vshare = spec.vcpus / np.maximum(cap[:, H_VCPU] + cells[:, :, C_PCPU].sum(axis=1), 1)
        mshare = spec.memory_mb / np.maximum(cap[:, H_MEM], 1)
        return weight * np.maximum(vshare, mshare)

    def raw(self, ctx: Context, rows: I64) -> F64:
        references = self.references(ctx.table)
        demand, table = ctx.demand, ctx.table
        refs = [table.demands[name] for name in references]

        caps = reference_counts(table, references)  # cap_f, shared with `fragmentation`

        def cost(subset: I64 | None) -> npt.NDArray[np.float64]:
            before = caps if subset is None else caps[subset]
            out = np.zeros(before.shape[0], dtype=np.float64)
            sub = np.flatnonzero(before.any(axis=1))  # no room for any reference: nothing lost
            if sub.size == 0:
                return out
            hosts = sub if subset is None else subset[sub]
            cf, hf = table.free_rows(hosts)
            cell_use, host_use = preview.place_rows(table, demand, hosts, (cf, hf))
            cell_after, host_after = cf - cell_use, hf - host_use
            for j, d in enumerate(refs):
                after = np.minimum(vector.count(d, cell_after, host_after), INT32_MAX)
                lost = before[sub, j].astype(np.int64) - after
                out[sub] += self._values(table, d.spec, hosts) * lost
            return out

        key = ("slot_loss", demand.spec.name, references, self.p.unit, self._weights_key())
        costs = table.derived(key, cost)
        return -costs[rows]

    def _weights_key(self) -> tuple[tuple[str, float], ...]:
        return tuple(sorted(self.p.reference_weights.items()))
