"""A necessary condition on a purchase: capacity constraints no replay can beat (pure).

`plan-capacity` (docs/plan-capacity.md) prunes with it before any replay. A purchase ``x``
(hosts of each offered type per cluster) can meet an acceptance target ``a`` only if, for every
constraint below, the capacity the fleet then has covers the demand the target forces it to
hold. Each constraint relaxes the real problem (NUMA cells, packing and the order of arrivals
are ignored), so failing one proves the purchase fails; passing all proves nothing.

A constraint is a triple (hosts a set of flavors can use, a zone scope, a resource):

* **which hosts**: for each flavor, the hosts (existing, or one of each offered type) that could
  hold it when empty, by resources and traits (`eligible_hosts`); the flavors whose hosts lie
  within one flavor's hosts can only use those hosts (a DPDK flavor needs DPDK hosts);
* **which zone**: the requests of one availability zone (they can only use its hosts; bought
  hosts go to every cluster, so a zone gets as many of each as it has clusters), and all
  requests together;
* **the demand**: the target's requests alive at the instant their summed demand of the
  resource peaks, less the largest ones the target lets fail: ``floor((1 - a) N)`` of the
  ``N`` target requests in the window, and as many of the warm-up's.

``need(λ)`` scales the forced demand by λ ≥ 1: the planner walks the cheapest covers of
growing λ to find a purchase that passes in replay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from berth.core.model import Fleet, Host
from berth.core.table import HostTable
from berth.sim.bound import flavor_vectors, host_vectors, resource_names
from berth.sim.fleets import merge_trace
from berth.sim.measures import eligible_hosts
from berth.sim.trace import Trace

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

ANY_ZONE = "*"


@dataclass(frozen=True)
class CoverBound:
    """``matrix @ x >= need(λ)`` for every purchase ``x`` that can meet the target."""

    matrix: F64
    """(constraints, offered types): capacity one more host of each type per cluster adds."""
    forced: F64
    """(constraints,) demand the target forces the fleet to hold."""
    base: F64
    """(constraints,) capacity the existing fleet already has there."""
    labels: list[str]

    def need(self, scale: float = 1.0) -> F64:
        return scale * self.forced - self.base

    def violated(self, purchase: Sequence[int]) -> str | None:
        """The first constraint the purchase breaks (None: it may meet the target)."""
        x = np.asarray(purchase, dtype=np.float64)
        short = self.matrix @ x < self.need() - 1e-9 * np.maximum(1.0, self.forced)
        return self.labels[int(np.flatnonzero(short)[0])] if short.any() else None

    def unreachable(self) -> str | None:
        """A constraint no purchase can meet: its hosts are none of the offered types."""
        bad = (self.need() > 1e-9) & ~(self.matrix > 0).any(axis=1)
        return self.labels[int(np.flatnonzero(bad)[0])] if bad.any() else None


def cover_bound(
    trace: Trace,
    fleet: Fleet,
    offered: Mapping[str, Mapping[str, Any]],
    target_acceptance: float,
    target: Mask,
    clusters: Sequence[tuple[str, str]],
) -> CoverBound:
    """The constraints for `offered` host types (name -> Host fields without name and zone),
    bought per cluster of `clusters`, on top of `fleet`; `target` marks the trace's requests the
    acceptance target counts (e.g. on-demand)."""
    probe = merge_trace(fleet, trace)
    extra = [
        Host.model_validate({**fields, "name": f"offer:{name}", "availability_zone": ANY_ZONE})
        for name, fields in offered.items()
    ]
    table = HostTable.from_fleet(probe.model_copy(update={"hosts": [*probe.hosts, *extra]}))
    n_base, n_types = len(probe.hosts), len(extra)
    used = sorted({int(f) for f in np.unique(trace.flavor[target])})
    names = [trace.flavor_names[f] for f in used]
    masks = np.array([eligible_hosts(table, f) for f in names]).reshape(len(names), -1)
    demand = flavor_vectors(table, names)  # (used flavors, resources)
    caps = host_vectors(table)
    rnames = resource_names(table)
    zone_of_base = np.array([table.zones.words[z] for z in table.zone[:n_base]], dtype=object)
    per_zone = {z: sum(1 for idc, _ in clusters if idc == z) for z in trace.zones}
    scopes: list[tuple[str, int]] = [(ANY_ZONE, len(clusters)), *per_zone.items()]
    flavor_row = np.full(len(trace.flavor_names), -1, dtype=np.int64)
    flavor_row[used] = np.arange(len(used))
    allowed = _allowed_failures(trace, target, target_acceptance)
    rows: list[tuple[F64, float, float, str]] = []
    for mask in np.unique(masks, axis=0):
        within = (masks & ~mask).sum(axis=1) == 0  # flavors that can only use these hosts
        family = [names[i] for i in np.flatnonzero(within)]
        sel = (
            target
            & within[np.maximum(flavor_row[trace.flavor], 0)]
            & (flavor_row[trace.flavor] >= 0)
        )
        for scope, n_clusters in scopes:
            reqs = sel if scope == ANY_ZONE else sel & _zone_is(trace, scope)
            if not reqs.any():
                continue
            on_base = mask[:n_base] & ((zone_of_base == scope) if scope != ANY_ZONE else True)
            base_cap = caps[:n_base][on_base].sum(axis=0)
            per_type = caps[n_base:] * (mask[n_base:] * n_clusters)[:, None]
            vec = demand[flavor_row[trace.flavor[reqs]]]
            forced = _forced(trace, np.flatnonzero(reqs), vec, allowed)
            for r in np.flatnonzero(forced > 0):
                label = (
                    f"{rnames[r]} for {_family_text(family)}"
                    f"{'' if scope == ANY_ZONE else ' in zone ' + scope}"
                )
                rows.append(
                    (per_type[:, r].astype(np.float64), float(forced[r]), float(base_cap[r]), label)
                )
    if not rows:
        empty = np.zeros((0, n_types))
        return CoverBound(empty, np.zeros(0), np.zeros(0), [])
    return CoverBound(
        matrix=np.array([r[0] for r in rows]).reshape(len(rows), n_types),
        forced=np.array([r[1] for r in rows]),
        base=np.array([r[2] for r in rows]),
        labels=[r[3] for r in rows],
    )


def _zone_is(trace: Trace, zone: str) -> Mask:
    return trace.zone == trace.zones.index(zone)


def _family_text(family: list[str]) -> str:
    shown = ", ".join(family[:3])
    return f"{shown} (+{len(family) - 3} more)" if len(family) > 3 else shown


def _allowed_failures(trace: Trace, target: Mask, acceptance: float) -> tuple[int, int]:
    """Target requests that may fail: (in the warm-up, in the window)."""
    replayed = trace.start <= trace.horizon
    warm = int((target & replayed & trace.initial).sum())
    window = int((target & replayed & ~trace.initial).sum())
    slack = 1.0 - acceptance
    return math.floor(slack * warm + 1e-9), math.floor(slack * window + 1e-9)


def _forced(trace: Trace, reqs: I64, vec: F64, allowed: tuple[int, int]) -> F64:
    """Per resource: the peak over time of the requests' summed demand, less the largest
    `allowed` ones alive then (warm-up and window apart)."""
    start, end = trace.start[reqs], trace.end[reqs]
    horizon = trace.horizon
    live = start <= horizon
    start, end, vec, reqs = start[live], end[live], vec[live], reqs[live]
    leaves = np.isfinite(end) & (end <= horizon)
    times = np.concatenate([start, end[leaves]])
    kind = np.concatenate([np.ones(start.size), np.zeros(int(leaves.sum()))])  # departures first
    delta = np.concatenate([vec, -vec[leaves]])
    order = np.lexsort((kind, times))
    level = np.cumsum(delta[order], axis=0)
    out = np.zeros(vec.shape[1])
    warm = trace.initial[reqs]
    for r in range(vec.shape[1]):
        if not level.size or level[:, r].max() <= 0:
            continue
        t = times[order][int(np.argmax(level[:, r]))]
        alive = (start <= t) & (end > t)
        total = float(vec[alive, r].sum())
        for part, k in ((alive & warm, allowed[0]), (alive & ~warm, allowed[1])):
            if k > 0 and part.any():
                total -= float(np.sort(vec[part, r])[::-1][:k].sum())
        out[r] = max(0.0, total)
    return out
