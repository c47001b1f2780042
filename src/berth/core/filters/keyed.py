"""Shared shape of the filters that match `key op value` specs against per-host strings."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from berth.core.filters.base import Context, HostFilter, Mask, Rejection
from berth.core.flavors import SpecMatch
from berth.core.vocabulary import KeyedValues


def keyed_mask(store: dict[str, KeyedValues], spec: SpecMatch, n: int) -> Mask:
    """Hosts whose value for `spec.key` matches; hosts without the key fail."""
    values = store.get(spec.key)
    if values is None:
        return np.zeros(n, dtype=bool)
    return values.mask(spec)


class KeyedSpecFilter(HostFilter):
    """Every spec of the flavor must match the host's value (subclasses pick which)."""

    code: ClassVar[str]
    label: ClassVar[str]

    def _store(self, ctx: Context) -> dict[str, KeyedValues]:
        raise NotImplementedError

    def _specs(self, ctx: Context) -> tuple[SpecMatch, ...]:
        raise NotImplementedError

    def mask(self, ctx: Context) -> Mask:
        if not self._specs(ctx):
            return ctx.table.everyone()
        out = np.ones(len(ctx.table), dtype=bool)
        for spec in self._specs(ctx):
            out &= keyed_mask(self._store(ctx), spec, len(ctx.table))
        return out

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        out = []
        left = failed.copy()
        for spec in self._specs(ctx):
            bad = left & ~keyed_mask(self._store(ctx), spec, len(ctx.table))
            why = Rejection(self.code, f"{self.label} {spec.key} not {spec.op} {spec.value}")
            out.append((why, bad))
            left &= ~bad
        return out
