"""The host filter interface and the context every filter reads.

A filter returns a boolean mask over all hosts (True = passes). It never loops over hosts in
Python, never reads global state, and takes its parameters explicitly (`Params`). `explain` is
called only after a request failed, to split the hosts it rejected by reason.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict

from berth.core.demand import Demand
from berth.core.request import RequestSpec
from berth.core.table import HostTable

Mask = npt.NDArray[np.bool_]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class Context:
    """One step of one request: the table as it is now, the request and the flavor's demand.

    Free capacities are the table's live columns: read-only for filters and weighers.
    """

    table: HostTable
    request: RequestSpec
    demand: Demand
    now: float

    @property
    def cell_free(self) -> I64:
        return self.table.cell_free

    @property
    def host_free(self) -> I64:
        return self.table.host_free


@dataclass(frozen=True)
class Rejection:
    """Why hosts failed: a stable code, a human message and, for resources, the numbers."""

    code: str
    message: str
    resource: str | None = None
    requested: float | None = None
    free: F64 | None = field(default=None, compare=False)  # per-host free amount, for "best free"


class HostFilter(ABC):
    """Base class of all host filters. Subclasses set `name` and implement `mask`."""

    name: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = NoParams
    static: ClassVar[bool] = True
    """True when the mask depends only on the request and on host attributes that claims do not
    change; the engine then computes it once per request instead of once per instance."""

    def __init__(self, params: BaseModel | None = None) -> None:
        self.params = params if params is not None else self.Params()

    @abstractmethod
    def mask(self, ctx: Context) -> Mask: ...

    def host_minimum(self, ctx: Context) -> tuple[int, int] | None:
        """``(column, minimum)`` when `mask` is exactly ``ctx.host_free[:, column] >= minimum``:
        then the engine's lean path selects the candidates in one compiled pass over the
        table (`kernels.select_rows`) instead of building this mask. None (the default):
        the engine calls `mask`."""
        return None

    def explain(self, ctx: Context, failed: Mask) -> list[tuple[Rejection, Mask]]:
        """Split `failed` (hosts this filter rejected) into reasons. Default: one reason."""
        return [(Rejection(self.name, self.describe(ctx)), failed)]

    def describe(self, ctx: Context) -> str:
        return f"rejected by {self.name}"
