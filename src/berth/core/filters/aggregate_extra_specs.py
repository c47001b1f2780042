"""Host aggregate metadata must satisfy the flavor's `aggregate_instance_extra_specs:K` specs.

Operators follow Nova's extra-spec syntax (`s==`, `<in>`, `<or>`, `>=`, ...); a plain value means
string equality. A host with several values for a key (from several aggregates) matches when any
of them does.
"""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection
from berth.core.flavors import SpecMatch
from berth.core.table import KeyedValues


def keyed_mask(store: dict[str, KeyedValues], spec: SpecMatch, n: int) -> Mask:
    values = store.get(spec.key)
    if values is None:
        return np.zeros(n, dtype=bool)
    return values.mask(spec)


class AggregateInstanceExtraSpecsFilter(HostFilter):
    name = "aggregate_instance_extra_specs"

    def mask(self, ctx: Context) -> Mask:
        out = np.ones(len(ctx.table), dtype=bool)
        for spec in ctx.demand.spec.aggregate_specs:
            out &= keyed_mask(ctx.table.aggregate_meta, spec, len(ctx.table))
        return out

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        out = []
        left = failed.copy()
        for spec in ctx.demand.spec.aggregate_specs:
            bad = left & ~keyed_mask(ctx.table.aggregate_meta, spec, len(ctx.table))
            why = Rejection(
                "aggregate_mismatch", f"aggregate {spec.key} not {spec.op} {spec.value}"
            )
            out.append((why, bad))
            left &= ~bad
        return out
