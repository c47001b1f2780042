"""The host weigher interface.

A weigher returns one raw value per candidate host; higher means "more of what this weigher
measures". The engine scales each weigher's values to [0, 1] over the candidates and multiplies
by the configured weight, so a positive weight prefers high values (spread, for free RAM) and a
negative weight prefers low ones (pack).

A weigher declares when it can change an order (`applies`); the registry refuses one that
does not.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from berth.core.filters.base import Context, NoParams, Workload

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class HostWeigher(ABC):
    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    minval: ClassVar[float | None] = None
    """None: min-max scaling over the candidates. A number: as Nova's `BaseWeigher` and
    `normalize` do, each value raised to at least `minval`, then ``(x - minval) / (max -
    minval)`` (0 when max == minval): Nova's RAM, CPU, disk and I/O-ops weighers use 0, so
    max(x, 0) / max (`weighers/nova.py`)."""

    def __init__(self, params: BaseModel | None = None) -> None:
        self.params = params if params is not None else self.Params()

    @classmethod
    @abstractmethod
    def applies(cls, work: Workload) -> bool:
        """False only when the raw values are equal on every host for every request of `work`
        (they then cannot change an order): the simulator's lean replay drops the weigher.
        True when unsure."""

    @abstractmethod
    def raw(self, ctx: Context, rows: I64) -> F64:
        """Raw values for the candidate `rows` (same order)."""

    def constant(self, ctx: Context) -> bool:
        """True only when the raw values are equal on every host for this request (min-max
        scaling gives zeros, which add nothing): the engine then skips the weigher. False when
        unsure (the default)."""
        return False

    def column(self, ctx: Context) -> F64 | I64 | None:
        """The raw values of every host as one float64 or int64 array, when the weigher has
        them at hand: then ``raw(ctx, rows)`` must equal ``column(ctx)[rows].astype(float64)``
        and the engine gathers the candidates itself, in its compiled scoring, instead of
        copying them. None (the default): the engine calls `raw`. Read it, never write it."""
        return None


def normalise(values: F64) -> F64:
    """Min-max scale to [0, 1]; all-equal values scale to 0 (they cannot change the order)."""
    lo, hi = values.min(), values.max()
    if hi <= lo:
        return np.zeros_like(values)
    return (values - lo) / (hi - lo)
