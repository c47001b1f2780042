"""A VM request trace held as columns: who arrives when, asking for what, leaving when.

Every reader (the Azure sample, the synthetic generator, the generic CSV/JSONL format) produces
a `Trace`. Times are seconds on the trace's own clock; a request whose start is before
`window_start` was already running when the window opened (it is placed during warm-up and
reported apart); an end of `inf` means the VM outlives the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from berth.core.errors import BerthError
from berth.core.model import Flavor, ServerGroup

F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]

DAY = 86_400.0
HOUR = 3_600.0


class TraceError(BerthError):
    """A trace cannot be read; the message names the file and the line."""


class Business(IntEnum):
    """Business type of a request (MISSION B5). Preemptible requests are low priority."""

    ON_DEMAND = 0
    AUTO_SCALING = 1
    PREEMPTIBLE = 2

    @property
    def label(self) -> str:
        return ("on-demand", "auto-scaling", "preemptible")[self.value]

    @classmethod
    def parse(cls, text: str) -> Business:
        key = text.strip().lower().replace("_", "-")
        for b in cls:
            if b.label == key:
                return b
        raise ValueError(f"unknown business type {text!r} (on-demand, auto-scaling, preemptible)")


BUSINESS_LABELS: tuple[str, ...] = tuple(b.label for b in Business)


@dataclass
class Trace:
    """Requests as columns (one row per VM), sorted by start time.

    `flavor[i]` indexes `flavor_names`; flavors defined by the trace itself are in
    `flavors` (the rest must come from the fleet file). `zone[i]` indexes `zones` (-1: any),
    `group[i]` indexes `groups` (-1: none). `lines[i]` is the source line, for error messages.
    """

    name: str
    ids: list[str]
    start: F64
    end: F64
    flavor: I32
    business: I8
    flavor_names: list[str]
    flavors: dict[str, Flavor] = field(default_factory=dict)
    zone: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    zones: list[str] = field(default_factory=list)
    group: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    groups: list[ServerGroup] = field(default_factory=list)
    clusters: list[tuple[str, str]] = field(default_factory=list)
    """(IDC, cluster) pairs the trace expects; a sizing spec repeats its hosts per cluster.
    The IDC is the hosts' availability zone. Empty = one cluster, zone 'nova'."""
    window_start: float = 0.0
    horizon: float = float("inf")
    """Events after this time are not replayed (departures of VMs that outlive the window)."""
    lines: I32 = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    source: str = ""
    citation: str | None = None
    notes: list[str] = field(default_factory=list)
    window: float = DAY
    """Length of one reporting window (seconds)."""

    def __post_init__(self) -> None:
        n = len(self.ids)
        if n and not self.zone.size:
            self.zone = np.full(n, -1, dtype=np.int32)
        if n and not self.group.size:
            self.group = np.full(n, -1, dtype=np.int32)
        if n and not self.lines.size:
            self.lines = np.arange(1, n + 1, dtype=np.int32)
        for name in ("start", "end", "flavor", "business", "zone", "group", "lines"):
            size = len(getattr(self, name))
            if size != n:
                raise ValueError(f"trace column {name} has {size} rows, not {n}")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def preemptible(self) -> npt.NDArray[np.bool_]:
        return self.business == Business.PREEMPTIBLE

    @property
    def initial(self) -> npt.NDArray[np.bool_]:
        """Requests already running when the window opens (placed during warm-up)."""
        return self.start < self.window_start

    def head(self, n: int) -> Trace:
        """The first `n` requests (by start time), with the same catalogue."""
        if n >= len(self):
            return self
        last = float(self.start[n - 1])
        return replace(
            self,
            ids=self.ids[:n],
            start=self.start[:n].copy(),
            end=self.end[:n].copy(),
            flavor=self.flavor[:n].copy(),
            business=self.business[:n].copy(),
            zone=self.zone[:n].copy(),
            group=self.group[:n].copy(),
            lines=self.lines[:n].copy(),
            horizon=min(self.horizon, last),
            notes=[*self.notes, f"limited to the first {n} requests"],
        )

    def flavor_counts(self) -> dict[str, int]:
        counts = np.bincount(self.flavor, minlength=len(self.flavor_names))
        return {name: int(c) for name, c in zip(self.flavor_names, counts, strict=True)}


def build_trace(
    name: str,
    rows: Sequence[tuple[str, float, float, str, int]],
    flavors: Sequence[Flavor],
    **kwargs: object,
) -> Trace:
    """A trace from (id, start, end, flavor name, business) rows (tests and small tools)."""
    names = [f.name for f in flavors]
    index = {n: i for i, n in enumerate(names)}
    return Trace(
        name=name,
        ids=[r[0] for r in rows],
        start=np.array([r[1] for r in rows], dtype=np.float64),
        end=np.array([r[2] for r in rows], dtype=np.float64),
        flavor=np.array([index[r[3]] for r in rows], dtype=np.int32),
        business=np.array([r[4] for r in rows], dtype=np.int8),
        flavor_names=names,
        flavors={f.name: f for f in flavors},
        **kwargs,  # type: ignore[arg-type]
    )
