"""Host aggregate metadata must satisfy the flavor's `aggregate_instance_extra_specs:K` specs.

Operators follow Nova's extra-spec syntax (`s==`, `<in>`, `<or>`, `>=`, ...); a plain value means
string equality. A host with several values for a key (from several aggregates) matches when any
of them does.
"""

from __future__ import annotations

from berth.core.filters.base import Context, Workload
from berth.core.filters.keyed import KeyedSpecFilter
from berth.core.flavors import SpecMatch
from berth.core.vocabulary import KeyedValues


class AggregateInstanceExtraSpecsFilter(KeyedSpecFilter):
    name = "aggregate_instance_extra_specs"
    code = "aggregate_mismatch"
    label = "aggregate"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return any(f.aggregate_specs for f in work.flavors)

    def per_host_limit(self) -> int | None:
        return None

    def _store(self, ctx: Context) -> dict[str, KeyedValues]:
        return ctx.table.aggregate_meta

    def _specs(self, ctx: Context) -> tuple[SpecMatch, ...]:
        return ctx.demand.spec.aggregate_specs
