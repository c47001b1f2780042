"""A growth forecast applied to a trace: the same day with `factor` times the requests.

`grow(trace, 1.3, seed)` keeps every request and adds a copy of a seeded 30 % of them (same
flavor, business type, zone, start and end: the same arrival pattern and lifetimes, more of
it); a factor of 2.5 gives every request one copy and half of them a second. Below 1, a seeded
share of the requests is dropped. Copies get ids ``{id}~g{k}``; a copy of a deployment-set
member joins a copy of its set (``{set}~g{k}``), so sets keep their size and only their number
grows. Pure: the same trace, factor and seed give the same result.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from berth.core.model import ServerGroup
from berth.sim.trace import Trace, TraceError

MAX_GROWTH = 20.0
"""The largest factor accepted: more is a typo, not a forecast."""


def grow(trace: Trace, factor: float, seed: int = 0) -> Trace:
    """The trace with about `factor` times its requests (module docstring)."""
    if not (0 < factor <= MAX_GROWTH) or not np.isfinite(factor):
        raise TraceError(f"--growth must be above 0 and at most {MAX_GROWTH:g}, got {factor!r}")
    if factor == 1.0 or not len(trace):
        return trace
    n = len(trace)
    rng = np.random.default_rng(seed)
    whole, frac = int(factor), factor - int(factor)
    copies = np.full(n, whole, dtype=np.int64) + (rng.random(n) < frac)
    # copy k of request i for k in 0..copies[i]-1; copy 0 is the request itself
    source = np.repeat(np.arange(n), copies)
    starts = np.concatenate([[0], np.cumsum(copies)[:-1]])
    k = np.arange(source.size) - np.repeat(starts, copies)
    order = np.lexsort((k, source, trace.start[source]))  # stable by start, then trace order
    source, k = source[order], k[order]
    ids = [
        trace.ids[i] if c == 0 else f"{trace.ids[i]}~g{c}" for i, c in zip(source, k, strict=True)
    ]
    groups, group = _grown_groups(trace, source, k)
    return replace(
        trace,
        ids=ids,
        start=trace.start[source],
        end=trace.end[source],
        flavor=trace.flavor[source],
        business=trace.business[source],
        zone=trace.zone[source],
        group=group,
        groups=groups,
        lines=trace.lines[source],
        notes=[*trace.notes, f"grown {factor:g}x (seed {seed}): {len(ids)} requests"],
    )


def _grown_groups(
    trace: Trace, source: np.ndarray, k: np.ndarray
) -> tuple[list[ServerGroup], np.ndarray]:
    """Deployment sets for the grown rows: copy k of a member joins copy k of its set."""
    old = trace.group[source]
    member = old >= 0
    if not member.any():
        return list(trace.groups), old.copy()
    pairs = sorted({(int(g), int(c)) for g, c in zip(old[member], k[member], strict=True)})
    index: dict[tuple[int, int], int] = {}
    groups: list[ServerGroup] = list(trace.groups)
    for g, c in pairs:
        if c == 0:
            index[(g, c)] = g
            continue
        base = trace.groups[g]
        index[(g, c)] = len(groups)
        groups.append(base.model_copy(update={"id": f"{base.id}~g{c}"}))
    new = old.copy()
    new[member] = [index[(int(g), int(c))] for g, c in zip(old[member], k[member], strict=True)]
    return groups, new
