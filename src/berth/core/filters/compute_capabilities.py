"""Host capabilities must satisfy the flavor's `capabilities:K` specs (Nova's filter)."""

from __future__ import annotations

from berth.core.filters.base import Context, Workload
from berth.core.filters.keyed import KeyedSpecFilter
from berth.core.flavors import SpecMatch
from berth.core.vocabulary import KeyedValues


class ComputeCapabilitiesFilter(KeyedSpecFilter):
    name = "compute_capabilities"
    code = "capability_mismatch"
    label = "capability"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return any(f.capability_specs for f in work.flavors)

    def per_host_limit(self) -> int | None:
        return None

    def _store(self, ctx: Context) -> dict[str, KeyedValues]:
        return ctx.table.capabilities

    def _specs(self, ctx: Context) -> tuple[SpecMatch, ...]:
        return ctx.demand.spec.capability_specs
