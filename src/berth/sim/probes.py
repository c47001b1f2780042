"""The replay's probes: the instants of peak offered load, and the bounds measured there.

A probe is an event after which offered CPU (shared + pinned) or offered memory (small + huge
pages) is highest; there the report compares the hosts a policy uses with a lower bound on the
load it holds (docs/simulator.md, "Bound").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.table import HostTable
from berth.sim.bound import Bound, flavor_vectors, lower_bound
from berth.sim.trace import Trace

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass
class Probe:
    event: int  # index into the sorted event list, probed after it is processed
    label: str
    offered: dict[str, int] = field(default_factory=dict)
    bound: Bound | None = None


def load_counts(
    trace: Trace, running: npt.NDArray[np.bool_], preexisting: Mapping[str, int]
) -> dict[str, int]:
    """Flavor -> instances: the trace's requests marked `running`, plus the fleet's own."""
    counts = np.bincount(trace.flavor[running], minlength=len(trace.flavor_names))
    out = {f: int(c) for f, c in zip(trace.flavor_names, counts, strict=True) if c}
    for f, c in preexisting.items():
        out[f] = out.get(f, 0) + c
    return out


def offered_after(
    trace: Trace, ev_kind: npt.NDArray[np.int8], ev_idx: I64, k: int, preexisting: Mapping[str, int]
) -> dict[str, int]:
    """Flavor counts of what would be running after event k if every request were accepted."""
    arrived = np.zeros(len(trace), dtype=bool)
    kinds, idx = ev_kind[: k + 1], ev_idx[: k + 1]
    arrived[idx[kinds == 1]] = True
    arrived[idx[kinds == 0]] = False
    return load_counts(trace, arrived, preexisting)


def peak_probes(
    base: HostTable,
    trace: Trace,
    ev_kind: npt.NDArray[np.int8],
    ev_idx: I64,
    preexisting: Mapping[str, int],
    time_limit: float | None,
) -> list[Probe]:
    """Instants of peak offered load, with the offered load's bound (unless `time_limit` is
    None: no bounds)."""
    if ev_kind.size == 0:
        return []
    vec = flavor_vectors(base, trace.flavor_names)  # (flavors, resources)
    both = np.stack([vec[:, 0] + vec[:, 1], vec[:, 2] + vec[:, 3]], axis=1)
    sign = np.where(ev_kind == 1, 1.0, -1.0)
    level = np.cumsum(both[trace.flavor[ev_idx]] * sign[:, None], axis=0)
    peaks: dict[int, list[str]] = {}
    for r, name in enumerate(("CPU", "memory")):
        if both[:, r].any():
            peaks.setdefault(int(np.argmax(level[:, r])), []).append(name)
    out: list[Probe] = []
    for k in sorted(peaks):
        label = "peak " + " and ".join(peaks[k])
        p = Probe(
            event=k, label=label, offered=offered_after(trace, ev_kind, ev_idx, k, preexisting)
        )
        if time_limit is not None:
            p.bound = lower_bound(base, p.offered, time_limit=time_limit)
        out.append(p)
    return out


def probe_record(
    base: HostTable,
    probe: Probe,
    time: float,
    held: dict[str, int],
    used: int,
    *,
    lp: bool,
    time_limit: float | None,
) -> dict[str, Any]:
    """Used hosts and a bound on the load a policy holds, at an offered-load peak (no bound
    when `time_limit` is None)."""
    out: dict[str, Any] = {
        "label": probe.label,
        "time": time,
        "used_hosts": used,
        "held_instances": int(sum(held.values())),
        "offered_instances": int(sum(probe.offered.values())),
        "offered_bound": probe.bound.hosts if probe.bound else None,
    }
    if time_limit is not None:
        b = lower_bound(base, held, lp=lp, time_limit=time_limit)
        out["held_bound"] = b.hosts
        out["held_bound_method"] = b.method
        out["distance"] = used / b.hosts - 1 if b.hosts else 0.0
    return out
