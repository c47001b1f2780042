"""Required and forbidden traits, from the flavor (`trait:X=...`) and the image."""

from __future__ import annotations

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection, Workload
from berth.core.table import HostTable


def trait_mask(table: HostTable, traits: frozenset[str] | set[str]) -> np.ndarray | None:
    """Bitmask words for `traits`; None when some trait is carried by no host at all."""
    words = np.zeros(table.trait_bits.shape[1], dtype=np.uint64)
    for trait in traits:
        code = table.traits.get(trait)
        if code < 0:
            return None
        words[code // 64] |= np.uint64(1 << (code % 64))
    return words


class TraitsFilter(HostFilter):
    name = "traits"
    kind = "placement"
    relaxable_by_eviction = False
    implied_by_count = False

    @classmethod
    def applies(cls, work: Workload) -> bool:
        return work.images or any(f.required_traits or f.forbidden_traits for f in work.flavors)

    def per_host_limit(self) -> int | None:
        return None

    @staticmethod
    def _wanted(ctx: Context) -> tuple[set[str], set[str]]:
        spec, image = ctx.demand.spec, ctx.request.image
        return (
            set(spec.required_traits) | set(image.required_traits),
            set(spec.forbidden_traits) | set(image.forbidden_traits),
        )

    def _has(self, ctx: Context, traits: set[str]) -> Mask:
        """Hosts carrying every trait in `traits`."""
        words = trait_mask(ctx.table, traits)
        if words is None:
            return np.zeros(len(ctx.table), dtype=bool)
        return ((ctx.table.trait_bits & words) == words).all(axis=1)

    def _has_none(self, ctx: Context, traits: set[str]) -> Mask:
        known = {t for t in traits if ctx.table.traits.get(t) >= 0}
        words = trait_mask(ctx.table, known)
        assert words is not None
        return ((ctx.table.trait_bits & words) == 0).all(axis=1)

    def mask(self, ctx: Context) -> Mask:
        spec, image = ctx.demand.spec, ctx.request.image
        if not (
            spec.required_traits
            or spec.forbidden_traits
            or image.required_traits
            or image.forbidden_traits
        ):
            return ctx.table.everyone()
        required, forbidden = self._wanted(ctx)
        key = ("traits mask", frozenset(required), frozenset(forbidden))
        # traits change only with the hosts, which drops the table's state: kept per table
        return ctx.table.state(key, lambda: self._compute(ctx, required, forbidden))

    def _compute(self, ctx: Context, required: set[str], forbidden: set[str]) -> Mask:
        out = self._has(ctx, required) & self._has_none(ctx, forbidden)
        out.flags.writeable = False  # shared by every request with these traits
        return out

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        required, forbidden = self._wanted(ctx)
        out = []
        left = failed.copy()
        for trait in sorted(required):
            bad = left & ~self._has(ctx, {trait})
            out.append((Rejection("missing_trait", f"lack trait {trait}", trait), bad))
            left &= ~bad
        for trait in sorted(forbidden):
            bad = left & ~self._has_none(ctx, {trait})
            out.append((Rejection("forbidden_trait", f"carry forbidden trait {trait}", trait), bad))
            left &= ~bad
        return out
