"""Host capabilities must satisfy the flavor's `capabilities:K` specs (Nova's filter)."""

from __future__ import annotations

import numpy as np

from berth.core.filters.aggregate_extra_specs import keyed_mask
from berth.core.filters.base import Context, HostFilter, Mask, Rejection


class ComputeCapabilitiesFilter(HostFilter):
    name = "compute_capabilities"

    def mask(self, ctx: Context) -> Mask:
        out = np.ones(len(ctx.table), dtype=bool)
        for spec in ctx.demand.spec.capability_specs:
            out &= keyed_mask(ctx.table.capabilities, spec, len(ctx.table))
        return out

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        out = []
        left = failed.copy()
        for spec in ctx.demand.spec.capability_specs:
            bad = left & ~keyed_mask(ctx.table.capabilities, spec, len(ctx.table))
            why = Rejection(
                "capability_mismatch", f"capability {spec.key} not {spec.op} {spec.value}"
            )
            out.append((why, bad))
            left &= ~bad
        return out
