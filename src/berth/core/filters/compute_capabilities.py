"""Host capabilities must satisfy the flavor's `capabilities:K` specs (Nova's filter)."""

from __future__ import annotations

from berth.core.filters.base import Context
from berth.core.filters.keyed import KeyedSpecFilter
from berth.core.flavors import SpecMatch
from berth.core.vocabulary import KeyedValues


class ComputeCapabilitiesFilter(KeyedSpecFilter):
    name = "compute_capabilities"
    code = "capability_mismatch"
    label = "capability"

    def _store(self, ctx: Context) -> dict[str, KeyedValues]:
        return ctx.table.capabilities

    def _specs(self, ctx: Context) -> tuple[SpecMatch, ...]:
        return ctx.demand.spec.capability_specs
